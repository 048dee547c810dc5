"""Signals: ddprun forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT (and
--signals-to-handle) to every worker group and exits 128+signal; a second
SIGINT kills at once; a signal ignored at startup (nohup) stays ignored;
`kill -9 ddprun` leaves no worker or grandchild alive; and --forward-signals
notifies the workers (a checkpoint on SIGUSR1) without stopping the job."""
import os
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import binary, free_port, make_vars, pid_alive, proc_state, prog, run, wait_for


def start(reaper, tmp_path, *args, nproc=2, sigwait_args=(), **kw):
    """ddprun running launch_sigwait workers; returns once every worker is ready."""
    cmd = [binary("ddprun"), "--nproc-per-node", str(nproc), *args,
           prog("launch_sigwait"), *sigwait_args, str(tmp_path)]
    p = reaper.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    wait_for(lambda: all((tmp_path / f"ready.{i}").exists() for i in range(nproc))
             or p.poll() is not None, timeout=20, what="workers ready")
    assert p.poll() is None, p.communicate()
    return p


def ready_pids(tmp_path, nproc):
    return [int((tmp_path / f"ready.{i}").read_text()) for i in range(nproc)]


def wait_stderr(p, text, timeout=20):
    """Read ddprun's stderr until text shows up (bounded)."""
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} on stderr; got {seen!r}"
        if select.select([p.stderr], [], [], left)[0]:
            line = p.stderr.readline()
            assert line, f"stderr closed before {text!r}; got {seen!r}"
            seen += line
    return seen


def finish(p, timeout=30):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_signal_is_forwarded_to_every_worker_and_ddprun_exits_128_plus_sig(
        reaper, tmp_path, sig):
    p = start(reaper, tmp_path, nproc=3)
    p.send_signal(sig)
    rc, out, err = finish(p)
    assert rc == 128 + sig
    name = signal.Signals(sig).name
    assert sorted(out.splitlines()) == [f"rank {r} got {name}" for r in range(3)]
    assert f"received {name}" in err


def test_extra_signals_to_handle_for_slurm_preemption(reaper, tmp_path):
    p = start(reaper, tmp_path, "--signals-to-handle", "SIGTERM,SIGUSR1")
    p.send_signal(signal.SIGUSR1)
    rc, out, err = finish(p)
    assert rc == 128 + signal.SIGUSR1
    assert sorted(out.splitlines()) == ["rank 0 got SIGUSR1", "rank 1 got SIGUSR1"]


def test_sigint_stops_gracefully_when_the_list_leaves_it_out(reaper, tmp_path):
    """--signals-to-handle SIGUSR1 replaced the list, and Ctrl-C then killed
    ddprun at once, its workers ended by the watchdog with no grace. torchrun's
    KeyboardInterrupt still shuts its workers down: so does ddprun."""
    p = start(reaper, tmp_path, "--signals-to-handle", "SIGUSR1")
    p.send_signal(signal.SIGINT)
    rc, out, err = finish(p)
    assert rc == 130, err
    assert sorted(out.splitlines()) == ["rank 0 got SIGINT", "rank 1 got SIGINT"]
    assert "received SIGINT" in err


