"""Job steps whose shape is not one ddprun per node of the job: two tasks
per node are refused (they would claim the same node rank), a one-node step
in a three-node job is a one-node job on that step's node; two jobs that
share nodes and a port are told apart."""
import os

from conftest import job_script, rcs, read, start_waiting_job
from test_slurm_job import RECORD, address_of, envs


def test_two_tasks_per_node_refused(cluster, tmp_path):
    script = job_script(tmp_path / "job.sh",
                        "srun ddprun --nproc-per-node=2 sh -c 'echo worker ran'",
                        extra="--ntasks-per-node=2")
    jobid = cluster.sbatch(script)
    j = cluster.wait_job(jobid)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "2:0", log
    assert log.count("srun started 6 tasks on 3 nodes") == 6, log
    assert "use srun --ntasks-per-node=1" in log
    assert "worker ran" not in log


def test_one_node_step_in_three_node_job(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # The step runs on the job's second node only.
    script = job_script(tmp_path / "job.sh",
                        "srun --nodes=1 --ntasks=1 --relative=1 ddprun --nproc-per-node=2 "
                        f"sh -c '{RECORD}'")
    jobid = cluster.sbatch(script, env=cluster.env(OUT=str(out)))
    j = cluster.wait_job(jobid)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "COMPLETED", log
    got = envs(out)
    assert sorted(got) == [0, 1], log
    for e in got.values():
        assert e["HOST"] == "n2" and e["WORLD_SIZE"] == "2"
        # A one-node job passes the host on as it took it.
        assert e["MASTER_ADDR"] in ("n2", address_of(cluster, "n2")), log


def test_two_steps_one_after_the_other(cluster, tmp_path):
    """Two `srun ddprun` steps in one job, on the same port: the second is a
    job of its own (its own SLURM_STEP_ID), not confused with the first."""
    out = tmp_path / "out"
    out.mkdir()
    step = ("srun ddprun --nproc-per-node=2 --master-port=29500 "
            "sh -c 'echo \"$SLURM_STEP_ID $RANK\" > \"$OUT/step.$SLURM_STEP_ID.$RANK\"'")
    script = job_script(tmp_path / "job.sh", f"{step} && {step}")
    jobid = cluster.sbatch(script, env=cluster.env(OUT=str(out)))
    j = cluster.wait_job(jobid)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "COMPLETED" and j["ExitCode"] == "0:0", log
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"step.{s}.{r}" for s in (0, 1) for r in range(6)), log


def test_second_job_on_the_same_port_is_told_apart(cluster, tmp_path):
    """Two jobs on the same nodes, both on the default port: the second one's
    nodes reach the first one's store. Each job's run id is its own
    (SLURM_JOB_ID.SLURM_STEP_ID), so the second one says the port is another
    job's on every node and ends with 1 at once; the first one runs on. They
    used to meet as one job: "node rank 1 is claimed twice" (or "--max-restarts
    differs" where the settings differed), which named no other job."""
    jobid, out, pids = start_waiting_job(cluster, tmp_path)
    (tmp_path / "b").mkdir()
    script = job_script(tmp_path / "b" / "job.sh",
                        "srun ddprun --nproc-per-node=1 --max-restarts=1 "
                        "sh -c 'echo worker ran'")
    second = cluster.sbatch(script)
    j = cluster.wait_job(second, timeout=60)
    log = read(tmp_path / "b" / "job.out")
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "1:0", log
    said = "the port is in use"
    assert log.count(said) == 3 and "(by the rendezvous store of another job" in log, log
    assert "claimed twice" not in log and "differs" not in log and "worker ran" not in log
    assert f"--rdzv-id {second}.0" in log
    # The first job is untouched.
    assert cluster.job(jobid)["JobState"] == "RUNNING" and rcs(out) == {}
    assert all(os.path.exists(f"/proc/{p}") for p in pids)
    cluster.run("ctl", "scancel", jobid)
    cluster.wait_job(jobid, timeout=40)
    cluster.only_slurmd_left()


def test_ddprun_without_srun_in_a_three_node_job_refused(cluster, tmp_path):
    """ddprun run by the batch script of a 3-node job (srun forgotten): the
    script is no step, no other node starts ddprun, so it is refused at once
    with 2 instead of waiting join_timeout (600 s) for nodes 1 and 2."""
    script = job_script(tmp_path / "job.sh",
                        "ddprun --nproc-per-node=2 sh -c 'echo worker ran'")
    jobid = cluster.sbatch(script)
    j = cluster.wait_job(jobid, timeout=30)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "2:0", log
    assert "SLURM_NNODES=3, but this is no srun step" in log and "worker ran" not in log
