"""A node killed mid-job (its slurmd and every process of the step on it
SIGKILLed): the other nodes notice that its ddprun is gone and stop with
status 75 (a node was lost; worth submitting again). Its own module, so its
own cluster: the killed node stays down."""
from conftest import FAST_RDZV, rcs, read, start_waiting_job, wait_for_files


def test_node_killed_mid_job(cluster, tmp_path):
    jobid, out, pids = start_waiting_job(cluster, tmp_path, f"--rdzv-conf={FAST_RDZV}")
    cluster.kill("n2")
    wait_for_files(out, ["rc.0", "rc.2"], timeout=40, log=tmp_path / "job.out")
    log = read(tmp_path / "job.out")
    got = rcs(out)
    assert got == {0: "75", 2: "75"}, log
    assert "node 1 lost" in log
    # Slurm ends the job once it has given up on n2 (SlurmdTimeout=30).
    j = cluster.wait_job(jobid, timeout=90)
    assert j["JobState"] in ("FAILED", "NODE_FAIL"), j
    for host in ("n1", "n3"):
        assert not [p for p in cluster.pids(host) if cluster.comm(p) not in ("slurmd", None)]
