"""scancel, scancel --signal=USR1 and srun's double Ctrl-C on a running
3-node job (started by conftest.start_waiting_job, whose wrapper records each
node's ddprun exit status, which the job script cannot report once scancel
has ended it). A stop signal from Slurm reaches each worker once: from
slurmstepd, not again from ddprun."""
import os
import time

import pytest

from conftest import rcs, read, start_waiting_job as start, wait_for_files

# tests/e2e/term_worker.py: takes each stop signal with sigtimedwait (not a
# handler: two close together stay two) and appends "SIG sender" (the
# sender's comm) to $OUT/term.$RANK; after the first it lives on 2 s, as one
# saving a checkpoint would, and exits 0. Bounded: 120 s in all.
TERM_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e",
                           "term_worker.py")
COUNTING_WORKER = "python3 {} \"$OUT\" --ready pid --linger 2".format(TERM_WORKER)


def terms(out):
    """What each worker took, by rank: ["SIGTERM slurmstepd"], ..."""
    return {r: (out / f"term.{r}").read_text().splitlines()
            if (out / f"term.{r}").exists() else [] for r in range(6)}


def wait_terms(out, log, timeout=20):
    """Until every worker has taken a signal (bounded); what each took."""
    wait_for_files(out, [f"term.{r}" for r in range(6)], timeout=timeout, log=log)
    return terms(out)


def nothing_left(cluster, pids):
    """Only slurmd runs in the cluster, and no worker (a zombie is gone)."""
    cluster.only_slurmd_left()
    for p in pids:
        assert not running(p), f"worker {p} is still running"


