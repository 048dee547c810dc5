"""libddp under the real launcher: the README's main job at 1, 2 and 4 ranks
(same checksum at every world size, only rank 0 on stdout), every collective,
a crash that ddprun reports with the worker's exit code and no hang or leftover
shared memory, ddp_fatal's error file in ddprun's failure report, a restart
that gets a fresh communicator, and the rank that failed on its own as the root
cause even when the ranks its failure broke are seen first."""
import json
import os
import re
import signal
import subprocess
import uuid

import pytest

from conftest import REPO, binary, prog, run, wait_for

# One worker runs the whole module (tests/run.sh: --dist loadgroup): its
# module-scoped fixture, once.
pytestmark = pytest.mark.xdist_group("test_ddp_ddprun")


def ddprun(nproc, cmd, timeout=120, rdzv_id=None, extra=(), env=None, **kw):
    args = [binary("ddprun"), f"--nproc-per-node={nproc}"]
    if rdzv_id:
        args += ["--rdzv-id", rdzv_id]
    return run(args + list(extra) + cmd, timeout=timeout,
               env=dict(os.environ, DDP_QUIET="1", **(env or {})), **kw)


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


def test_main_job_needs_a_world_size_that_divides_its_batch():
    """README: 3 workers do not divide the default global batch of 64 (one
    clear error); --batch 60 --samples 3840 runs them."""
    r = ddprun(3, [binary("train"), "--steps", "8"])
    assert r.returncode == 1
    assert "the global batch (64) must be a multiple of the world size (3)" in r.stderr
    r = ddprun(3, [binary("train"), "--steps", "8", "--batch", "60", "--samples", "3840"])
    assert r.returncode == 0, r.stderr
    assert "train: 3 rank(s), global batch 60 (20 per rank)" in r.stdout


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


def test_the_report_names_the_rank_the_others_waited_for():
    """Rank 1 sleeps 10 s before an all_reduce, DDP_TIMEOUT=2: ranks 0 and 2
    time out waiting for it and fail; rank 1 is stopped with the job (its
    failure after the stop is not one of its own: listed, if at all, as one
    after the stop). The root cause (a rank that timed out) says so: rank 1
    was still running, the rank the job waited on."""
    r = ddprun(3, [prog("ddp_coll"), "late", "1:10"], env={"DDP_TIMEOUT": "2"}, timeout=60)
    assert r.returncode == 3, r.stderr
    root = r.stderr[r.stderr.index("Root Cause"):]
    assert re.search(r"\n  caused_by : rank 1 \(pid (\d+)\) did not arrive within the timeout\n"
                     r"  note      : rank 1 \(pid \1\) has no failure of its own on record: it\n"
                     r"              was still running when the others gave up waiting for\n"
                     r"              it \(ddprun --hang-timeout shows where such a rank is\)\n"
                     r"  traceback : ", root), root
    for block in r.stderr.split("\n[")[1:]:
        if "rank      : 1 " in block:
            assert "note      : failed after the stop began" in block, r.stderr


def test_a_rank_the_others_timed_out_on_is_not_told_they_exited():
    """Rank 1 comes 4 s late to an all_reduce, DDP_TIMEOUT=2: rank 0 times
    out waiting for it (-ETIMEDOUT), and rank 1 fails at once with rank 0's
    reason and DDP_EPEER, whose text said "a peer rank exited or
    disconnected" while rank 0 was alive. DDP_EPEER is another rank's
    failure of any kind (libddp(3), ddp.h), and its text says so."""
    r = ddprun(2, [prog("ddp_coll"), "late", "1:4"], env={"DDP_TIMEOUT": "2"}, timeout=60)
    assert r.returncode == 3, r.stderr
    assert re.search(r"rank 0: late all_reduce: -110: all_reduce: timed out waiting for rank 1",
                     r.stderr), r.stderr
    assert ("rank 1: late all_reduce: -4007: all_reduce: rank 0 failed: all_reduce: "
            "timed out waiting for rank 1") in r.stderr, r.stderr
    text = re.search(r"rank 1: late all_reduce strerror: (.*)", r.stderr).group(1)
    assert "exited or disconnected" not in text
    assert text == "a peer rank failed (exited, disconnected or gave up on the call)"
    hdr = open(os.path.join(REPO, "worker-runtime", "include", "ddp.h")).read()
    doc = hdr[:hdr.index("DDP_EPEER = -4007")].rsplit("/*", 1)[1]
    assert "gave up on the call" in doc, doc


