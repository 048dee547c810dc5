"""The benches' own tools, checked for what they do, never for their timings:
storebench speaks either TCPStore dialect (STOREBENCH_DIALECT) to ddpstore, and
bench/torch2/probe.sh says in one line why PyTorch 2.x is left out. storebench
is built by `make bench`: without it, those tests skip."""
import os
import re
import subprocess

import pytest

from conftest import BUILD, REPO
from storeutil import OK, Server, cli

STOREBENCH = os.path.join(BUILD, "bench", "store", "storebench")
PROBE = os.path.join(REPO, "bench", "torch2", "probe.sh")

needs_storebench = pytest.mark.skipif(not os.access(STOREBENCH, os.X_OK),
                                      reason=f"{STOREBENCH} is not built (make bench)")


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
    s = Server()
    yield s
    assert s.close() == 0


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
