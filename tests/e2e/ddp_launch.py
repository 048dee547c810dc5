"""A minimal stand-in launcher for libddp's end-to-end tests: starts the ranks
of one or more "nodes" on this machine with torchrun's environment, so the
runtime can be tested without ddprun (and with deliberately wrong
environments). MASTER_PORT must name a running store (start_store): every rank
joins there in ddp_init. Every wait is bounded."""
import os
import subprocess
import time


def worker_env(rank, world, local_rank, local_world, node, nnodes, port, run_id, extra=None):
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(node), "GROUP_WORLD_SIZE": str(nnodes),
        "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0", "DDP_QUIET": "1",
    })
    env.update(extra or {})
    return env


def launch(reaper, cmd, nproc, port, run_id, nnodes=1, extra=None, per_rank=None, only=None):
    """Starts nnodes * nproc ranks (node-major numbering, like torchrun), or only
    the ranks listed in only. per_rank(rank) may return extra variables for one
    rank. Returns the Popen list."""
    procs = []
    world = nproc * nnodes
    for node in range(nnodes):
        for lr in range(nproc):
            rank = node * nproc + lr
            if only is not None and rank not in only:
                continue
            env = worker_env(rank, world, lr, nproc, node, nnodes, port, run_id, extra)
            if per_rank:
                env.update(per_rank(rank) or {})
            procs.append(reaper.popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def wait_all(procs, timeout=60):
    """(returncode, stdout, stderr) of every process; kills stragglers at the deadline."""
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        left = max(0.1, deadline - time.monotonic())
        try:
            so, se = p.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate(timeout=10)
            se += "\n[ddp_launch: killed at the test deadline]"
        out.append((p.returncode, so, se))
    return out


def start_store(reaper, tmp_path=None):
    """A standalone `ddpstore serve` on loopback, the store every rank joins at
    in ddp_init (a launcher hosts it; here the test does); returns its port."""
    import pathlib
    import tempfile
    from conftest import binary, wait_for
    if tmp_path is None:
        # the server reads nothing back from its port file: a directory that
        # goes away once the port is known will do
        with tempfile.TemporaryDirectory(prefix="ddpstore-") as d:
            return start_store(reaper, pathlib.Path(d))
    port_file = tmp_path / "store-port"
    reaper.popen([binary("ddpstore"), "serve", "--host", "127.0.0.1", "--port", "0",
                  "--port-file", str(port_file), "--quiet"])
    wait_for(lambda: port_file.exists() and port_file.read_text().strip(), timeout=10,
             what="ddpstore port file")
    return int(port_file.read_text().strip())
