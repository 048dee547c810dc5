"""Helpers for the multi-node tests: several ddprun agents on one machine,
each a node. Workers are small shell scripts that leave files behind (their
environment, their pid) for the test to read. Every wait is bounded."""
import os
import signal
import socket
import subprocess

from conftest import binary, free_port, pid_alive, wait_for  # noqa: F401 (re-exported)

# What a test's agents must not inherit from the test runner.
CONTRACT = [
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
]

# Short liveness settings so that loss tests end quickly (none is asserted).
FAST = "keep_alive_interval=0.2,heartbeat_timeout=2,join_timeout=30"



def record(tag='$RANK.$TORCHELASTIC_RESTART_COUNT'):
    """Shell: the worker records itself (whole files only): env.<tag>, then
    pid.<tag>, in $OUT. Tags are dot-separated numbers."""
    return (f'T="{tag}"; env > "$OUT/.env.$T"; mv "$OUT/.env.$T" "$OUT/env.$T"; '
            'echo $$ > "$OUT/.pid.$T"; mv "$OUT/.pid.$T" "$OUT/pid.$T"; ')


RECORD = record()


def all_recorded(n):
    """Shell: wait until n workers of this attempt have recorded themselves
    (so that a failure does not stop one before it has)."""
    return ('while [ "$(ls "$OUT" | grep -c "^pid\\..*\\.$TORCHELASTIC_RESTART_COUNT$")" '
            f'-lt {n} ]; do sleep 0.02; done; ')


def ipv6_loopback():
    """True when ::1 can be bound here."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items()
         if k not in CONTRACT and not k.startswith(("PET_", "SLURM_"))}
    e.update(extra)
    return e


class Agent:
    """One ddprun (one node) with its output in files."""

    def __init__(self, reaper, tmp_path, name, args, env=None, prefix=()):
        self.name = name
        self.out_path = tmp_path / f"{name}.stdout"
        self.err_path = tmp_path / f"{name}.stderr"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.p = reaper.popen([*prefix, binary("ddprun"), *args], stdout=out,
                                  stderr=err, env=env if env is not None else clean_env())
        self.rc = None

    def wait(self, timeout=30):
        """The exit status; fails the test if it does not come within timeout."""
        try:
            self.rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit within {timeout}s:\n"
                                 + self.stderr()) from None
        return self.rc

    def stderr(self):
        return self.err_path.read_text()

    def stdout(self):
        return self.out_path.read_text()

    def signal(self, sig):
        os.kill(self.p.pid, sig)


def node_args(nnodes, rank, port, nproc, script, extra=()):
    return ["--nnodes", str(nnodes), "--node-rank", str(rank), "--master-addr", "127.0.0.1",
            "--master-port", str(port), "--nproc-per-node", str(nproc), "--shutdown-timeout",
            "5", *extra, "sh", "-c", script]


def static_job(reaper, tmp_path, nprocs, script, extra=(), env=None, order=None, port=None):
    """One agent per entry of nprocs (node rank = index), started in order
    (node ranks); workers run script with OUT set to a fresh directory."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    port = port or free_port()
    env = clean_env(OUT=str(out), **(env or {}))
    agents = [None] * len(nprocs)
    for r in (order if order is not None else range(len(nprocs))):
        agents[r] = Agent(reaper, tmp_path, f"node{r}",
                          node_args(len(nprocs), r, port, nprocs[r], script, extra), env=env)
    return agents, out, port


def read_envs(out):
    """{tag as a tuple of ints: {name: value}} from the record() files (by
    default the tag is (rank, restart_count))."""
    envs = {}
    for name in os.listdir(out):
        if name.startswith("env."):
            tag = tuple(int(x) for x in name.split(".")[1:])
            with open(out / name) as f:
                envs[tag] = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    return envs


def worker_pids(out):
    return [int((out / n).read_text()) for n in os.listdir(out) if n.startswith("pid.")]


def wait_workers(out, n, timeout=30):
    """Until n workers have recorded their pid (the job is running)."""
    wait_for(lambda: len([f for f in os.listdir(out) if f.startswith("pid.")]) >= n,
             timeout=timeout, what=f"{n} workers running")


def assert_all_dead(pids, timeout=10):
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=timeout,
             what="every worker gone")


def stop_process(p):
    """SIGCONT then SIGKILL (a stopped agent in a test's teardown)."""
    if p.poll() is None:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass


def dyn_agent(reaper, tmp_path, name, endpoint, nnodes, nproc, script, conf=FAST, extra=(),
              env=None, rdzv_id="job"):
    """One node of a dynamic (c10d) job; rdzv_id None: no --rdzv-id at all."""
    ids = ["--rdzv-id", rdzv_id] if rdzv_id is not None else []
    args = ["--nnodes", nnodes, "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, *ids,
            "--rdzv-conf", conf, "--nproc-per-node", str(nproc), "--shutdown-timeout", "5",
            *extra, "sh", "-c", script]
    return Agent(reaper, tmp_path, name, args, env=env)


def listening(port, host="127.0.0.1"):
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def serve_store(reaper):
    """A `ddpstore serve` on loopback; its port."""
    port = free_port()
    reaper.popen([binary("ddpstore"), "serve", "--host", "127.0.0.1", "--port", str(port),
                  "--quiet"])
    wait_for(lambda: listening(port), what="ddpstore")
    return port


def store_get(port, key):
    """The value of key in the store at 127.0.0.1:port, or None when absent."""
    r = subprocess.run([binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "get", key],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    return r.stdout.strip() if r.returncode == 0 else None


def wait_stderr(agent, text, timeout=30):
    """Until agent's stderr holds text."""
    wait_for(lambda: text in agent.stderr(), timeout=timeout, what=f"'{text}' from {agent.name}")


def ip(*args, ns=None):
    """ip ARGS, inside namespace ns when given."""
    return subprocess.run([*enter(ns), "ip", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=20)


def enter(ns):
    """The prefix that runs a command in network namespace ns. nsenter, not
    `ip netns exec` or `ip -n`: those also remount /sys and make / a slave
    mount, which fails where / is not a mount point (a chroot)."""
    return ["nsenter", f"--net=/run/netns/{ns}"] if ns else []
