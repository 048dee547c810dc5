"""Checkpoint and carry on: README's `srun ddprun --forward-signals=SIGUSR1`
job on 3 nodes gets SIGUSR1 (scancel --signal=USR1, the signal --signal=USR1@T
sends; or the batch shell's, passed on to srun, as with --signal=B:USR1@T; or
kill(1) of one node's ddprun): every worker gets it exactly once, saves a
checkpoint, goes on, and the job ends COMPLETED with 0.

This cluster's Slurm (proctrack/linuxproc) signals every process of the
step, the workers too; ddprun sees the signal came from the step's
slurmstepd and does not send it again (under proctrack/cgroup, which signals
only ddprun, it sends it on: tests/e2e/test_launch_signals.py).
Each worker records who sent each delivery (siginfo's si_pid): a second
delivery, or one from ddprun, is what used to happen."""
import os
import signal
import time

from conftest import job_script, read, wait_for_files

# Counts SIGUSR1 with its sender, leaves ckpt.<rank> (the checkpoint) after
# each, and ends with 0 once $OUT/done exists (bounded).
WORKER = r'''
import os, signal, sys, time
out, rank = os.environ["OUT"], os.environ["RANK"]

def put(name, text):
    with open(f"{out}/.{name}", "w") as f:
        f.write(text)
    os.rename(f"{out}/.{name}", f"{out}/{name}")

signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
put(f"pid.{rank}", str(os.getpid()))
got, end = [], time.monotonic() + 120
while not os.path.exists(f"{out}/done"):
    if time.monotonic() > end:
        sys.exit(3)
    si = signal.sigtimedwait([signal.SIGUSR1], 0.1)
    if si is None:
        continue
    try:
        got.append(open(f"/proc/{si.si_pid}/comm").read().strip())
    except OSError:
        got.append(f"pid {si.si_pid}")
    put(f"ckpt.{rank}", "\n".join(got) + "\n")
'''

# README's line; BATCH_TRAP: the batch shell passes its USR1 on to srun.
SRUN = "srun ddprun --nproc-per-node=2 --forward-signals=SIGUSR1 python3 {worker}"
BATCH_TRAP = """{srun} & p=$!
trap 'kill -USR1 $p' USR1
while :; do wait $p; rc=$?; kill -0 $p 2>/dev/null || break; done
exit $rc"""


def start(cluster, tmp_path, batch_trap=False, extra=""):
    out = tmp_path / "out"
    out.mkdir()
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    srun = SRUN.format(worker=worker)
    body = BATCH_TRAP.format(srun=srun) if batch_trap else srun
    jobid = cluster.sbatch(job_script(tmp_path / "job.sh", body, extra=extra),
                           env=cluster.env(OUT=str(out)))
    wait_for_files(out, [f"pid.{r}" for r in range(6)], timeout=40, log=tmp_path / "job.out")
    return jobid, out


def ddprun_lines(tmp_path):
    return [line for line in read(tmp_path / "job.out").splitlines()
            if line.startswith("ddprun: SIGUSR1")]


def wait_until(cond, timeout, log):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"still not so after {timeout}s\n" + read(log))
        time.sleep(0.05)


def finish(cluster, tmp_path, jobid, out):
    """Once every worker has its checkpoint and every node's ddprun has
    said what it did (bounded waits): the workers end, and so does the job,
    with 0. Each worker's senders, by rank."""
    log = tmp_path / "job.out"
    wait_for_files(out, [f"ckpt.{r}" for r in range(6)], timeout=20, log=log)
    wait_until(lambda: len(ddprun_lines(tmp_path)) >= 3, 20, log)
    (out / "done").write_text("")
    j = cluster.wait_job(jobid, timeout=60)
    text = read(log)
    assert j["JobState"] == "COMPLETED" and j["ExitCode"] == "0:0", text
    assert cluster.jobcomp(jobid)["JobState"] == "COMPLETED", text
    cluster.only_slurmd_left()
    return {r: (out / f"ckpt.{r}").read_text().split("\n")[:-1] for r in range(6)}, text


def test_scancel_usr1_reaches_each_worker_once(cluster, tmp_path):
    """scancel --signal=USR1 JOB (what --signal=USR1@T sends at T): from
    slurmstepd to every process of the step, once; ddprun sends nothing."""
    jobid, out = start(cluster, tmp_path)
    cluster.run("ctl", "scancel", "--signal=USR1", jobid)
    got, log = finish(cluster, tmp_path, jobid, out)
    assert got == {r: ["slurmstepd"] for r in range(6)}, log
    assert ddprun_lines(tmp_path) == ["ddprun: SIGUSR1 from Slurm: proctrack/linuxproc "
                                      "signals every process of the step, this node's "
                                      "workers included; not sent again (the job goes "
                                      "on)"] * 3, log


def test_signal_usr1_at_time_reaches_each_worker_once(cluster, tmp_path):
    """#SBATCH --signal=USR1@110 with --time=2: slurmctld's periodic check
    (every 30 s at most) finds the job within 110 s of its end at once and
    has every process of the step signalled, as scancel does."""
    jobid, out = start(cluster, tmp_path, extra="--time=2 --signal=USR1@110")
    wait_for_files(out, [f"ckpt.{r}" for r in range(6)], timeout=90, log=tmp_path / "job.out")
    got, log = finish(cluster, tmp_path, jobid, out)
    assert got == {r: ["slurmstepd"] for r in range(6)}, log
    assert len(ddprun_lines(tmp_path)) == 3 and all(
        "from Slurm" in line for line in ddprun_lines(tmp_path)), log


def test_batch_usr1_passed_on_to_srun_reaches_each_worker_once(cluster, tmp_path):
    """scancel --batch --signal=USR1 (as --signal=B:USR1@T) signals the batch
    shell only; README's trap passes it on to srun, which has slurmstepd
    signal the step: again once per worker."""
    jobid, out = start(cluster, tmp_path, batch_trap=True)
    cluster.run("ctl", "scancel", "--batch", "--signal=USR1", jobid)
    got, log = finish(cluster, tmp_path, jobid, out)
    assert got == {r: ["slurmstepd"] for r in range(6)}, log
    assert len(ddprun_lines(tmp_path)) == 3 and all(
        "from Slurm" in line for line in ddprun_lines(tmp_path)), log


def test_kill_usr1_one_nodes_ddprun_reaches_every_worker_once(cluster, tmp_path):
    """kill -USR1 of node 1's ddprun, not Slurm: ddprun sends it to its own
    workers and, through the store, every other node's ddprun to theirs."""
    jobid, out = start(cluster, tmp_path)
    worker = int((out / "pid.2").read_text())
    ddprun = int(open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[1])
    assert open(f"/proc/{ddprun}/comm").read().strip() == "ddprun"
    os.kill(ddprun, signal.SIGUSR1)
    got, log = finish(cluster, tmp_path, jobid, out)
    assert got == {r: ["ddprun"] for r in range(6)}, log
    lines = sorted(ddprun_lines(tmp_path))
    assert lines == ["ddprun: SIGUSR1 from node 1: forwarded to 2 workers (the job goes on)"] * 2 \
        + ["ddprun: SIGUSR1: forwarded to 2 workers (the job goes on)"], log
