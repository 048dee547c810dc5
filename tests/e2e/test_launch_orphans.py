"""What a worker leaves outside its process group, and what a killed ddprun
leaves on disk (issue 11, items 6, 7, 10, 11):

- a process that leaves the worker's group (setsid, a daemon's double fork,
  setpgid(0, 0)) dies with the job: when the workers succeed, after a clean
  SIGTERM, and after `kill -9 ddprun` (the watchdog finds it by the job's
  DDP_SHM_NONCE);
- after `kill -9 ddprun` the watchdog removes the job's /dev/shm segment and
  its temporary $TMPDIR/ddprun_XXXXXX;
- a worker that outlives SIGKILL (D state) is named with its state and wchan
  and ddprun exits anyway. The real case: a read of a FUSE file whose server
  took the request and never answers (fuse_stall.py, in a mount namespace of
  the test's own; skipped where FUSE cannot be mounted). Everywhere else,
  DDPRUN_TEST_NO_SIGKILL=1 (a test hook) keeps ddprun's SIGKILL from the
  workers, which then look to ddprun exactly like ones in D state."""
import os
import re
import signal
import subprocess
import sys
import shutil
import uuid

import pytest

from conftest import binary, pid_alive, prog, run, wait_for
from mnutil import clean_env, static_job

# The worker starts one process that escapes its group as MODE says, writes
# its pid to OUT/esc.RANK, then waits to be stopped.
ESCAPE = r'''
import os, sys, time
mode, out, rank = sys.argv[1], sys.argv[2], os.environ["RANK"]

def escaped():
    with open(f"{out}/esc.{rank}.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(f"{out}/esc.{rank}.tmp", f"{out}/esc.{rank}")
    time.sleep(1000)
    os._exit(0)

if os.fork() == 0:
    if mode == "setsid":
        os.setsid()
        escaped()
    if mode == "daemon":  # the double fork of a daemon: the middle one exits
        os.setsid()
        if os.fork() == 0:
            escaped()
        os._exit(0)
    os.setpgid(0, 0)
    escaped()
if len(sys.argv) > 3:  # "exit": end once the escaped process is there
    while not os.path.exists(f"{out}/esc.{rank}"):
        time.sleep(0.01)
    sys.exit(0)
time.sleep(1000)
'''

MODES = ["setsid", "daemon", "setpgid"]


def start_escaping(reaper, tmp_path, mode, nproc=2):
    out = tmp_path / "out"
    out.mkdir()
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", str(nproc), "--shutdown-timeout",
                      "5", sys.executable, "-c", ESCAPE, mode, str(out)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: all((out / f"esc.{r}").exists() for r in range(nproc))
             or p.poll() is not None, timeout=30, what="escaped processes")
    assert p.poll() is None, p.communicate()
    pids = [int((out / f"esc.{r}").read_text()) for r in range(nproc)]
    assert all(pid_alive(x) for x in pids)
    return p, pids


def kill_left(pids):
    """Ours to clean up when the launcher did not (the test then fails)."""
    for x in pids:
        if pid_alive(x):
            os.kill(x, signal.SIGKILL)


@pytest.mark.parametrize("mode", MODES)
def test_escaped_processes_die_with_kill_9_of_ddprun(reaper, tmp_path, mode):
    p, pids = start_escaping(reaper, tmp_path, mode)
    try:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        for x in pids:
            wait_for(lambda: not pid_alive(x), timeout=20, what=f"escaped pid {x} to die")
    finally:
        kill_left(pids)


@pytest.mark.parametrize("mode", MODES)
def test_escaped_processes_die_when_ddprun_stops_on_sigterm(reaper, tmp_path, mode):
    p, pids = start_escaping(reaper, tmp_path, mode)
    try:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 128 + signal.SIGTERM, err
        for x in pids:
            wait_for(lambda: not pid_alive(x), timeout=20, what=f"escaped pid {x} to die")
        assert "killed the processes the workers left outside their process groups" in err
    finally:
        kill_left(pids)


def test_escaped_processes_die_when_the_workers_succeed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = run([binary("ddprun"), "--nproc-per-node", "2", sys.executable, "-c", ESCAPE,
             "daemon", str(out), "exit"], timeout=60)
    pids = [int((out / f"esc.{rank}").read_text()) for rank in range(2)]
    try:
        assert r.returncode == 0, r.stderr
        for x in pids:
            wait_for(lambda: not pid_alive(x), timeout=20, what=f"escaped pid {x} to die")
        assert "killed the processes the workers left outside their process groups" \
            in r.stderr
    finally:
        kill_left(pids)


