"""libddp programs under real torchrun (Debian python3-torch 1.13, through
bench/launch/torchrun_fixed.py, which only fixes its -r/-t parsing on Python
3.11). torchrun 1.x hosts a PyTorch 1.x TCPStore, which closes the connection
on the 2.x handshake ddp_init's join starts with: a single-node job then meets
through shared memory alone (rank 0 says so once), a multi-node job fails
with a clear error instead of hanging."""
import os
import select
import subprocess
import textwrap
import uuid

from conftest import free_port

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DDP_BUILD", os.path.join(REPO, "build"))
PYTHON = "/usr/bin/python3"
TORCHRUN = [PYTHON, os.path.join(REPO, "bench", "launch", "torchrun_fixed.py")]
COLL = os.path.join(BUILD, "tests", "progs", "ddp_coll")
NOTICE = "speaks an older protocol than TCPStore 2.x (torchrun 1.x?)"


def clean_env(**kw):
    e = {k: v for k, v in os.environ.items()
         if not (k.startswith(("DDP_", "TORCHELASTIC_")) or k in (
             "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))}
    e.update(kw)
    return e


def test_single_node_job_runs_under_torchrun_1x():
    r = subprocess.run(TORCHRUN + ["--nproc_per_node=3", f"--master_port={free_port()}",
                                   "--no_python", COLL, "check"],
                       capture_output=True, text=True, timeout=180,
                       env=clean_env(DDP_TIMEOUT="60"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(l for l in r.stdout.splitlines() if l.startswith("[rank")) == \
        [f"[rank{i}] ok rank {i}" for i in range(3)]
    assert r.stderr.count(NOTICE) == 1, r.stderr


TORCH_STORE = textwrap.dedent("""
    import sys, time
    import torch.distributed as dist
    s = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    print(s.port, flush=True)
    time.sleep(120)
""")


def test_multi_node_job_on_a_1x_store_is_a_clear_error():
    srv = subprocess.Popen([PYTHON, "-c", TORCH_STORE], stdout=subprocess.PIPE, text=True)
    procs = []
    try:
        ready, _, _ = select.select([srv.stdout], [], [], 60)  # torch imports slowly
        assert ready, "the torch TCPStore did not start"
        port = int(srv.stdout.readline())
        for rank in range(2):  # two nodes of one rank each
            env = clean_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0",
                            LOCAL_WORLD_SIZE="1", GROUP_RANK=str(rank), GROUP_WORLD_SIZE="2",
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                            TORCHELASTIC_RUN_ID="c" + uuid.uuid4().hex[:8], DDP_TIMEOUT="600")
            procs.append(subprocess.Popen([COLL, "check"], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        for p in procs:
            # DDP_TIMEOUT far beyond this deadline: the error comes at once
            _, err = p.communicate(timeout=60)
            assert p.returncode == 1, err
            assert (f"ddp_init: the store at 127.0.0.1:{port} closed the connection during the "
                    "handshake: it does not speak PyTorch's TCPStore 2.x protocol") in err, err
    finally:
        for p in [srv] + procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
