"""The benches' own tools, checked for what they do, never for their timings:
storebench speaks either TCPStore dialect (STOREBENCH_DIALECT) to ddpstore, and
bench/torch2/probe.sh says in one line why PyTorch 2.x is left out. storebench
is built by `make check-build` (and `make bench`)."""
import os
import re
import socket
import struct
import subprocess
import threading

import pytest

from conftest import BUILD, REPO
from storeutil import MAGIC, OK, V2, Server, cli, i64, recv_exact, s

# One worker runs the whole module (tests/run.sh: --dist loadgroup): its
# module-scoped fixture, once.
pytestmark = pytest.mark.xdist_group("test_bench_tools")

STOREBENCH = os.path.join(BUILD, "bench", "store", "storebench")
PROBE = os.path.join(REPO, "bench", "torch2", "probe.sh")

needs_storebench = pytest.mark.skipif(not os.access(STOREBENCH, os.X_OK),
                                      reason=f"{STOREBENCH} is not built (make check-build)")


def storebench(*args, dialect=None, io=None):
    env = dict(os.environ)
    env.pop("STOREBENCH_DIALECT", None)
    if dialect is not None:
        env["STOREBENCH_DIALECT"] = dialect
    if io is not None:
        env["STOREBENCH_IO"] = io
    return subprocess.run([STOREBENCH, *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def srv():
    server = Server()
    yield server
    assert server.close() == 0


@needs_storebench
@pytest.mark.parametrize("io", ["uv", None])  # None: io_uring where the kernel allows
@pytest.mark.parametrize("dialect", ["1", "2"])
def test_storebench_rdzv_in_either_dialect(srv, dialect, io):
    # A client in the wrong dialect (or a 2.x one without VALIDATE) gets its
    # connection closed: then the rendezvous reports errors and never ends.
    tag = f"d{dialect}{io or 'auto'}"
    r = storebench("rdzv", "127.0.0.1", str(srv.port), "16", tag, "2", dialect=dialect, io=io)
    assert r.returncode == 0, r.stderr
    assert re.search(r"rdzv_ms=[0-9.]+ .*errors=0", r.stdout), r.stdout
    got = cli(srv.addr, "get", f"rdzv/{tag}/count")
    assert (got.returncode, got.stdout) == (OK, b"16")


@needs_storebench
@pytest.mark.parametrize("dialect", ["1", "2"])
def test_storebench_ops_in_either_dialect(srv, dialect):
    r = storebench("ops", "127.0.0.1", str(srv.port), "4", "0.5", "1", dialect=dialect)
    assert r.returncode == 0, r.stderr
    m = re.search(r"ops=([0-9]+) .*errors=([0-9]+)", r.stdout)
    assert m and int(m.group(1)) > 0 and m.group(2) == "0", r.stdout


class StrictV2:
    """A store that speaks the 2.x dialect only, as PyTorch 2.x's server does:
    a connection whose first message is not VALIDATE + magic is closed. Just
    SET, GET, ADD and WAIT (what storebench sends), a thread per connection."""

    def __init__(self):
        self.lsock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.lsock.getsockname()[1]
        self.kv, self.cv = {}, threading.Condition()
        self.validated = self.refused = 0
        self.ops = set()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def key(self, c):
        return recv_exact(c, struct.unpack("<Q", recv_exact(c, 8))[0])

    def serve(self, c):
        with c:
            try:
                if recv_exact(c, 5) != bytes([V2["VALIDATE"]]) + struct.pack("<I", MAGIC):
                    with self.cv:
                        self.refused += 1
                    return
                with self.cv:
                    self.validated += 1
                while True:
                    self.request(c, recv_exact(c, 1)[0])
            except (OSError, EOFError, ConnectionError, ValueError):
                return

    def request(self, c, op):
        self.ops.add(op)
        if op == V2["SET"]:
            k, v = self.key(c), self.key(c)
            with self.cv:
                self.kv[k] = v
                self.cv.notify_all()
        elif op == V2["GET"]:
            k = self.key(c)
            with self.cv:
                c.sendall(s(self.kv[k]))
        elif op == V2["ADD"]:
            k, d = self.key(c), struct.unpack("<q", recv_exact(c, 8))[0]
            with self.cv:
                n = int(self.kv.get(k, b"0")) + d
                self.kv[k] = str(n).encode()
                self.cv.notify_all()
            c.sendall(i64(n))
        elif op == V2["WAIT"]:
            ks = [self.key(c) for _ in range(struct.unpack("<Q", recv_exact(c, 8))[0])]
            with self.cv:
                if not self.cv.wait_for(lambda: all(k in self.kv for k in ks), timeout=60):
                    raise ValueError("wait timed out")
            c.sendall(b"\0")
        else:
            raise ValueError(f"opcode {op}")

    def close(self):
        self.lsock.close()


@pytest.fixture
def strict_v2():
    srv = StrictV2()
    yield srv
    srv.close()


@needs_storebench
@pytest.mark.parametrize("io", ["uv", None])
def test_storebench_2x_dialect_against_a_2x_only_server(strict_v2, io):
    r = storebench("rdzv", "127.0.0.1", str(strict_v2.port), "8", "t", "2", dialect="2", io=io)
    assert re.search(r"rdzv_ms=[0-9.]+ .*errors=0", r.stdout), r.stdout + r.stderr
    r = storebench("ops", "127.0.0.1", str(strict_v2.port), "2", "0.3", "1", dialect="2", io=io)
    assert re.search(r"ops=[1-9][0-9]* .*errors=0", r.stdout), r.stdout + r.stderr
    assert (strict_v2.validated, strict_v2.refused) == (10, 0)
    assert strict_v2.ops == {V2["SET"], V2["GET"], V2["ADD"], V2["WAIT"]}


@needs_storebench
def test_storebench_rejects_unknown_dialect(srv):
    r = storebench("ops", "127.0.0.1", str(srv.port), "1", "0.1", dialect="3")
    assert r.returncode == 2
    assert "STOREBENCH_DIALECT must be 1 or 2" in r.stderr


def probe(root, user=None):
    cmd = ["bash", "-c", f'source "{PROBE}"; echo "$have_torch2|$torch2_ver|$torch2_why"']
    if user is not None:
        cmd = ["setpriv", "--reuid", str(user), "--regid", str(user), "--clear-groups", *cmd]
    env = dict(os.environ, TORCH2_ROOT=root)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split("|")


def test_probe_without_a_root_says_so(tmp_path):
    if os.getuid() != 0:
        pytest.skip("as a user the probe stops at 'needs root' first")
    have, ver, why = probe(str(tmp_path / "absent"))
    assert (have, ver) == ("0", "-")
    assert why == (f"no PyTorch 2.x root at {tmp_path / 'absent'} "
                   "(tests/compat/mkroot.sh sid makes one)")


def test_probe_reads_the_roots_version(tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root")
    # mkroot.sh's marker: torch may log before the version, its last line
    (tmp_path / ".ddprun-root").write_text("UCX  ERROR failed to get boot id\n2.99.0+debian\n")
    assert probe(str(tmp_path)) == ["1", "2.99.0+debian", ""]


def test_probe_as_a_user_needs_root(tmp_path):
    if os.getuid() != 0:
        have, _, why = probe(str(tmp_path))
    else:
        (tmp_path / ".ddprun-root").write_text("2.99.0+debian\n")
        os.chmod(tmp_path, 0o755)
        have, _, why = probe(str(tmp_path), user=65534)
    assert have == "0"
    assert why == "needs root (bench/torch2/in-root: unshare -m, chroot)"