def test_a_process_started_to_outlive_the_job_as_ddprun_1_says_does(tmp_path):
    """ddprun(1), DIFFERENCES FROM TORCHRUN: a process that must outlive the
    job (a background upload) is started in a session of its own without
    DDP_SHM_NONCE in its environment: it finishes its work after the job
    has ended, as under torchrun."""
    done = tmp_path / "uploaded"
    worker = ("import os, subprocess, sys; "
              "env = {k: v for k, v in os.environ.items() if k != 'DDP_SHM_NONCE'}; "
              "subprocess.Popen(['sh', '-c', 'sleep 1; echo ok > \"$1\"', 'sh', sys.argv[1]], "
              "start_new_session=True, env=env)")
    r = run([binary("ddprun"), "--nproc-per-node", "1", sys.executable, "-c", worker,
             str(done)], timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # Killed with the job, it would never write it.
    wait_for(done.exists, timeout=30, what="the upload to finish after the job")


def test_a_child_left_in_the_workers_group_dies_without_being_called_escaped(tmp_path):
    """`sleep &` in a shell worker stays in its group: the group kill ends it.
    The sweep right after found it still exiting and said 'killed the
    processes the workers left outside their process groups', every time.
    One line per rank says what it left, which nothing had asked to end (it
    was killed without a word)."""
    pidfile = tmp_path / "bg"
    r = run([binary("ddprun"), "--nproc-per-node", "2", "sh", "-c",
             f'sleep 1000 & echo $! > {pidfile}.$RANK'], timeout=60)
    pids = [int((tmp_path / f"bg.{rank}").read_text()) for rank in range(2)]
    try:
        assert r.returncode == 0, r.stderr
        said = sorted(r.stderr.splitlines())
        assert len(said) == 2, r.stderr
        for rank, line in enumerate(said):
            # (the fork may not have become sleep yet)
            assert re.fullmatch(rf"ddprun: killing 1 process that rank {rank} \(local rank "
                                rf"{rank}\) left in its process group when the workers ended "
                                rf"\(pid {pids[rank]}, (sleep|sh)\)", line), r.stderr
        for x in pids:
            wait_for(lambda: not pid_alive(x), timeout=20, what=f"background pid {x} to die")
    finally:
        kill_left(pids)


LEAKS_SHM = """import os
from multiprocessing import shared_memory
shm = shared_memory.SharedMemory(create=True, size=1 << 20)
print("shm", shm.name, flush=True)
shm.close()  # not unlinked: the resource tracker removes it at the end
"""


def test_pythons_multiprocessing_helpers_end_on_their_own_after_success(tmp_path):
    """A Python worker that leaks a shared memory segment leaves its
    resource tracker behind for a moment: ddprun SIGKILLed it at once, said
    it was killing what rank 0 left, and the segment stayed in /dev/shm
    (found by a user's review). Now the tracker ends on its own, removing
    the segment (Python warns of the leak, as under torchrun)."""
    (tmp_path / "leak.py").write_text(LEAKS_SHM)
    r = run([binary("ddprun"), "--nproc-per-node", "1", str(tmp_path / "leak.py")],
            env=dict(os.environ, PYTHON_EXEC=sys.executable), timeout=60)
    name = re.search(r"^shm (\S+)$", r.stdout, re.M)[1]
    try:
        assert r.returncode == 0, r.stderr
        assert "left in its process group" not in r.stderr, r.stderr
        assert "leaked shared_memory" in r.stderr, r.stderr
        assert not os.path.exists(f"/dev/shm/{name.lstrip('/')}")
    finally:
        if os.path.exists(f"/dev/shm/{name.lstrip('/')}"):
            os.unlink(f"/dev/shm/{name.lstrip('/')}")


def fake_helper(tmp_path):
    """A worker (a script: a helper is told apart from a child of one by its
    parent's command line, here ddprun's) that leaves a process that looks
    like the resource tracker and never ends, once it runs as one (exec'd):
    its pid in tmp_path/helper, the worker's in tmp_path/worker."""
    script = tmp_path / "worker.sh"
    script.write_text(
        f"{sys.executable} -c 'from multiprocessing.resource_tracker import main; "
        "import time; time.sleep(1000)' & h=$!; i=0\n"
        "until grep -q resource_tracker /proc/$h/cmdline 2>/dev/null || [ $i -ge 1000 ]; "
        "do sleep 0.01; i=$((i+1)); done\n"
        f"echo $$ > {tmp_path}/worker; echo $h > {tmp_path}/helper.tmp\n"
        f"mv {tmp_path}/helper.tmp {tmp_path}/helper\n")
    return str(script)


def reaped(pid):
    """pid is gone, not a zombie: ddprun, its parent, has seen its exit (and
    begun its wait for the helpers in the same step); a signal sent to
    ddprun before that would come ahead of the exit."""
    return not os.path.exists(f"/proc/{pid}")


def test_a_helper_that_does_not_end_is_killed_after_a_while(tmp_path):
    """A process that looks like the resource tracker but never ends is
    killed once the wait for it is over (AGENT_MP_HELPER_WAIT_MS), said as
    for any process left. No rank runs meanwhile: nothing hangs (the hang
    monitor took the wait for a hang of the job, exit 124)."""
    pidfile = tmp_path / "helper"
    r = run([binary("ddprun"), "--nproc-per-node", "1", "--hang-timeout", "1", "sh",
             fake_helper(tmp_path)], timeout=60)
    pid = int(pidfile.read_text())
    try:
        assert r.returncode == 0, r.stderr
        assert re.fullmatch(r"ddprun: killing 1 process that rank 0 \(local rank 0\) left in "
                            rf"its process group when the workers ended \(pid {pid}, \S+\)\n",
                            r.stderr), r.stderr
        wait_for(lambda: not pid_alive(pid), timeout=20, what="the helper to die")
    finally:
        kill_left([pid])


def test_a_signal_while_the_helpers_end_leaves_a_success(reaper, tmp_path):
    """SIGTERM (a time limit) once every worker has succeeded, while ddprun
    gives the helpers they left their time: the job stays a success, exit
    0, not 143 (a wrapper would requeue a finished job), and the helper is
    killed at once."""
    pidfile = tmp_path / "helper"
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "1", "sh", fake_helper(tmp_path)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(pidfile.exists, timeout=20, what="the worker to start its helper")
    worker, pid = int((tmp_path / "worker").read_text()), int(pidfile.read_text())
    try:
        wait_for(lambda: reaped(worker), timeout=20, what="the worker to end")
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=30)[1]
        assert p.returncode == 0, err
        assert "ddprun: received SIGTERM: the workers have all succeeded; not waiting for the " \
            "Python multiprocessing helpers they left\n" in err, err
        wait_for(lambda: not pid_alive(pid), timeout=20, what="the helper to die")
    finally:
        kill_left([pid])


