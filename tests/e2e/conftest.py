"""Shared helpers for the end-to-end tests: where the binaries are, free ports,
bounded waits, and process-tree checks. Every wait here is bounded."""
import os
import random
import signal
import shutil
import socket
import tempfile
import subprocess
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DDP_BUILD", os.path.join(REPO, "build"))
BIN = os.path.join(BUILD, "bin")
PROGS = os.path.join(BUILD, "tests", "progs")
PYTHON = "/usr/bin/python3"


def binary(name):
    """Path of a built program in build/bin (ddprun, ddpstore, train)."""
    path = os.path.join(BIN, name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built (run make check-build)")
    return path


def prog(name):
    """Path of a test program built from tests/progs/<name>.c."""
    path = os.path.join(PROGS, name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built (run make check-build)")
    return path


def pytest_configure(config):
    # pytest-xdist registers it too; without xdist (TEST_JOBS=1 where it is
    # missing) the mark is known all the same.
    config.addinivalue_line("markers", "xdist_group(name): one worker runs the group")


def bindable(family, port):
    """Can a store listen on family's wildcard at port (a family this host
    lacks does not count)?"""
    try:
        s = socket.socket(family)
    except OSError:
        return True
    with s:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind(("0.0.0.0" if family == socket.AF_INET else "::", port))
        except OSError:
            return False
    return True


def free_port(family=socket.AF_INET, host="127.0.0.1"):
    """A port nothing holds, below the kernel's ephemeral range: a port from
    that range may be taken by any other socket's bind(0) (another test's
    store, an outgoing connection) between this pick and the agents' bind
    (a CI run once found its endpoint port taken so; tests run two at once).
    Free on both families: a store listens on every address of a name."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    rng = random.Random()
    for _ in range(200):  # bounded; each try is one bind
        port = rng.randrange(max(1024, low - 8000), low)
        if all(bindable(f, port) for f in (socket.AF_INET, socket.AF_INET6)):
            return port
    with socket.socket(family, socket.SOCK_STREAM) as s:  # a crowded range: the kernel's
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for(pred, timeout=10.0, interval=0.02, what="condition"):
    """Poll pred() until it returns a true value or timeout passes (then fail)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def proc_state(pid):
    """pid's state letter in /proc/<pid>/stat (R, S, T, Z ...)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def pid_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        return proc_state(pid) not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def may_trace_any():
    """Whether ddprun (this user) may ptrace a process that does not name it
    (a worker's own child): no Yama, its ptrace_scope 0, or 1-2 with
    CAP_SYS_PTRACE, as launcher/proc_info.c decides."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return True
    if scope <= 0:
        return True
    with open("/proc/self/status") as f:
        caps = [l.split()[1] for l in f if l.startswith("CapEff:")]
    return scope < 3 and bool(caps) and bool(int(caps[0], 16) >> 19 & 1)


def run(cmd, timeout=60, **kw):
    """subprocess.run with a timeout and captured text output."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    return subprocess.run(cmd, timeout=timeout, **kw)


def make_vars():
    """The make variables (SAN=, CUDA=) the current build was made with."""
    try:
        with open(os.path.join(BUILD, "make.vars")) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def _default_signals():
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


class Reaper:
    """Kills every process group it was given when the test ends."""

    def __init__(self):
        self.procs = []

    def popen(self, cmd, **kw):
        kw.setdefault("start_new_session", True)
        # The suite may itself run under nohup (SIGHUP ignored, inherited by
        # every child), or as a background job of a shell without job
        # control (SIGINT and SIGQUIT ignored): ddprun then rightly leaves
        # them ignored, and a test that sends one waits for good. Give each
        # child the default dispositions; a test wanting nohup sets it in its
        # own preexec_fn.
        kw.setdefault("preexec_fn", _default_signals)
        p = subprocess.Popen(cmd, **kw)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass


@pytest.fixture
def reaper():
    r = Reaper()
    yield r
    r.cleanup()


@pytest.fixture(autouse=True)
def private_tmpdir(monkeypatch, tmp_path):
    """Every test's own $TMPDIR: what ddprun keeps there (the error files a
    failure report names, what a kill -9 leaves) goes with the test's
    directory, not into the machine's /tmp."""
    d = tmp_path / "tmpdir"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    return d


@pytest.fixture
def short_tmpdir(monkeypatch):
    """A $TMPDIR short enough for Python multiprocessing's Unix sockets (a
    fork server's, a DataLoader's shared batches): under the test's own, the
    path is too long ("AF_UNIX path too long"). Removed after the test."""
    d = tempfile.mkdtemp(prefix="ddpt", dir="/tmp")
    monkeypatch.setenv("TMPDIR", d)
    yield d
    shutil.rmtree(d, ignore_errors=True)
