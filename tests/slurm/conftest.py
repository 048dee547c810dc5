"""The Slurm suite: a real slurmctld and three slurmd nodes (cluster.sh, one
cluster per test module, torn down at its end even when a test fails), driven
as a user would: sbatch a job script, wait for the job to end (bounded), read
its output files and what `scontrol show job` says. Skipped, saying why, where
the cluster cannot be made (not root, no slurm-wlm/munge, no namespaces)."""
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("DDP_BUILD", os.path.join(REPO, "build"))
BIN = os.path.join(BUILD, "bin")
CLUSTER = os.path.join(HERE, "cluster.sh")
NODES = ["n1", "n2", "n3"]
# Short liveness settings so that loss tests end quickly (none is asserted).
FAST_RDZV = "keep_alive_interval=0.2,heartbeat_timeout=2"
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
        "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def why_not():
    """Why a cluster cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, unshare)"
    for c in ("slurmctld", "slurmd", "munged", "sbatch", "ip", "unshare"):
        if shutil.which(c) is None:
            return f"{c} not installed (.ci/deps.sh test installs slurm-wlm munge)"
    name = f"ddpslprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


class Cluster:
    def __init__(self, d):
        self.dir = d
        self.jobs = []  # submitted by the current test

    def env(self, **extra):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "PET_", "MASTER_", "RANK", "WORLD_"))}
        e["PATH"] = BIN + os.pathsep + e.get("PATH", "/usr/bin:/bin")
        e.update(extra)
        return e

    def run(self, host, *cmd, timeout=60, env=None, check=True):
        """cmd as on host (ctl for client commands); its CompletedProcess."""
        r = subprocess.run([CLUSTER, "run", self.dir, host, *cmd], capture_output=True,
                           text=True, timeout=timeout, env=env or self.env())
        if check:
            assert r.returncode == 0, f"{' '.join(cmd)}: rc {r.returncode}\n{r.stderr}"
        return r

    def sbatch(self, script, *args, env=None):
        """Submits the job script (a path); the job id."""
        r = self.run("ctl", "sbatch", "--parsable", *args, str(script), env=env)
        jobid = r.stdout.strip().split(";")[0]
        self.jobs.append(jobid)
        return jobid

    def job(self, jobid):
        """`scontrol show job` as a dict (JobState, ExitCode, ...)."""
        r = self.run("ctl", "scontrol", "show", "job", "-o", jobid)
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait_job(self, jobid, timeout=60):
        """Waits (bounded) until the job has ended; its `scontrol show job`."""
        t0 = time.monotonic()
        while True:
            j = self.job(jobid)
            if j.get("JobState") in DONE:
                return j
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"job {jobid} still {j.get('JobState')} after {timeout}s")
            time.sleep(0.2)

    def wait_state(self, jobid, state, timeout=30):
        t0 = time.monotonic()
        while (j := self.job(jobid)).get("JobState") != state:
            if time.monotonic() - t0 > timeout or j.get("JobState") in DONE:
                raise AssertionError(f"job {jobid} is {j.get('JobState')}, not {state}")
            time.sleep(0.1)
        return j

    def jobcomp(self, jobid):
        """The job's record in the job completion file (jobcomp/filetxt)."""
        path = os.path.join(self.dir, "jobcomp.txt")
        for line in open(path).read().splitlines():
            if line.startswith(f"JobId={jobid} "):
                return dict(re.findall(r"(\w+)=(\S*)", line))
        return None

    def pids(self, host):
        """Every process in host's network namespace (slurmd, job steps)."""
        tag = open(os.path.join(self.dir, "tag")).read().strip()
        r = subprocess.run(["ip", "netns", "pids", tag + host], capture_output=True, text=True)
        return [int(p) for p in r.stdout.split()]

    def comm(self, pid):
        try:
            return open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            return None

    def kill(self, host):
        subprocess.run([CLUSTER, "kill", self.dir, host], check=True, timeout=30)

    def only_slurmd_left(self, timeout=20):
        """Waits (bounded) until each node runs nothing but its slurmd."""
        t0 = time.monotonic()
        while True:
            left = {h: [f"{p}:{self.comm(p)}" for p in self.pids(h)
                        if self.comm(p) not in ("slurmd", None)] for h in NODES}
            if not any(left.values()):
                return
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"processes left on the nodes: {left}")
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster():
    reason = why_not()
    if reason:
        pytest.skip(reason)
    base = tempfile.mkdtemp(prefix="ddpslurm-")
    d = os.path.join(base, "c")
    try:
        r = subprocess.run([CLUSTER, "up", d], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"cluster.sh up: {r.stderr}"
        yield Cluster(d)
    finally:
        subprocess.run([CLUSTER, "down", d], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def job_tmpdir(monkeypatch, tmp_path):
    """The jobs' $TMPDIR (sbatch passes the environment on) is the test's:
    a node lost with every process on it leaves its ddprun's temporary
    directory behind, which must not pile up in the machine's /tmp."""
    d = tmp_path / "jobtmp"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(request):
    """A test that fails with its job still running cancels it and waits
    (bounded) until the nodes are clear, so the next test starts clean."""
    yield
    if "cluster" not in request.fixturenames:
        return
    c = request.getfixturevalue("cluster")
    jobs, c.jobs = c.jobs, []
    live = [j for j in jobs if c.job(j).get("JobState") not in DONE]
    if live:
        c.run("ctl", "scancel", *live, check=False)
        for j in live:
            c.wait_job(j, timeout=60)
        c.only_slurmd_left(timeout=60)


def job_script(path, body, nodes=3, extra=""):
    """A job script like README's: #SBATCH lines, then body (srun ddprun ...)."""
    out = os.path.join(os.path.dirname(path), "job.out")
    path.write_text("#!/bin/sh\n"
                    f"#SBATCH --job-name=train --nodes={nodes} {extra}\n"
                    f"#SBATCH --output={out}\n" + body + "\n")
    return path


def read(path):
    try:
        return open(path).read()
    except OSError:
        return ""


def wait_for_files(d, names, timeout, log=None):
    """Waits (bounded) until every one of names exists in directory d."""
    t0 = time.monotonic()
    while not all(os.path.exists(os.path.join(d, n)) for n in names):
        if time.monotonic() - t0 > timeout:
            missing = [n for n in names if not os.path.exists(os.path.join(d, n))]
            raise AssertionError(f"after {timeout}s still no {missing} in {d}\n"
                                 + (read(log) if log else ""))
        time.sleep(0.05)


def wait_for_text(path, text, timeout):
    """Waits (bounded) until file path holds text; its contents. srun relays
    the tasks' stderr on its own time: a line may land after the task's
    exit status did."""
    t0 = time.monotonic()
    while text not in read(path):
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"after {timeout}s still no {text!r} in {path}:\n{read(path)}")
        time.sleep(0.05)
    return read(path)


# Each node: ddprun in the background, its exit status in $OUT/rc.<node>,
# whole (written aside, then renamed: a test that saw the file appear read it
# empty once, between the shell's creating it and echo's writing).
# The wrapper itself outlives the SIGTERM (or USR1) that scancel sends it: Slurm
# signals every process of the step, ddprun and its workers alike, and may
# still be at it when ddprun has exited; so mv starts with both ignored (a
# SIGTERM'd mv left .rc.<node> unrenamed: three slurm tests failed now and then).
# INT too (srun passes a double Ctrl-C on to the step); and ddprun starts with
# SIGINT and SIGQUIT at their defaults, as srun would start it: sh gives a
# background job both ignored, which ddprun would keep.
NODE_SH = """#!/bin/sh
env --default-signal=INT,QUIT ddprun "$@" & p=$!
trap : TERM USR1 INT
while :; do wait $p; rc=$?; kill -0 $p 2>/dev/null || break; done
trap '' TERM USR1 INT
echo $rc > "$OUT/.rc.$SLURM_NODEID" && mv "$OUT/.rc.$SLURM_NODEID" "$OUT/rc.$SLURM_NODEID"
exit $rc
"""

# The worker records its pid, then waits; on USR1 it leaves usr1.<rank>.
WORKER = ('trap "touch \\"\\$OUT/usr1.\\$RANK\\"" USR1; echo $$ > "$OUT/.pid.$RANK"; '
          'mv "$OUT/.pid.$RANK" "$OUT/pid.$RANK"; '
          'i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done')


def start_waiting_job(cluster, tmp_path, ddprun_args="", program=None, body="{srun}"):
    """A 3-node job of 6 waiting workers (node.sh around ddprun); once all
    have started: (job id, out dir, worker pids). program: the workers'
    command line instead of WORKER's shell (it leaves $OUT/pid.$RANK too);
    body: the job script's lines, {srun} for the srun line."""
    out = tmp_path / "out"
    out.mkdir()
    node_sh = tmp_path / "node.sh"
    node_sh.write_text(NODE_SH)
    node_sh.chmod(0o755)
    if program is None:
        (tmp_path / "worker.sh").write_text(WORKER)
        program = f"sh {tmp_path / 'worker.sh'}"
    srun = f"srun {node_sh} --nproc-per-node=2 {ddprun_args} {program}"
    script = job_script(tmp_path / "job.sh", body.format(srun=srun))
    jobid = cluster.sbatch(script, env=cluster.env(OUT=str(out)))
    wait_for_files(out, [f"pid.{r}" for r in range(6)], timeout=40,
                   log=tmp_path / "job.out")
    pids = [int((out / f"pid.{r}").read_text()) for r in range(6)]
    return jobid, out, pids


def rcs(out):
    """Each node's ddprun exit status, as far as recorded."""
    return {n: (out / f"rc.{n}").read_text().strip() for n in range(3)
            if (out / f"rc.{n}").exists()}