@pytest.mark.parametrize("rdzv", ["static", "c10d"])
def test_a_stop_during_restarts_is_the_signals_exit(reaper, tmp_path, rdzv):
    """Rank 1 fails at once in every attempt, with restarts to spare: a
    SIGTERM, whether it comes while an attempt runs, while its failure stops
    it, or between attempts, ends the job with 143, since every failure was
    (or would be) restarted after. Between attempts it gave the worker's 3
    and its summary, which a wrapper requeuing on 143 took for a crash. Under
    a coordinator (c10d, or several nodes) it still did, at any moment."""
    for delay in (0, 0.01, 0.03, 0.05, 0.1, 0.3):
        mode = [] if rdzv == "static" else [
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
        p = reaper.popen([binary("ddprun"), *mode, "--nproc-per-node", "2",
                          "--max-restarts", "100000",
                          "sh", "-c", '[ "$RANK" = 1 ] && exit 3; sleep 0.05'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Its handlers are in place once it has restarted (a SIGTERM before
        # them would end it by the signal itself): then at any moment.
        seen = wait_stderr(p, "restart 1 of 100000")
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        rc, out, err = finish(p)
        err = seen + err
        assert rc == 128 + signal.SIGTERM, f"after {delay} s: {rc}\n{err[-3000:]}"
        assert "received SIGTERM" in err


def test_second_sigint_kills_at_once(reaper, tmp_path):
    # The workers ignore SIGINT and the grace period is huge: only the second
    # SIGINT can end this job.
    p = start(reaper, tmp_path, "--shutdown-timeout", "1000",
              sigwait_args=("--ignore", "SIGINT"))
    p.send_signal(signal.SIGINT)
    wait_stderr(p, "received SIGINT")  # two signals at once would merge into one
    p.send_signal(signal.SIGINT)
    rc, out, err = finish(p)
    assert rc == 130
    assert "second SIGINT: killing every worker now" in err
    for x in ready_pids(tmp_path, 2):
        wait_for(lambda: not pid_alive(x), timeout=10, what=f"pid {x} to die")


def test_a_worker_dead_before_the_users_signal_stays_the_root_cause(reaper, tmp_path):
    """Rank 0 dies (SIGKILL) while ddprun is stopped, then a SIGTERM comes:
    both wait for ddprun at once. The death came first and is the root cause
    of the exit status (137), not the signal (143): the signal is handled
    before the exits are reaped, so it reaps first."""
    p = start(reaper, tmp_path, nproc=3)
    pids = ready_pids(tmp_path, 3)
    p.send_signal(signal.SIGSTOP)
    try:
        os.kill(pids[0], signal.SIGKILL)
        wait_for(lambda: proc_state(pids[0]) == "Z", timeout=10, what="rank 0 a zombie")
        p.send_signal(signal.SIGTERM)
    finally:
        p.send_signal(signal.SIGCONT)
    rc, out, err = finish(p)
    assert rc == 137, err
    assert "received SIGTERM" in err, err
    assert sorted(out.splitlines()) == ["rank 1 got SIGTERM", "rank 2 got SIGTERM"], out


def test_sighup_ignored_at_start_stays_ignored(reaper, tmp_path):
    # Like `nohup ddprun ...`: SIGHUP is ignored by ddprun and its workers.
    def ignore_hup():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    p = start(reaper, tmp_path, preexec_fn=ignore_hup)
    p.send_signal(signal.SIGHUP)
    p.send_signal(signal.SIGTERM)  # then end the job the ordinary way
    rc, out, err = finish(p)
    assert rc == 128 + signal.SIGTERM
    assert "SIGHUP" not in out + err


def test_a_signal_ignored_at_start_stays_ignored_in_the_workers(reaper, tmp_path):
    """nohup ddprun: the workers inherit SIGHUP ignored (ddprun reset every
    signal it handles to the default in its workers, this one too)."""
    def ignore_hup():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    # 1: SIG_IGN, 0: SIG_DFL
    code = ("import signal; g = signal.getsignal; "
            "print(int(g(signal.SIGHUP)), int(g(signal.SIGTERM)))")
    assert workers_print(reaper, code, ignore_hup) == ["1 0"] * 2


def workers_print(reaper, code, preexec_fn):
    """ddprun (started after preexec_fn) runs two workers of Python code:
    the lines they print, once it has exited 0."""
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", sys.executable, "-c", code],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     preexec_fn=preexec_fn)
    rc, out, err = finish(p)
    assert rc == 0, err
    return out.splitlines()


BLOCKED = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}


def block_signals():
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)


def test_signals_blocked_at_start_are_unblocked(reaper, tmp_path):
    """A parent that execs ddprun with SIGCHLD, SIGTERM and SIGINT blocked:
    the workers ended as zombies and ddprun waited for ever, deaf to
    SIGTERM (only SIGKILL ended it). It unblocks them; the workers start
    with nothing blocked."""
    code = ("import signal; "
            "print(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))")
    assert workers_print(reaper, code, block_signals) == ["[]"] * 2


def test_sigterm_reaches_a_ddprun_started_with_it_blocked(reaper, tmp_path):
    p = start(reaper, tmp_path, preexec_fn=block_signals)
    p.send_signal(signal.SIGTERM)
    rc, out, err = finish(p)
    assert rc == 128 + signal.SIGTERM, err
    assert sorted(out.splitlines()) == ["rank 0 got SIGTERM", "rank 1 got SIGTERM"]


def test_kill_9_of_ddprun_leaves_no_worker_or_grandchild(reaper, tmp_path):
    # Each worker is a shell with a background grandchild (a DataLoader-like
    # child) in its group; neither may outlive ddprun.
    script = f'sleep 1000 & echo "$$ $!" > {tmp_path}/pids.tmp.$RANK; ' \
             f'mv {tmp_path}/pids.tmp.$RANK {tmp_path}/pids.$RANK; wait'
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "3", "sh", "-c", script],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: all((tmp_path / f"pids.{r}").exists() for r in range(3)),
             timeout=20, what="workers started")
    pids = [int(x) for r in range(3) for x in (tmp_path / f"pids.{r}").read_text().split()]
    assert len(pids) == 6 and all(pid_alive(x) for x in pids)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    for x in pids:
        wait_for(lambda: not pid_alive(x), timeout=10, what=f"pid {x} to die")


