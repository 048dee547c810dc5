"""The nodelist's first host does not resolve on the nodes (its line is
taken out of the cluster's hosts file; the nodes' namespaces have no route,
so no DNS either): every node's ddprun says which name it cannot resolve
and, after join_timeout, stops (status 1) instead of hanging silently. Its own
module: the hosts file is changed."""
import os

from conftest import job_script, read


def test_unresolvable_first_host_is_named(cluster, tmp_path):
    hosts = os.path.join(cluster.dir, "hosts")
    lines = open(hosts).read().splitlines()
    # In place: the nodes have this very file bound over /etc/hosts.
    with open(hosts, "w") as f:
        f.write("".join(line + "\n" for line in lines if not line.endswith(" n1")))
    # A short join_timeout: how long ddprun keeps retrying (the name may
    # yet appear) before it gives up.
    script = job_script(tmp_path / "job.sh",
                        "srun ddprun --nproc-per-node=2 --rdzv-conf=join_timeout=5 "
                        "sh -c 'echo worker ran'")
    jobid = cluster.sbatch(script)
    j = cluster.wait_job(jobid, timeout=60)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "FAILED" and j["ExitCode"] == "1:0", log
    assert "worker ran" not in log
    said = ("error: cannot resolve the rendezvous store's host n1 (Slurm's first node of "
            "SLURM_STEP_NODELIST, which --master-addr overrides)")
    assert log.count(said) == 3, log
