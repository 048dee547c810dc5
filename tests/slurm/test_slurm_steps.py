"""Job steps whose shape is not one ddprun per node of the job: two tasks
per node are refused (they would claim the same node rank), a one-node step
in a three-node job is a one-node job on that step's node; two jobs that
share nodes and a port are told apart. A batch script whose SLURM_STEP_*
are another job's (sbatch run from inside a step passes them on) does not
use them; a heterogeneous step's node 0 hosts the store."""
import os

from conftest import job_script, rcs, read, start_waiting_job
from test_slurm_job import RECORD, envs


FOLLOWED = "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 ddprun"


def test_two_tasks_per_node_refused(cluster, tmp_path):
    # The advice, followed literally in the same allocation, runs: a lone
    # srun --ntasks-per-node=1 (the old advice) inherits SLURM_NTASKS=6, and
    # srun ignores it with a warning.
    script = job_script(tmp_path / "job.sh",
                        "srun ddprun --nproc-per-node=2 sh -c 'echo worker ran'; rc=$?\n"
                        f"{FOLLOWED} --nproc-per-node=2 sh -c 'echo followed ran'\n"
                        "exit $rc",
                        extra="--ntasks-per-node=2")
    jobid = cluster.sbatch(script)
    j = cluster.wait_job(jobid)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "2:0", log
    assert log.count("srun started 6 tasks on 3 nodes") == 6, log
    assert f"run {FOLLOWED} ..." in log
    assert "worker ran" not in log
    assert log.count("followed ran") == 6, log
    assert "can't honor" not in log and "Ignoring" not in log, log


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
        # A job of one node hosts its store on loopback, as --nnodes 1
        # does: Slurm's first node is not looked for.
        assert e["MASTER_ADDR"] == "127.0.0.1", log
    assert f"from Slurm: --nnodes 1 --rdzv-id {jobid}.0\n" in log, log


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
    assert log.count(said) == 3 and ": another job's rendezvous store, another" in log, log
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


# What sbatch run from `srun --pty bash` on n3 passes on to the batch script
# (its default --export=ALL): that step's variables.
OTHER_STEP = {"SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n3", "SLURM_STEP_NUM_NODES": "1",
              "SLURM_STEP_NUM_TASKS": "1"}


def test_a_batch_script_of_one_node_ignores_another_jobs_step_variables(cluster, tmp_path):
    """A one-node job's script may run ddprun itself: it took the store's
    host from the inherited SLURM_STEP_NODELIST (n3, the other job's node)
    and ended with "cannot listen on n3"."""
    script = job_script(tmp_path / "job.sh",
                        "ddprun --nproc-per-node=2 sh -c "
                        "'echo rank $RANK of $WORLD_SIZE on $(hostname) run $TORCHELASTIC_RUN_ID'",
                        nodes=1, extra="--nodelist=n1")
    jobid = cluster.sbatch(script, env=cluster.env(**OTHER_STEP))
    j = cluster.wait_job(jobid, timeout=30)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "COMPLETED" and j["ExitCode"] == "0:0", log
    assert ("ddprun: warning: ignoring SLURM_STEP_*: SLURM_STEP_NODELIST=n3 is not within "
            "SLURM_JOB_NODELIST=n1: the SLURM_STEP_* variables are another job's") in log, log
    assert f"from Slurm: --nnodes 1 --rdzv-id {jobid}\n" in log, log
    for rank in range(2):
        assert f"rank {rank} of 2 on n1 run {jobid}\n" in log, log


def test_a_batch_script_of_two_nodes_with_another_jobs_step_variables_is_refused(cluster,
                                                                                 tmp_path):
    """srun forgotten in a 2-node job whose script inherited another job's
    step variables: refused at once with 2, as without them (it took the
    other job's node as the store's host and waited join_timeout there)."""
    script = job_script(tmp_path / "job.sh",
                        "ddprun --nproc-per-node=1 sh -c 'echo worker ran'", nodes=2)
    jobid = cluster.sbatch(script, env=cluster.env(**OTHER_STEP))
    j = cluster.wait_job(jobid, timeout=30)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "2:0", log
    assert ("SLURM_NNODES=2, but this is no srun step (SLURM_STEP_NUM_NODES=1 is not "
            "SLURM_NNODES=2: the SLURM_STEP_* variables are another job's") in log, log
    assert "worker ran" not in log


def test_a_heterogeneous_step_meets_at_its_first_components_node(cluster, tmp_path):
    """srun --het-group=0,1 over components n3 and n[1-2]: Slurm numbers
    the nodes component by component (n3 is node 0) but lists them sorted
    (n[1-3]). The store was looked for on n1 while n3 hosted it: every node
    waited join_timeout. A plain srun in the same script runs on component
    0 alone, a job of its own."""
    (tmp_path / "job.sh").write_text(
        "#!/bin/sh\n"
        f"#SBATCH --nodes=1 --nodelist=n3 --output={tmp_path}/job.out\n"
        "#SBATCH hetjob\n"
        "#SBATCH --nodes=2 --nodelist=n[1-2]\n"
        # Plain srun: component 0 only, the script's SLURM_HET_SIZE kept.
        "srun ddprun --nproc-per-node=1 sh -c 'echo plain rank $RANK of $WORLD_SIZE on "
        "$(hostname)'\n"
        "srun --het-group=0,1 ddprun --nproc-per-node=1 --master-port=29511 "
        "--rdzv-conf join_timeout=20 sh -c 'echo rank $RANK of $WORLD_SIZE on $(hostname)'\n")
    jobid = cluster.sbatch(tmp_path / "job.sh")
    j = cluster.wait_job(jobid, timeout=50)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "COMPLETED", log
    assert "plain rank 0 of 1 on n3\n" in log, log
    for rank, host in enumerate(["n3", "n1", "n2"]):
        assert f"rank {rank} of 3 on {host}\n" in log, log
        assert (f"from Slurm: --nnodes 3 --node-rank {rank} --master-addr n3 "
                f"--rdzv-id {jobid}.1") in log, log