def watchdog_of(pid):
    """The pid of ddprun's watchdog (its child named ddp-watchdog)."""
    for line in subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(pid)],
                               capture_output=True, text=True).stdout.splitlines():
        child, comm = line.split(None, 1)
        if comm.strip() == "ddp-watchdog":
            return int(child)
    return None


def job_with_a_grandchild(reaper, tmp_path):
    """ddprun running one worker that started a grandchild: (the ddprun
    process, the grandchild's pid, the watchdog's pid)."""
    script = f'sleep 1000 & echo $! > {tmp_path}/gc.tmp; mv {tmp_path}/gc.tmp {tmp_path}/gc; wait'
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "1", "sh", "-c", script],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: (tmp_path / "gc").exists(), timeout=20, what="worker started")
    wd = watchdog_of(p.pid)
    assert wd is not None
    return p, int((tmp_path / "gc").read_text()), wd


def test_pkill_ddprun_leaves_the_watchdog(reaper, tmp_path):
    """`pkill -9 ddprun` matches a pattern on process names: it killed the
    watchdog, then named ddprun-watchdog, with ddprun, and the workers'
    children lived on. It matches ddprun alone now (here by pgrep, which
    pkill's matching is, limited to this job's two processes), and the
    watchdog ends the grandchild."""
    p, grandchild, wd = job_with_a_grandchild(reaper, tmp_path)
    matched = subprocess.run(["pgrep", "ddprun"], capture_output=True, text=True).stdout.split()
    assert str(p.pid) in matched and str(wd) not in matched, matched
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    wait_for(lambda: not pid_alive(grandchild), timeout=10, what="the grandchild to die")


def test_the_watchdog_outlives_signals_meant_for_the_job(reaper, tmp_path):
    # A `pkill -TERM -s <session>` or a Ctrl-C aimed at everything must not
    # take the watchdog away before ddprun is killed: it blocks every signal.
    p, grandchild, wd = job_with_a_grandchild(reaper, tmp_path)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE, signal.SIGTSTP):
        os.kill(wd, sig)
    time.sleep(0.2)  # (a signal that ended it would have done so by now)
    assert pid_alive(wd) and pid_alive(grandchild)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    wait_for(lambda: not pid_alive(grandchild), timeout=10, what="the grandchild to die")


def test_kill_9_during_the_grace_period_leaves_nothing(reaper, tmp_path):
    # Workers that ignore SIGTERM, ddprun stopping them, then killed itself.
    p = start(reaper, tmp_path, "--shutdown-timeout", "1000", nproc=2,
              sigwait_args=("--ignore", "SIGTERM"))
    pids = ready_pids(tmp_path, 2)
    p.send_signal(signal.SIGTERM)
    wait_stderr(p, "received SIGTERM")
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    for x in pids:
        wait_for(lambda: not pid_alive(x), timeout=10, what=f"pid {x} to die")


@pytest.mark.skipif(shutil.which("valgrind") is None,
                    reason="valgrind is not installed (.ci/deps.sh test installs it)")
@pytest.mark.skipif("SAN=1" in make_vars(), reason="valgrind cannot run a sanitizer build")
def test_ddprun_runs_under_valgrind(tmp_path):
    # Valgrind aborts on a clone that shares memory without being a thread;
    # the watchdog must then be forked, and the job run as usual.
    r = run(["valgrind", "-q", "--error-exitcode=99", binary("ddprun"), "--nproc-per-node", "2",
             "sh", "-c", 'echo "worker $RANK"; exit $((RANK + 6))'], timeout=120)
    assert "Valgrind has to exit" not in r.stderr, r.stderr
    assert sorted(r.stdout.split("\n")[:2]) == ["worker 0", "worker 1"]
    assert r.returncode == 6 or r.returncode == 7, r.stderr  # the first to fail


