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
never (the test signals ddprun itself). With FAKE_STEPD_AFTER_EXIT=K the
K-th delivery (from 1) and those after it wait until every worker has
exited (and been reaped): Slurm's may come after workers that stopped fast,
or ended, while ddprun leaves the job. With
FAKE_STEPD_NODE=ID/N, ddprun is node ID of a step of N nodes
(SLURM_NODEID, SLURM_NNODES) and its workers are ranks ID*NPROC on.
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
after_exit = int(os.environ.pop("FAKE_STEPD_AFTER_EXIT", "0")) or times + 1
node, nnodes = (int(x) for x in os.environ.pop("FAKE_STEPD_NODE", "0/1").split("/"))
env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
env.update(SLURM_JOB_ID="12", SLURM_STEP_ID="0", SLURM_NNODES=str(nnodes),
           SLURM_NODEID=str(node), SLURM_CONF=conf)
p = subprocess.Popen(sys.argv[5:], env=env)
ranks = range(node * nproc, (node + 1) * nproc)
ready = [os.path.join(out, f"ready.{r}") for r in ranks]
end = time.monotonic() + 30


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


while not all(os.path.exists(r) for r in ready):
    if time.monotonic() > end or p.poll() is not None:
        print("fake_slurmstepd: the workers were not ready", file=sys.stderr)
        p.kill()
        sys.exit(1)
    time.sleep(0.02)
pids = {r: int(open(f).read()) for r, f in zip(ranks, ready)}
for k in range(times):
    if k + 1 >= after_exit:
        while any(alive(x) for x in pids.values()):
            if time.monotonic() > end:
                print("fake_slurmstepd: the workers did not exit", file=sys.stderr)
                p.kill()
                sys.exit(1)
            time.sleep(0.02)
    if k > 0 or k + 1 >= after_exit:
        time.sleep(0.3)  # ddprun's handler has run (its reaping): the two stay two
    if proctrack == "proctrack/linuxproc":
        took = []
        for r, x in pids.items():
            try:
                os.kill(x, sig)
                took.append(os.path.join(out, f"term.{r}"))
            except ProcessLookupError:
                pass  # exited: Slurm signals what is left of the step
        while not all(os.path.exists(t) and len(open(t).readlines()) > k for t in took):
            if time.monotonic() > end:
                print("fake_slurmstepd: the workers took nothing", file=sys.stderr)
                p.kill()
                sys.exit(1)
            time.sleep(0.02)
    p.send_signal(sig)
sys.exit(p.wait())
