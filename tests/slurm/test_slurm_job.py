"""sbatch --nodes=3 with README's `srun ddprun` line: one job of 6 workers,
ranks in node order, MASTER_ADDR from the nodelist's first host; a worker
that fails on the second node stops every node, and Slurm reports the
worker's exit status."""
import os

from conftest import NODES, job_script, read

# The worker records its host name and environment (whole files only).
RECORD = ('hostname > "$OUT/.host.$RANK"; env >> "$OUT/.host.$RANK"; '
          'mv "$OUT/.host.$RANK" "$OUT/env.$RANK"')


def envs(out):
    got = {}
    for name in os.listdir(out):
        if name.startswith("env."):
            lines = open(os.path.join(out, name)).read().splitlines()
            e = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
            e["HOST"] = lines[0]
            got[int(name[4:])] = e
    return got


def address_of(cluster, host):
    for line in open(os.path.join(cluster.dir, "hosts")):
        addr, name = line.split()
        if name == host:
            return addr
    raise AssertionError(f"{host} not in the cluster's hosts file")


def test_three_nodes_one_job_of_six(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = job_script(tmp_path / "job.sh",
                        "srun ddprun --nproc-per-node=2 --master-port=29500 "
                        f"sh -c '{RECORD}'", extra="--ntasks-per-node=1")
    jobid = cluster.sbatch(script, env=cluster.env(OUT=str(out)))
    j = cluster.wait_job(jobid)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "COMPLETED" and j["ExitCode"] == "0:0", log
    got = envs(out)
    assert sorted(got) == list(range(6)), log
    for rank, e in got.items():
        node = rank // 2
        assert e["HOST"] == NODES[node]
        assert e["GROUP_RANK"] == str(node) and e["LOCAL_RANK"] == str(rank % 2)
        assert e["WORLD_SIZE"] == "6" and e["GROUP_WORLD_SIZE"] == "3"
        # n1, the nodelist's first host, as a numeric address.
        assert e["MASTER_ADDR"] == address_of(cluster, "n1")
        assert e["MASTER_PORT"] == "29500"
        assert e["SLURM_JOB_ID"] == jobid
        # The run id is the job's step, as `--rdzv-id $SLURM_JOB_ID` would.
        assert e["TORCHELASTIC_RUN_ID"] == f"{jobid}.0"
    for node in range(3):
        assert (f"from Slurm: --nnodes 3 --node-rank {node} --master-addr n1 "
                f"--rdzv-id {jobid}.0") in log


def test_worker_failing_on_node_two_stops_every_node(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # Rank 3 (node 2, n2) fails with 7 once all six have started; the
    # others would run for a minute.
    worker = (f'{RECORD}; '
              'if [ "$RANK" = 3 ]; then while [ "$(ls "$OUT" | grep -c "^env")" -lt 6 ]; '
              'do sleep 0.05; done; exit 7; fi; exec sleep 60')
    script = job_script(tmp_path / "job.sh",
                        f"srun ddprun --nproc-per-node=2 sh -c '{worker}'")
    jobid = cluster.sbatch(script, env=cluster.env(OUT=str(out)))
    j = cluster.wait_job(jobid, timeout=50)
    log = read(tmp_path / "job.out")
    # The worker's status, not 1, in scontrol and in the completion record
    # (what sacct shows where accounting is kept).
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "7:0", log
    assert cluster.jobcomp(jobid)["ExitCode"] == "7:0"
    # Every node's ddprun exited with the worker's status.
    for node, host in enumerate(NODES):
        assert f"srun: error: {host}: task {node}: Exited with exit code 7" in log, log
    cluster.only_slurmd_left()