def test_a_signal_while_the_helpers_end_stops_a_job_of_several_nodes(reaper, tmp_path):
    """Node 1's worker succeeded and node 1 waits for the helper it left
    when a SIGTERM comes: that was taken for the end of a success, and node
    0's worker ran on to its end (found by a review). The job stops, as on
    any SIGTERM to one of its nodes."""
    script = f'if [ "$GROUP_RANK" = 1 ]; then exec sh {fake_helper(tmp_path)}; fi; sleep 60'
    agents, _, _ = static_job(reaper, tmp_path, [1, 1], script)
    wait_for((tmp_path / "helper").exists, timeout=30, what="node 1's worker to start its helper")
    worker, pid = int((tmp_path / "worker").read_text()), int((tmp_path / "helper").read_text())
    try:
        wait_for(lambda: reaped(worker), timeout=20, what="node 1's worker to end")
        agents[1].signal(signal.SIGTERM)
        assert agents[1].wait(timeout=30) == 143, agents[1].stderr()
        assert agents[0].wait(timeout=30) != 0, agents[0].stderr()
        wait_for(lambda: not pid_alive(pid), timeout=20, what="the helper to die")
    finally:
        kill_left([pid])


def test_kill_9_of_ddprun_leaves_no_temporary_directory(reaper, tmp_path, private_tmpdir):
    p, pids = start_escaping(reaper, tmp_path, "setsid", nproc=1)
    try:
        made = [n for n in os.listdir(private_tmpdir) if n.startswith("ddprun_")]
        assert len(made) == 1, made  # the error-file directory exists while it runs
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        wait_for(lambda: not os.listdir(private_tmpdir), timeout=20,
                 what=f"the watchdog to remove {made[0]}")
    finally:
        kill_left(pids)


# Local rank 0 creates the node's segment in ddp_init and waits for local
# rank 1, which never attaches: it says the segment is there and sleeps.
SHM_SCRIPT = r'''
if [ "$LOCAL_RANK" = 0 ]; then exec "$COLL" check; fi
i=0
while [ $i -lt 1500 ] && ! ls /dev/shm | grep -q -- "-a$DDP_SHM_NONCE\$"; do
    sleep 0.02; i=$((i + 1))
done
ls /dev/shm | grep -- "-a$DDP_SHM_NONCE\$" > "$OUT/seg.tmp"; mv "$OUT/seg.tmp" "$OUT/seg"
exec sleep 1000
'''


