"""The test runner's own choices: how many tests run at a time
(tests/cores.sh: the cores this run may use, a cgroup CPU quota counted),
and what it says of a TEST_JOBS that is no number."""
import os
import subprocess

import pytest

from conftest import REPO

CORES = os.path.join(REPO, "tests", "cores.sh")


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