# ---- --forward-signals: notify the workers, stop nothing --------------------------

CKPT_WORKER = os.path.join(os.path.dirname(__file__), "ckpt_worker.py")


def start_ckpt(reaper, tmp_path, *args, nproc=2, env=None):
    """ddprun running ckpt_worker.py workers; returns once every one is ready."""
    cmd = [binary("ddprun"), "--nproc-per-node", str(nproc), *args, sys.executable,
           CKPT_WORKER, str(tmp_path)]
    p = reaper.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     env=env)
    wait_for(lambda: all((tmp_path / f"ready.{i}").exists() for i in range(nproc))
             or p.poll() is not None, timeout=30, what="workers ready")
    assert p.poll() is None, p.communicate()
    return p


def got(tmp_path, rank):
    f = tmp_path / f"got.{rank}"
    return f.read_text().split() if f.exists() else []


def wait_got(tmp_path, nproc, names):
    wait_for(lambda: all(got(tmp_path, r) == names for r in range(nproc)), timeout=30,
             what=f"every worker to get {names}")


@pytest.mark.parametrize("args,env", [
    (["--forward-signals", "SIGUSR1"], {}),
    # named in both lists: forwarded, not a stop
    (["--signals-to-handle", "SIGTERM,SIGUSR1", "--forward-signals", "usr1"], {}),
    ([], {"PET_FORWARD_SIGNALS": str(int(signal.SIGUSR1))}),
], ids=["name", "also-in-signals-to-handle", "PET-number"])
def test_forwarded_usr1_checkpoints_and_the_job_finishes_with_0(reaper, tmp_path, args, env):
    p = start_ckpt(reaper, tmp_path, *args, env={**os.environ, **env})
    p.send_signal(signal.SIGUSR1)
    wait_got(tmp_path, 2, ["SIGUSR1"])
    assert all((tmp_path / f"ckpt.{r}.1").read_text().startswith("step ") for r in (0, 1))
    (tmp_path / "stop").touch()  # training goes on until then
    rc, out, err = finish(p)
    assert rc == 0, err
    assert sorted(out.splitlines()) == [f"rank {r}: 1 checkpoint(s)" for r in (0, 1)]
    assert "SIGUSR1: forwarded to 2 workers (the job goes on)" in err
    assert "stopping" not in err


def test_forwarded_usr2_is_no_stack_dump_request(reaper, tmp_path):
    p = start_ckpt(reaper, tmp_path, "--forward-signals", "SIGUSR1,USR2", "--hang-timeout",
                   "600")
    p.send_signal(signal.SIGUSR2)
    wait_got(tmp_path, 2, ["SIGUSR2"])
    p.send_signal(signal.SIGUSR1)
    wait_got(tmp_path, 2, ["SIGUSR2", "SIGUSR1"])
    (tmp_path / "stop").touch()
    rc, out, err = finish(p)
    assert rc == 0, err
    assert "on demand" not in err and "where the ranks are" not in err


@pytest.mark.parametrize("value,message", [
    ("FOO", "unknown signal 'FOO' in --forward-signals"),
    ("SIGUSR1,SIGFOO", "unknown signal 'SIGFOO' in --forward-signals"),
    ("999", "unknown signal '999' in --forward-signals"),
    ("SIGKILL", "signal SIGKILL in --forward-signals cannot be handled and forwarded"),
    ("SIGCHLD", "signal SIGCHLD in --forward-signals cannot be handled and forwarded"),
    # ddprun ignores it (a file size limit fails its write): it was accepted
    # and did nothing.
    ("SIGTERM,SIGXFSZ", "signal SIGXFSZ in --forward-signals cannot be handled and forwarded"),
    ("SIGUSR1,", "invalid value 'SIGUSR1,' for --forward-signals: expected a "
     "comma-separated list like SIGTERM,SIGUSR1"),
])
def test_bad_forward_signal_is_a_usage_error(value, message):
    r = run([binary("ddprun"), "--forward-signals", value, "true"])
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"ddprun: error: {message} (see ddprun --help)"]


