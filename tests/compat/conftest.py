"""Every compat test that takes `pt` runs once per PyTorch (tests/compat/
torchroot.py): host 1.13, trixie 2.6, sid's newest; a version whose root is
absent is skipped with the reason. A test marked torch_ends runs on the
oldest and the newest only. The versions that ran are written to
$DDP_BUILD/tests/compat-versions for tests/run.sh's summary line."""
import fcntl
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(HERE, "..", "e2e")
sys.path[:0] = [HERE, E2E]
import torchroot  # noqa: E402

# tests/e2e's helpers (mnutil, the netns fixture) import `conftest`, which is
# this module when the compat suite runs: it re-exports e2e's conftest.
_spec = importlib.util.spec_from_file_location("e2e_conftest", os.path.join(E2E, "conftest.py"))
_e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_e2e)
binary, prog, free_port, wait_for, pid_alive, run, may_trace_any = (
    _e2e.binary, _e2e.prog, _e2e.free_port, _e2e.wait_for, _e2e.pid_alive, _e2e.run,
    _e2e.may_trace_any)
Reaper, reaper, private_tmpdir, short_tmpdir = (_e2e.Reaper, _e2e.reaper, _e2e.private_tmpdir,
                                               _e2e.short_tmpdir)

_ran = set()


def pytest_configure(config):
    _e2e.pytest_configure(config)
    config.addinivalue_line("markers", "torch_ends: only the oldest and the newest PyTorch "
                            "(torchroot.params)")


def pytest_generate_tests(metafunc):
    if "pt" in metafunc.fixturenames:
        ends = metafunc.definition.get_closest_marker("torch_ends") is not None
        metafunc.parametrize("pt", torchroot.params(ends=ends))


def pytest_runtest_setup(item):
    pt = getattr(item, "callspec", None) and item.callspec.params.get("pt")
    if pt is not None and pt.version:
        _ran.add(pt.version)


def pytest_sessionfinish(session):
    """Adds this process's versions to the file: with pytest-xdist each
    worker ran some of the tests (tests/run.sh removes the file first)."""
    if not _ran:
        return
    d = os.path.join(torchroot.BUILD, "tests")
    os.makedirs(d, exist_ok=True)
    key = lambda v: [int(x) if x.isdigit() else 0 for x in v.split(".")]  # noqa: E731
    with open(os.path.join(d, "compat-versions"), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        ran = _ran | {v.strip() for v in f.read().split(",") if v.strip()}
        f.truncate(0)
        f.write(", ".join(sorted(ran, key=key)) + "\n")
