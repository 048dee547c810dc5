"""libddp under the real launcher: the README's main job at 1, 2 and 4 ranks
(same checksum at every world size, only rank 0 on stdout), every collective,
a crash that ddprun reports with the worker's exit code and no hang or leftover
shared memory, ddp_fatal's error file in ddprun's failure report, and a restart
that gets a fresh communicator."""
import os
import uuid

import pytest

from conftest import binary, prog, run


def ddprun(nproc, cmd, timeout=120, rdzv_id=None, extra=(), env=None):
    args = [binary("ddprun"), f"--nproc-per-node={nproc}"]
    if rdzv_id:
        args += ["--rdzv-id", rdzv_id]
    return run(args + list(extra) + cmd, timeout=timeout,
               env=dict(os.environ, DDP_QUIET="1", **(env or {})))


def segments(run_id):
    return [n for n in os.listdir("/dev/shm") if run_id in n]


@pytest.fixture(scope="module")
def train_one():
    r = ddprun(1, [binary("train")])
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_main_job_same_checksum_at_any_world_size(train_one, nproc):
    r = ddprun(nproc, [binary("train"), "--check-sync"])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"train: {nproc} rank(s), global batch 64")
    # rank 0 alone prints: one header, four epochs, one checksum
    assert len([l for l in lines if l.startswith("train:")]) == 1
    assert [l for l in lines if l.startswith(("epoch", "checksum"))] == \
        [l for l in train_one.splitlines() if l.startswith(("epoch", "checksum"))]
    assert f"parameters identical on all {nproc} rank(s) after every step" in r.stdout


def test_every_collective_under_ddprun():
    r = ddprun(4, [prog("ddp_coll"), "check"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(l for l in r.stdout.splitlines() if l.startswith("[rank")) == \
        [f"[rank{i}] ok rank {i}" for i in range(4)]


def test_crash_is_reported_with_its_exit_code_and_leaves_nothing(tmp_path):
    rid = "dcrash" + uuid.uuid4().hex[:8]
    # DDP_TIMEOUT beyond run()'s deadline: a hang fails the test
    r = ddprun(4, [prog("ddp_coll"), "crash", "2"], rdzv_id=rid, env={"DDP_TIMEOUT": "600"},
               timeout=60)
    assert r.returncode == 7, r.stderr
    assert "rank      : 2 (local_rank: 2)" in r.stderr
    assert "exitcode  : 7" in r.stderr
    assert segments(rid) == []


def test_fatal_error_reaches_the_failure_report():
    r = ddprun(2, [prog("ddp_hello"), "fatal", "loss is NaN at step 3"],
               env={"DDP_TIMEOUT": "30"})
    assert r.returncode == 1
    report = r.stderr[r.stderr.index("Root Cause"):]
    assert "rank      : 1 (local_rank: 1)" in report
    assert "error_file: <N/A>" not in report
    assert "C backtrace (most recent call first):" in report
    assert "loss is NaN at step 3" in report


def test_restart_gets_a_fresh_communicator():
    rid = "drst" + uuid.uuid4().hex[:8]
    r = ddprun(3, [prog("ddp_hello"), "crash-once"], rdzv_id=rid, extra=["--max-restarts", "1"],
               env={"DDP_TIMEOUT": "30"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "attempt 1 sum 3" in r.stdout
    assert segments(rid) == []