# ---- a stop signal from Slurm: the workers had it already -------------------------

FAKE_STEPD = os.path.join(os.path.dirname(__file__), "fake_slurmstepd.py")
TERM_WORKER = os.path.join(os.path.dirname(__file__), "term_worker.py")
FROM_SLURM = ("received SIGTERM from Slurm: stopping the workers (proctrack/linuxproc "
              "signals every process of the step, this node's workers included: not sent "
              "again)")


def terms(tmp_path, nproc):
    """What each worker got, by rank: "SIGTERM slurmstepd", ..."""
    return {r: (tmp_path / f"term.{r}").read_text().splitlines()
            if (tmp_path / f"term.{r}").exists() else [] for r in range(nproc)}


def stepd_popen(reaper, tmp_path, proctrack="proctrack/linuxproc", args=(), stay=False,
                times=1, sig=signal.SIGTERM):
    """ddprun with 2 term_worker.py workers under fake_slurmstepd.py, which
    sends sig (times times) once they are ready: the Popen of the stand-in."""
    cmd = [sys.executable, FAKE_STEPD, str(tmp_path), "2", str(int(sig)),
           proctrack, binary("ddprun"), "--nproc-per-node", "2", *args, sys.executable,
           TERM_WORKER, str(tmp_path), *(["--stay"] if stay else ["--linger", "3"])]
    env = dict(os.environ, FAKE_STEPD_TIMES=str(times))
    return reaper.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def under_stepd(reaper, tmp_path, **kw):
    """As stepd_popen, to the end: (exit status, stderr)."""
    rc, out, err = finish(stepd_popen(reaper, tmp_path, **kw), timeout=60)
    return rc, err


def test_sigterm_from_the_steps_slurmstepd_is_not_sent_again(reaper, tmp_path):
    # scancel: slurmstepd signals every process of the step, ddprun and its
    # workers alike. ddprun stops the job all the same (143) but sends the
    # workers nothing: they used to get SIGTERM twice, once from ddprun.
    rc, err = under_stepd(reaper, tmp_path)
    assert rc == 143, err
    assert terms(tmp_path, 2) == {r: ["SIGTERM slurmstepd"] for r in range(2)}, err
    assert FROM_SLURM in err


AGAIN = ("received SIGTERM from Slurm again: the workers are stopping already (not sent "
         "again)")


@pytest.mark.parametrize("proctrack", ["proctrack/cgroup", "proctrack/pgid"])
def test_slurms_sigterm_sent_twice_reaches_each_worker_once(reaper, tmp_path, proctrack):
    # Slurm 22.05 sends the stop signal twice now and then (the time limit),
    # also without ddprun. Where slurmstepd signals ddprun alone, ddprun
    # passed each on: every worker got SIGTERM twice, the second cutting
    # short what the first began (a checkpoint).
    rc, err = under_stepd(reaper, tmp_path, proctrack=proctrack, times=2)
    assert rc == 143, err
    assert terms(tmp_path, 2) == {r: ["SIGTERM ddprun"] for r in range(2)}, err
    assert err.count("received SIGTERM: stopping the workers") == 1, err
    assert AGAIN in err


def test_slurms_sigterm_twice_under_linuxproc_is_slurms_alone(reaper, tmp_path):
    # Where slurmstepd signals the workers itself, its repeat reaches them
    # from Slurm (ddprun cannot help it; a handler must take it twice), but
    # ddprun sends them nothing, and says the second is a repeat.
    rc, err = under_stepd(reaper, tmp_path, times=2)
    assert rc == 143, err
    assert terms(tmp_path, 2) == {r: ["SIGTERM slurmstepd"] * 2 for r in range(2)}, err
    assert err.count(FROM_SLURM) == 1 and AGAIN in err, err


def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def done(tmp_path, nproc):
    """The ranks whose term_worker.py ended by itself (not killed)."""
    return {r for r in range(nproc) if (tmp_path / f"done.{r}").exists()}


