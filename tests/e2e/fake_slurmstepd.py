"""Stands in for a Slurm step's slurmstepd (stdlib only): named slurmstepd,
it runs ddprun as srun would (SLURM_JOB_ID, SLURM_STEP_ID and SLURM_CONF
naming a slurm.conf with ProctrackType=PROCTRACK), waits until every
OUT/ready.<r> (r < NPROC, each holding a worker's pid) is there, then sends
SIG as scancel makes slurmstepd do: with proctrack/linuxproc to every
worker and ddprun; with proctrack/cgroup (its tasks, its own children) or
proctrack/pgid (their process group) to ddprun alone. To ddprun last, once each worker has taken
its own (OUT/term.<r>, term_worker.py): a second one from ddprun would
otherwise merge with it in the kernel now and then, and go unseen. It ends
with ddprun's exit status (1 and a line on stderr if the workers were not
ready, or took nothing, within 30 s). With FAKE_STEPD_TIMES=N in its
environment it delivers SIG N times, as Slurm 22.05 does now and then at
the time limit (twice), each once ddprun has had the last one (0.3 s); 0:
never (the test signals ddprun itself).
    python3 fake_slurmstepd.py OUT NPROC SIG PROCTRACK DDPRUN ARGS..."""
import ctypes
import os
import subprocess
import sys
import time

out, nproc, sig, proctrack = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
PR_SET_NAME = 15
ctypes.CDLL(None).prctl(PR_SET_NAME, b"slurmstepd", 0, 0, 0)
conf = os.path.join(out, "slurm.conf")
with open(conf, "w") as f:
    f.write(f"ClusterName=fake\nProctrackType={proctrack}\n")
times = int(os.environ.pop("FAKE_STEPD_TIMES", "1"))
env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
env.update(SLURM_JOB_ID="12", SLURM_STEP_ID="0", SLURM_NNODES="1", SLURM_NODEID="0",
           SLURM_CONF=conf)
p = subprocess.Popen(sys.argv[5:], env=env)
ready = [os.path.join(out, f"ready.{r}") for r in range(nproc)]
end = time.monotonic() + 30
while not all(os.path.exists(r) for r in ready):
    if time.monotonic() > end or p.poll() is not None:
        print("fake_slurmstepd: the workers were not ready", file=sys.stderr)
        p.kill()
        sys.exit(1)
    time.sleep(0.02)
for k in range(times):
    if k > 0:
        time.sleep(0.3)  # ddprun's handler has run: the two stay two
    if proctrack == "proctrack/linuxproc":
        for r in ready:
            os.kill(int(open(r).read()), sig)
        took = [os.path.join(out, f"term.{r}") for r in range(nproc)]
        while not all(os.path.exists(t) and len(open(t).readlines()) > k for t in took):
            if time.monotonic() > end:
                print("fake_slurmstepd: the workers took nothing", file=sys.stderr)
                p.kill()
                sys.exit(1)
            time.sleep(0.02)
    p.send_signal(sig)
sys.exit(p.wait())