def test_fatal_error_reaches_the_failure_report():
    r = ddprun(2, [prog("ddp_hello"), "fatal", "loss is NaN at step 3"],
               env={"DDP_TIMEOUT": "30"})
    assert r.returncode == 1
    report = r.stderr[r.stderr.index("Root Cause"):]
    assert "rank      : 1 (local_rank: 1)" in report
    assert "error_file: <N/A>" not in report
    assert "C backtrace (most recent call first):" in report
    assert "loss is NaN at step 3" in report


def test_an_error_file_quoting_bytes_that_are_not_utf8_is_still_json(tmp_path):
    """ddp_fatal quoting a Latin-1 file name: the worker's error file, and the
    one ddprun writes for whoever launched it (TORCHELASTIC_ERROR_FILE), held
    the raw byte, and Python's json.load (torchrun's ProcessFailure) failed on
    it with UnicodeDecodeError. Each bad byte is U+FFFD now, as Python's
    errors="replace" reads it."""
    parent = tmp_path / "error.json"
    r = ddprun(2, [prog("ddp_hello"), "fatal", "cannot open /data/caf\udce9.bin"],
               env={"DDP_TIMEOUT": "30", "TORCHELASTIC_ERROR_FILE": str(parent)}, errors="replace")
    assert r.returncode == 1, r.stderr
    assert "cannot open /data/caf\ufffd.bin" in r.stderr[r.stderr.index("Root Cause"):]
    with open(parent, encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["message"]["message"].endswith("cannot open /data/caf\ufffd.bin"), doc


def test_restart_gets_a_fresh_communicator():
    rid = "drst" + uuid.uuid4().hex[:8]
    r = ddprun(3, [prog("ddp_hello"), "crash-once"], rdzv_id=rid, extra=["--max-restarts", "1"],
               env={"DDP_TIMEOUT": "30"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "attempt 1 sum 3" in r.stdout
    assert segments(rid) == []


def workers_of(pid, comm):
    """{pid: state} of pid's children running comm (zombies included)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        kids = [int(k) for k in f.read().split()]
    found = {}
    for k in kids:
        try:
            with open(f"/proc/{k}/stat") as f:
                name, rest = f.read().split(") ", 1)
        except FileNotFoundError:
            continue
        if name.split("(", 1)[1] == comm:
            found[k] = rest.split()[0]
    return found


def test_a_secondary_failure_seen_first_does_not_hide_the_primary(reaper, tmp_path):
    """ddprun is stopped (SIGSTOP) when rank 2 exits with status 7; ranks 0, 1
    and 3 then fail because rank 2 is gone (libddp marks their error files
    with the cause) and exit 3. When ddprun goes on, it reaps all four in one
    go, ranks 0 and 1 before rank 2 (children are reaped oldest first): by
    time alone rank 0 would be the root cause. Primary failures come first:
    ddprun exits 7 and names rank 2."""
    gate = tmp_path / "crash-now"
    err = tmp_path / "stderr"
    with open(err, "w") as e:
        p = reaper.popen([binary("ddprun"), "--nproc-per-node=4", prog("ddp_coll"), "crash",
                          "2", "--when", str(gate)], stdout=subprocess.DEVNULL, stderr=e,
                         env=dict(os.environ, DDP_QUIET="1", DDP_TIMEOUT="600"))
    try:
        wait_for(lambda: "rank 2: waiting for" in err.read_text(), timeout=60,
                 what="rank 2 at the gate")
        p.send_signal(signal.SIGSTOP)
        gate.touch()
        wait_for(lambda: list(workers_of(p.pid, "ddp_coll").values()) == ["Z"] * 4,
                 timeout=60, what="every rank exited while ddprun is stopped")
    finally:
        p.send_signal(signal.SIGCONT)
    assert p.wait(timeout=60) == 7, err.read_text()
    text = err.read_text()
    others, root = text[text.index("FAILED\n"):].split("Root Cause (first observed failure):")
    assert "rank      : 2 (local_rank: 2)" in root and "exitcode  : 7" in root
    assert "caused_by" not in root
    pid2 = int(re.search(r"exitcode  : 7 \(pid: (\d+)\)", root)[1])
    # The others are listed, each marked as caused by rank 2.
    for r in (0, 1, 3):
        block = others[others.index(f"rank      : {r} (local_rank: {r})"):]
        block = block[:block.index("traceback")]
        assert "exitcode  : 3" in block
        assert f"caused_by : rank 2 (pid {pid2}) exited" in block
