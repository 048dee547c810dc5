"""The libddp C example (examples/train.c) as a 3-node Slurm job of 6 ranks:
its collectives go between the nodes' namespaces, and it prints the same
checksum as one rank on one machine (the example's promise)."""
import re
import subprocess

from conftest import BIN, job_script, read

ARGS = "--steps 32 --batch 60 --samples 3840"


def checksum(text):
    m = re.search(r"^checksum (\S+ \S+)$", text, re.M)
    assert m, text
    return m.group(1)


def test_libddp_train_across_three_nodes(cluster, tmp_path):
    one = subprocess.run([f"{BIN}/ddprun", "--nproc-per-node=1", f"{BIN}/train", *ARGS.split()],
                         capture_output=True, text=True, timeout=120, env=cluster.env())
    assert one.returncode == 0, one.stderr
    script = job_script(tmp_path / "job.sh",
                        f"srun ddprun --nproc-per-node=2 --master-port=29500 train {ARGS}",
                        extra="--ntasks-per-node=1")
    jobid = cluster.sbatch(script)
    j = cluster.wait_job(jobid, timeout=120)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "COMPLETED" and j["ExitCode"] == "0:0", log
    assert "libddp: backend cpu, world size 6, 3 node(s)" in log
    assert "train: 6 rank(s), global batch 60 (10 per rank)" in log
    assert checksum(log) == checksum(one.stdout + one.stderr)