def test_kill_9_during_init_leaves_no_shared_memory(reaper, tmp_path):
    rid = "wdshm" + uuid.uuid4().hex[:8]
    out = tmp_path / "out"
    out.mkdir()
    try:
        p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "--rdzv-id", rid,
                          "sh", "-c", SHM_SCRIPT],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=clean_env(OUT=str(out), COLL=prog("ddp_coll"), DDP_STORE="0",
                                       DDP_BACKEND="cpu", DDP_QUIET="1", DDP_TIMEOUT="600",
                                       TMPDIR=os.environ["TMPDIR"]))
        wait_for(lambda: (out / "seg").exists() or p.poll() is not None, timeout=30,
                 what="the node's segment")
        assert p.poll() is None
        seg = (out / "seg").read_text().split()
        assert len(seg) == 1 and rid in seg[0], seg
        assert os.path.exists(f"/dev/shm/{seg[0]}")
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        wait_for(lambda: not os.path.exists(f"/dev/shm/{seg[0]}"), timeout=20,
                 what=f"the watchdog to remove /dev/shm/{seg[0]}")
    finally:
        for name in os.listdir("/dev/shm"):
            if rid in name:
                os.unlink(f"/dev/shm/{name}")


def test_a_worker_that_outlives_sigkill_is_named_and_not_waited_for(reaper, tmp_path):
    env = dict(os.environ, DDPRUN_TEST_NO_SIGKILL="1")
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "--shutdown-timeout", "1",
                      prog("launch_sigwait"), "--ignore", "SIGTERM", str(tmp_path)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wait_for(lambda: all((tmp_path / f"ready.{i}").exists() for i in range(2))
             or p.poll() is not None, timeout=20, what="workers ready")
    assert p.poll() is None, p.communicate()
    pids = [int((tmp_path / f"ready.{i}").read_text()) for i in range(2)]
    try:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 128 + signal.SIGTERM, err
        for i, x in enumerate(pids):
            # e.g. "worker 0 (pid 123) is still alive 5 s after SIGKILL, sleeping (S)
            # in do_sigtimedwait: not waiting for it"
            line = next((ln for ln in err.splitlines()
                         if f"worker {i} (pid {x}) is still alive" in ln), None)
            assert line is not None, err
            assert "after SIGKILL" in line and "(S) in " in line and "not waiting" in line
        # (nothing of them is left: they die with ddprun, PR_SET_PDEATHSIG)
        for x in pids:
            wait_for(lambda: not pid_alive(x), timeout=20, what=f"pid {x} to die")
    finally:
        kill_left(pids)


FUSE_STALL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuse_stall.py")


@pytest.mark.skipif(shutil.which("unshare") is None or not os.path.exists("/dev/fuse"),
                    reason="needs unshare(1) and /dev/fuse")
def test_a_worker_in_uninterruptible_sleep_is_named_and_not_waited_for(reaper, tmp_path):
    mnt, ready, pidf = tmp_path / "mnt", tmp_path / "stalled", tmp_path / "pid"
    mnt.mkdir()
    worker = f'echo $$ > {pidf}.tmp; mv {pidf}.tmp {pidf}; exec cat {mnt}/stall'
    p = reaper.popen(["unshare", "-m", "--propagation", "private", sys.executable, FUSE_STALL,
                      str(mnt), str(ready), "--", binary("ddprun"), "--nproc-per-node", "1",
                      "--shutdown-timeout", "1", "sh", "-c", worker],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: ready.exists() or p.poll() is not None, timeout=30,
             what="the worker's read to stall")
    if p.poll() is not None:
        _, err = p.communicate()
        if p.returncode == 77 or "unshare" in err:
            pytest.skip(f"cannot mount FUSE here: {err.strip()}")
        pytest.fail(err)
    pid = int(pidf.read_text())
    with open(f"/proc/{pid}/stat") as f:
        ddprun = int(f.read().rsplit(")", 1)[1].split()[1])
    os.kill(ddprun, signal.SIGTERM)  # fatal for cat: it now waits in D state
    _, err = p.communicate(timeout=90)
    assert p.returncode == 128 + signal.SIGTERM, err
    line = next((ln for ln in err.splitlines()
                 if f"worker 0 (pid {pid}) is still alive" in ln), None)
    assert line is not None, err
    # "... 5 s after SIGKILL, disk sleep (D) in request_wait_answer: not waiting for it"
    assert "after SIGKILL, disk sleep (D) in " in line and "not waiting for it" in line, line
    # the connection is gone with fuse_stall: the worker could die at last
    wait_for(lambda: not pid_alive(pid), timeout=20, what=f"pid {pid} to die")
