"""The test runner's own choices: how many tests run at a time
(tests/cores.sh: the cores this run may use, a cgroup CPU quota counted),
and what it says of a TEST_JOBS that is no number."""
import os
import subprocess

import pytest

from conftest import REPO

CORES = os.path.join(REPO, "tests", "cores.sh")
# The runs of run.sh here share its JUnit file: one at a time.
pytestmark = pytest.mark.xdist_group("test_test_runner")


def cores_under(files):
    """tests/cores.sh with /sys/fs/cgroup a tmpfs holding files (path
    relative to it -> content), in a mount namespace of its own: the
    machine's cgroups are never touched."""
    script = "set -e; mount -t tmpfs none /sys/fs/cgroup\n"
    for rel, content in files.items():
        path = f"/sys/fs/cgroup/{rel}"
        script += f"mkdir -p {os.path.dirname(path)}; echo '{content}' > {path}\n"
    script += f"exec {CORES}\n"
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if r.returncode != 0 and "unshare" in r.stderr:
        pytest.skip(f"no mount namespace here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def nproc():
    return int(subprocess.run(["nproc"], stdout=subprocess.PIPE, text=True).stdout)


@pytest.mark.parametrize("files,want", [
    ({"cpu.max": "50000 100000"}, 1),                    # v2: half a core is one
    ({"cpu.max": "250000 100000"}, 3),                   # v2: 2.5 cores are three
    ({"cpu.max": "max 100000"}, None),                   # v2: no quota
    ({"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000"}, 1),  # v1
    ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),   # v1: none
    ({}, None),                                          # no cpu controller at all
], ids=["v2-half", "v2-2.5", "v2-max", "v1-one", "v1-none", "none"])
def test_the_cores_counted_are_the_affinitys_or_fewer_under_a_quota(files, want):
    n = nproc()
    assert cores_under(files) == (n if want is None else min(n, want))


def test_a_test_jobs_that_is_no_number_is_refused_with_one_line():
    r = subprocess.run([os.path.join(REPO, "tests", "run.sh"), "unit"],
                       env=dict(os.environ, TEST_JOBS="two"), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr == "run.sh: TEST_JOBS must be a number, not 'two'\n", r.stderr


@pytest.mark.parametrize("args", [["-s"], ["-vs"], ["-xs"], ["--capture=no"],
                                  ["--capture", "no"], ["--pdb"], ["-p", "no:xdist"],
                                  ["-pno:xdist"]],
                         ids=["s", "vs", "xs", "capture-no", "capture_no", "pdb", "p-no-xdist",
                              "pno-xdist"])
def test_pytest_arguments_that_need_one_process_run_the_tests_one_at_a_time(args):
    """-s and --pdb need the tests in pytest's own process, and -p no:xdist
    turns xdist off: run.sh runs the tests one at a time for them (-p
    no:xdist was a usage error beside the -n it passed; -s showed nothing)."""
    r = subprocess.run([os.path.join(REPO, "tests", "run.sh"), "e2e", *args, "-k",
                        "no_test_has_this_name"], env=dict(os.environ, TEST_JOBS="2"),
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    assert "e2e:pytest-exit-5" in r.stdout, r.stdout  # no tests ran; no usage error (4)
    # No xdist workers (it says so, or names them under -v).
    assert "bringing up nodes" not in r.stdout and "gw0" not in r.stdout, r.stdout


def test_a_value_that_holds_an_s_keeps_the_tests_parallel():
    """-k's expression (attached: -ktest_slurm) is no -s."""
    r = subprocess.run([os.path.join(REPO, "tests", "run.sh"), "e2e", "-ktest_no_such_s"],
                       env=dict(os.environ, TEST_JOBS="2"), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if "bringing up nodes" not in r.stdout:
        import importlib.util
        if importlib.util.find_spec("xdist") is None:
            pytest.skip("no pytest-xdist here")
    assert "bringing up nodes" in r.stdout, r.stdout
