"""Job steps whose shape is not one ddprun per node of the job: two tasks
per node are refused (they would claim the same node rank), a one-node step
in a three-node job is a one-node job on that step's node."""
from conftest import job_script, read
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