@pytest.mark.parametrize("proctrack", ["proctrack/cgroup", "proctrack/linuxproc"])
def test_slurms_sigint_sent_twice_is_no_second_ctrl_c(reaper, tmp_path, proctrack):
    # srun passing on a double Ctrl-C, or scancel --signal=INT, and Slurm
    # repeating it: the repeat is not the user's second Ctrl-C (srun needs a
    # third press within the second to kill the step, and then does it
    # itself). It SIGKILLed every worker in the middle of its checkpoint.
    rc, err = under_stepd(reaper, tmp_path, proctrack=proctrack, times=2, sig=signal.SIGINT)
    assert rc == 130, err
    assert "second SIGINT" not in err and "SIGKILL" not in err, err
    want = ["SIGINT slurmstepd"] * 2 if proctrack == "proctrack/linuxproc" else ["SIGINT ddprun"]
    assert terms(tmp_path, 2) == {r: want for r in range(2)}, err
    assert done(tmp_path, 2) == {0, 1}, err  # each took its 3 s and ended by itself
    assert ("received SIGINT from Slurm again: the workers are stopping already (not sent "
            "again)") in err, err


@pytest.mark.parametrize("first", ["slurm", "anyone"])
def test_a_second_sigint_from_anyone_but_slurm_kills_at_once_in_a_step(reaper, tmp_path,
                                                                        first):
    # Under srun too, a SIGINT that is not Slurm's repeat (kill -INT on the
    # node, after Slurm's or the user's own first) is a second Ctrl-C. The
    # workers stay and the grace is huge: only SIGKILL ends this job.
    p = stepd_popen(reaper, tmp_path, proctrack="proctrack/cgroup",
                    times=1 if first == "slurm" else 0, sig=signal.SIGINT,
                    args=("--shutdown-timeout", "1000"), stay=True)
    wait_for(lambda: all((tmp_path / f"ready.{i}").exists() for i in range(2))
             or p.poll() is not None, timeout=30, what="workers ready")
    ddprun = parent(ready_pids(tmp_path, 2)[0])
    if first == "anyone":
        os.kill(ddprun, signal.SIGINT)
    # ddprun has taken the first once it passed it on: two at once would merge.
    wait_for(lambda: all(terms(tmp_path, 2)[r] for r in range(2)) or p.poll() is not None,
             timeout=30, what="the first SIGINT passed on")
    os.kill(ddprun, signal.SIGINT)
    rc, out, err = finish(p)
    assert rc == 130, err
    assert "second SIGINT: killing every worker now" in err, err
    assert terms(tmp_path, 2) == {r: ["SIGINT ddprun"] for r in range(2)}, err


def test_a_worker_left_after_slurms_sigterm_is_killed_after_the_grace(reaper, tmp_path):
    rc, err = under_stepd(reaper, tmp_path, args=("--shutdown-timeout", "1"), stay=True)
    assert rc == 143, err
    assert terms(tmp_path, 2) == {r: ["SIGTERM slurmstepd"] for r in range(2)}, err
    assert "did not stop within the shutdown timeout: SIGKILL" in err
    for x in ready_pids(tmp_path, 2):
        wait_for(lambda: not pid_alive(x), timeout=10, what=f"pid {x} to die")


@pytest.mark.parametrize("proctrack", ["proctrack/cgroup", "proctrack/pgid", "proctrack/none"])
def test_where_slurmstepd_does_not_reach_the_workers_its_sigterm_is_sent_on(
        reaper, tmp_path, proctrack):
    # proctrack/cgroup (Slurm's default) signals only the step's tasks,
    # slurmstepd's children (ddprun), with anything but SIGKILL; pgid their
    # process group; a type ddprun does not know may do either. Each worker
    # gets the signal once, from ddprun: before, under cgroup it got none
    # and was SIGKILLed at the end of the grace.
    rc, err = under_stepd(reaper, tmp_path, proctrack=proctrack)
    assert rc == 143, err
    assert terms(tmp_path, 2) == {r: ["SIGTERM ddprun"] for r in range(2)}, err
    assert "received SIGTERM: stopping the workers" in err


def test_kill_term_reaches_each_worker_once_from_ddprun(reaper, tmp_path):
    cmd = [binary("ddprun"), "--nproc-per-node", "2", sys.executable, TERM_WORKER,
           str(tmp_path)]
    p = reaper.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: all((tmp_path / f"ready.{i}").exists() for i in range(2))
             or p.poll() is not None, timeout=30, what="workers ready")
    p.send_signal(signal.SIGTERM)
    rc, out, err = finish(p)
    assert rc == 143, err
    assert terms(tmp_path, 2) == {r: ["SIGTERM ddprun"] for r in range(2)}, err
    assert "received SIGTERM: stopping the workers" in err