def running(pid):
    """pid exists and is no zombie (one SIGKILLed with its ddprun may wait a
    moment for its new parent to reap it)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False


def from_slurm(sig):
    return (f"received {sig} from Slurm: stopping the workers (proctrack/linuxproc "
            "signals every process of the step, this node's workers included: not sent "
            "again)")

def test_scancel_job(cluster, tmp_path):
    """`scancel JOB` SIGTERMs every process of the job: each node's ddprun
    and workers, and also srun in the batch script, which answers with
    SIGKILL to the whole step ("srun: forcing job termination"). A node's
    ddprun that has finished its shutdown by then exits 143; one that has not
    is killed. Either way nothing is left on any node."""
    jobid, out, pids = start(cluster, tmp_path)
    cluster.run("ctl", "scancel", jobid)
    j = cluster.wait_job(jobid, timeout=40)
    assert j["JobState"] == "CANCELLED"
    nothing_left(cluster, pids)
    assert set(rcs(out).values()) <= {"143"}, read(tmp_path / "job.out")


# The race that made node 0 linger showed in about a third of the runs.
@pytest.mark.parametrize("run", range(4))
def test_scancel_step_every_node_exits_143(cluster, tmp_path, run):
    """`scancel --signal=TERM JOB.0` signals the step's processes only (not
    srun): every node's ddprun stops its workers and exits 143, and so does
    the job. Every node gets SIGTERM while the others may already be
    stopping for the first worker that died of it: each still tells the
    others its failures and that it left, so nothing waits out
    --shutdown-timeout (30 s; node 0 used to, in about a third of the runs,
    for a list or a "left" that never came)."""
    jobid, out, pids = start(cluster, tmp_path)
    cluster.run("ctl", "scancel", "--signal=TERM", f"{jobid}.0")
    # Bounded below the 30 s a lingering node 0 would take.
    wait_for_files(out, [f"rc.{n}" for n in range(3)], timeout=20, log=tmp_path / "job.out")
    j = cluster.wait_job(jobid, timeout=60)
    log = read(tmp_path / "job.out")
    assert rcs(out) == {0: "143", 1: "143", 2: "143"}, log
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "143:0", log
    nothing_left(cluster, pids)


def test_scancel_usr1_ends_the_job_today(cluster, tmp_path):
    """Slurm sends USR1 to every process of the step. USR1 is not among
    ddprun's handled signals by default, so a node's ddprun dies of it (138),
    taking its workers with it, unless it first saw another node's ddprun die
    of it: then it stops as for a lost node (75). Until notify-only signals
    land, the job ends."""
    jobid, out, pids = start(cluster, tmp_path)
    cluster.run("ctl", "scancel", "--signal=USR1", jobid)
    j = cluster.wait_job(jobid, timeout=60)
    log = read(tmp_path / "job.out")
    wait_for_files(out, [f"rc.{n}" for n in range(3)], timeout=20, log=tmp_path / "job.out")
    got = set(rcs(out).values())
    assert "138" in got and got <= {"138", "75"}, log
    assert j["JobState"] == "FAILED" and j["ExitCode"] in ("138:0", "75:0"), log
    cluster.only_slurmd_left()


def test_scancel_usr1_handled_stops_the_workers_today(cluster, tmp_path):
    """With USR1 in --signals-to-handle (README's script) the workers get it
    and may checkpoint, but ddprun then stops them like on SIGTERM: after
    --shutdown-timeout every node exits 138."""
    jobid, out, pids = start(cluster, tmp_path,
                             "--signals-to-handle=SIGTERM,SIGINT,SIGUSR1 --shutdown-timeout=2")
    cluster.run("ctl", "scancel", "--signal=USR1", jobid)
    j = cluster.wait_job(jobid, timeout=40)
    log = read(tmp_path / "job.out")
    wait_for_files(out, [f"usr1.{r}" for r in range(6)], timeout=10, log=tmp_path / "job.out")
    wait_for_files(out, [f"rc.{n}" for n in range(3)], timeout=20, log=tmp_path / "job.out")
    assert rcs(out) == {0: "138", 1: "138", 2: "138"}, log
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "138:0", log
    assert log.count(from_slurm("SIGUSR1")) == 3, log
    nothing_left(cluster, pids)


# ---- a stop signal from Slurm reaches each worker once ----------------------------
# This cluster's slurmstepd (proctrack/linuxproc) signals every process of the
# step, ddprun and its workers alike (proctrack/cgroup, Slurm's default, only
# ddprun: tests/e2e/test_launch_signals.py's stand-in). ddprun stops the
# job as for any signal, but sends the workers nothing: they used to get it
# twice, once from Slurm and once from ddprun.


@pytest.mark.parametrize("run", range(2))
def test_scancel_step_sigterm_reaches_each_worker_once(cluster, tmp_path, run):
    """`scancel --signal=TERM JOB.0`: every worker takes SIGTERM from
    slurmstepd alone and ends (after 2 s); every node exits 143, as does
    the job, and nothing is left."""
    jobid, out, pids = start(cluster, tmp_path, program=COUNTING_WORKER)
    cluster.run("ctl", "scancel", "--signal=TERM", f"{jobid}.0")
    log = tmp_path / "job.out"
    wait_terms(out, log)
    wait_for_files(out, [f"rc.{n}" for n in range(3)], timeout=30, log=log)
    j = cluster.wait_job(jobid, timeout=60)
    text = read(log)
    assert terms(out) == {r: ["SIGTERM slurmstepd"] for r in range(6)}, text
    assert rcs(out) == {0: "143", 1: "143", 2: "143"}, text
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "143:0", text
    assert text.count(from_slurm("SIGTERM")) == 3, text
    nothing_left(cluster, pids)


def test_scancel_job_sigterm_reaches_each_worker_once(cluster, tmp_path):
    """`scancel JOB`: slurmstepd sends SIGCONT and SIGTERM to every process
    of the step, and srun, SIGTERMed too, has the step SIGKILLed soon after:
    each worker took SIGTERM once, from Slurm, before it; nothing is left."""
    jobid, out, pids = start(cluster, tmp_path, program=COUNTING_WORKER)
    cluster.run("ctl", "scancel", jobid)
    j = cluster.wait_job(jobid, timeout=40)
    text = read(tmp_path / "job.out")
    assert j["JobState"] == "CANCELLED", text
    nothing_left(cluster, pids)
    # A second SIGTERM came, if at all, from ddprun within milliseconds:
    # before the SIGKILL, which goes through slurmctld.
    assert terms(out) == {r: ["SIGTERM slurmstepd"] for r in range(6)}, text
    assert set(rcs(out).values()) <= {"143"}, text


# Ctrl-C twice within a second: srun has the step signalled with SIGINT,
# then forces its end (SIGKILL). srun runs in the foreground of the script,
# as at a terminal; a helper sends the two SIGINTs once the workers run.
CTRL_C_TWICE = """me=$$
( while [ "$(ls "$OUT" | grep -c '^pid\\.')" -lt 6 ]; do sleep 0.1; done
  kill -INT $me; sleep 0.3; kill -INT $me ) &
exec {srun}"""


def test_srun_ctrl_c_twice_reaches_each_worker_once(cluster, tmp_path):
    """srun passes a double Ctrl-C on to the step: every worker takes SIGINT
    from slurmstepd alone (not again from ddprun, nor SIGTERM when another
    node's end or loss reaches its ddprun), before srun's SIGKILL ends the
    step; each ddprun that got to its end exits 130; nothing is left."""
    jobid, out, pids = start(cluster, tmp_path, program=COUNTING_WORKER, body=CTRL_C_TWICE)
    log = tmp_path / "job.out"
    wait_terms(out, log)
    cluster.wait_job(jobid, timeout=60)
    nothing_left(cluster, pids)
    text = read(log)
    assert "srun: sending Ctrl-C to StepId=" in text, text
    assert terms(out) == {r: ["SIGINT slurmstepd"] for r in range(6)}, text
    assert set(rcs(out).values()) <= {"130", "137"}, text


# ---- Slurm sends the stop signal again -------------------------------------------
# As Slurm 22.05 does now and then (the time limit), and srun when a double
# Ctrl-C comes again: here a second scancel --signal of the step, which
# slurmstepd delivers the same way.

def gone(pids, timeout=20):
    t0 = time.monotonic()
    while any(running(p) for p in pids):
        assert time.monotonic() - t0 < timeout, f"workers {pids} still running"
        time.sleep(0.05)


def done(out):
    """The ranks whose term_worker.py ended by itself (not killed)."""
    return {r for r in range(6) if (out / f"done.{r}").exists()}


def test_scancel_step_int_twice_is_no_second_ctrl_c(cluster, tmp_path):
    """The step's second SIGINT is Slurm's, not the user's second Ctrl-C: the
    workers (5 s to stop) are not killed, every node exits 130."""
    jobid, out, pids = start(cluster, tmp_path,
                             program=f"python3 {TERM_WORKER} \"$OUT\" --ready pid --linger 5")
    log = tmp_path / "job.out"
    cluster.run("ctl", "scancel", "--signal=INT", f"{jobid}.0")
    wait_terms(out, log)
    cluster.run("ctl", "scancel", "--signal=INT", f"{jobid}.0")
    wait_for_files(out, [f"rc.{n}" for n in range(3)], timeout=30, log=log)
    cluster.wait_job(jobid, timeout=60)
    text = read(log)
    assert rcs(out) == {0: "130", 1: "130", 2: "130"}, text
    assert done(out) == set(range(6)), text
    assert "second SIGINT" not in text, text
    assert all(t and set(t) == {"SIGINT slurmstepd"} for t in terms(out).values()), text
    nothing_left(cluster, pids)


# Node 0's workers (ranks 0 and 1) end at once on SIGTERM, the others take 4 s.
STAGGERED_WORKER = ("sh -c '[ $RANK -lt 2 ] && L=0 || L=4; "
                    f"exec python3 {TERM_WORKER} \"$OUT\" --ready pid --linger $L'")


def test_scancel_step_again_once_node_0s_workers_exited(cluster, tmp_path):
    """The second SIGTERM comes once node 0's workers have exited, while
    node 0, the store's host, waits for the others to stop theirs and leave:
    it is no further signal, and node 0 still waits (it closed the store at
    once, and the other nodes lost it in the middle of their stop). Every
    node exits 143."""
    jobid, out, pids = start(cluster, tmp_path, program=STAGGERED_WORKER)
    log = tmp_path / "job.out"
    cluster.run("ctl", "scancel", "--signal=TERM", f"{jobid}.0")
    gone(pids[:2])
    time.sleep(0.5)  # node 0 has reaped them, and waits for the others
    cluster.run("ctl", "scancel", "--signal=TERM", f"{jobid}.0")
    wait_for_files(out, [f"rc.{n}" for n in range(3)], timeout=30, log=log)
    cluster.wait_job(jobid, timeout=60)
    text = read(log)
    assert rcs(out) == {0: "143", 1: "143", 2: "143"}, text
    assert "lost the rendezvous store" not in text, text
    assert done(out) == set(range(6)), text
    assert "received SIGTERM from Slurm again: this node is ending for it" in text, text
    nothing_left(cluster, pids)
