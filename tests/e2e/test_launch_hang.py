"""Hung jobs that explain themselves: --hang-timeout dumps every rank (/proc
state, wait channel, CPU time, last output, collective, native stack; Python
stacks through faulthandler) and fails with 124 naming the rank that is not
where the others are; SIGUSR2 dumps without failing; torchrun's file timer
(TORCHELASTIC_ENABLE_FILE_TIMER) kills a worker whose timer expires."""
import os
import re
import select
import signal
import subprocess
import time

import pytest

from conftest import PYTHON, binary, pid_alive, prog, run, wait_for

HANG_EXIT = 124


@pytest.fixture(autouse=True)
def no_inherited_timers(monkeypatch):
    """What the runner's environment would add to a rank's stack or timer."""
    monkeypatch.delenv("PYTHONFAULTHANDLER", raising=False)
    monkeypatch.delenv("TORCHELASTIC_ENABLE_FILE_TIMER", raising=False)
    monkeypatch.delenv("TORCHELASTIC_TIMER_FILE", raising=False)


def rank_block(err, rank):
    """The dump's lines about one rank: its line and what follows up to the next rank's."""
    m = re.search(rf"^ddprun: rank {rank} \(local rank \d+\): .*?(?=^ddprun: |^=====|\Z)",
                  err, re.M | re.S)
    assert m, f"no dump of rank {rank} in:\n{err}"
    return m.group(0)


def worker_pids(err):
    return [int(p) for p in re.findall(r"^ddprun: rank \d+ \(local rank \d+\): pid (\d+)",
                                       err, re.M)]


def test_hung_c_rank_is_named_with_its_native_stack_and_the_job_fails_124():
    r = run([binary("ddprun"), "--nproc-per-node", "3", "--hang-timeout", "2",
             prog("hang_coll"), "3", "1"], timeout=120)
    assert r.returncode == HANG_EXIT, r.stderr
    err = r.stderr
    assert "no rank made progress for" in err
    # The verdict: who is not where the others are.
    assert "rank 1 is in no collective (last completed #3)" in err
    assert "ranks 0,2 wait in all_reduce #4" in err
    # Every rank: pid, state, wchan, CPU time, output age, collective.
    for rank in range(3):
        block = rank_block(err, rank)
        assert re.search(r"pid \d+ \(hang_coll\), state [A-Z] \(\w[\w ]*\), wchan \S+, "
                         r"cpu \d+\.\d\d s, \d+ threads?, last output \d+\.\d s ago", block), block
    assert "collective: no collective (last completed #3)" in rank_block(err, 1)
    assert "collective: all_reduce #4" in rank_block(err, 0)
    # Rank 1's native stack names the function it sleeps in; the others' name
    # the all_reduce they wait in.
    assert "native stack (eu-stack" in rank_block(err, 1)
    assert "hang_coll_sleeping_rank" in rank_block(err, 1)
    assert "hang_coll_sleeping_rank" not in rank_block(err, 0)
    assert "ddp_all_reduce" in rank_block(err, 0)
    assert f"stopping it (exit status {HANG_EXIT})" in err
    pids = worker_pids(err)
    assert len(pids) == 3
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=10, what="workers gone")


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_stopped_rank_is_named_and_ends_with_the_job(wrapped):
    # Rank 1 stops itself after 3 all_reduces (as ^Z or a debugger would
    # stop it): the verdict says so before its place, and ddprun's stop
    # continues it so that it ends. Wrapped: each worker is a shell that
    # runs the program as its child, and the program is the rank (it was
    # called "in no collective" only: the shell does not stop).
    cmd = [prog("hang_coll"), "3", "stop", "1"]
    if wrapped:
        cmd = ["sh", "-c", " ".join(cmd) + "; exit $?"]
    r = run([binary("ddprun"), "--nproc-per-node", "3", "--hang-timeout", "2", *cmd],
            timeout=120)
    err = r.stderr
    assert r.returncode == HANG_EXIT, err
    assert ("rank 1 is stopped (a stop signal, as ^Z sends, or a debugger): nothing runs "
            "there until it is continued (SIGCONT)") in err
    assert "rank 1 is in no collective (last completed #3)" in err
    assert "ranks 0,2 wait in all_reduce #4" in err
    if not wrapped:
        assert re.search(r"state T \(stopped\)", rank_block(err, 1)), rank_block(err, 1)
        # The summary agrees with the verdict: the stopped rank is the
        # root cause (it named another, which only waited).
        root = err[err.index("Root Cause"):]
        assert "rank      : 1 (local_rank: 1)" in root, root
        assert "traceback : Hang: the rank was stopped" in root, root
    pids = worker_pids(err)
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=10, what="workers gone")


def test_a_stopped_python_rank_gets_no_sigabrt_nor_a_false_error_file(tmp_path):
    """Python ranks, rank 1 stopped (SIGSTOP to itself): it was sent
    SIGABRT, which waits while it is stopped, and given an error file
    saying "faulthandler printed the rank's Python stack", which it never
    did; the summary named rank 0, which only waited, as the root cause."""
    script = tmp_path / "stop.py"
    script.write_text("import os, signal, threading\n"
                      "if os.environ['RANK'] == '1':\n"
                      "    os.kill(os.getpid(), signal.SIGSTOP)\n"
                      "threading.Event().wait()\n")
    r = run_py_ranks(script)
    err = r.stderr
    assert r.returncode == HANG_EXIT, err
    assert "Python stack: none, the rank is stopped" in rank_block(err, 1), err
    assert err.count("Fatal Python error: Aborted") == 1, err
    root = err[err.index("Root Cause"):]
    assert "rank      : 1 (local_rank: 1)" in root, root
    assert "traceback : Hang: the rank was stopped" in root, root
    assert "faulthandler printed" not in root, root


def test_a_rank_that_never_calls_ddp_init_is_named_not_its_waiting_peers():
    # Rank 1 sleeps before ddp_init; the others wait in ddp_init for it to
    # join. Before libddp marked its time in ddp_init, every rank read "not
    # libddp, or not started yet" and nobody was named.
    r = run([binary("ddprun"), "--nproc-per-node", "3", "--hang-timeout", "2",
             prog("hang_coll"), "3", "late", "1"], timeout=120)
    err = r.stderr
    assert r.returncode == HANG_EXIT, err
    assert "ranks 0,2 wait in ddp_init (joining its peers)" in err
    assert ("rank 1 never called ddp_init (it is in its own code before it, or not libddp): "
            "the ranks in ddp_init wait for it") in err
    assert "collective: none, in ddp_init (joining its peers)" in rank_block(err, 0)
    assert "collective: not reported (not libddp, or before ddp_init)" in rank_block(err, 1)
    assert "hang_coll_sleeping_rank" in rank_block(err, 1)
    pids = worker_pids(err)
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=10, what="workers gone")


def test_a_rank_that_exited_before_ddp_init_is_named():
    # Rank 2 exits 0 before ddp_init (a success does not stop the job); the
    # others wait in ddp_init for it. Before, the verdict said the join
    # itself could not complete, "not one rank's program".
    r = run([binary("ddprun"), "--nproc-per-node", "3", "--hang-timeout", "2",
             prog("hang_coll"), "3", "early", "2"], timeout=120)
    err = r.stderr
    assert r.returncode == HANG_EXIT, err
    assert ("rank 2 exited (status 0) while the others run: no collective or ddp_init they "
            "wait in can complete without it") in err
    assert "ranks 0-1 wait in ddp_init (joining its peers)" in err
    assert "the join itself" not in err


def test_ranks_whose_libddp_process_is_a_child_of_the_worker_are_placed():
    # Each worker is a shell that runs the program as its child (a wrapper
    # script): its libddp process is not the worker itself. The verdict
    # still knows where each rank is; before, it read "none uses libddp".
    r = run([binary("ddprun"), "--nproc-per-node", "3", "--hang-timeout", "2", "sh", "-c",
             f"{prog('hang_coll')} 3 1; exit $?"], timeout=120)
    err = r.stderr
    assert r.returncode == HANG_EXIT, err
    assert "rank 1 is in no collective (last completed #3)" in err
    assert "ranks 0,2 wait in all_reduce #4" in err


def test_gdb_gives_the_stack_when_eu_stack_is_missing(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    os.symlink("/usr/bin/gdb", tools / "gdb")
    env = dict(os.environ, PATH=str(tools))
    r = run([binary("ddprun"), "--nproc-per-node", "2", "--hang-timeout", "2",
             prog("hang_coll"), "2", "1"], env=env, timeout=180)
    assert r.returncode == HANG_EXIT, r.stderr
    assert "native stack (gdb" in rank_block(r.stderr, 1)
    assert "hang_coll_sleeping_rank" in rank_block(r.stderr, 1)
    assert "rank 1 is in no collective (last completed #2)" in r.stderr
    assert "rank 0 waits in all_reduce #3" in r.stderr


def test_without_eu_stack_or_gdb_the_dump_says_so(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = dict(os.environ, PATH=str(empty))
    r = run([binary("ddprun"), "--nproc-per-node", "2", "--hang-timeout", "1",
             prog("hang_coll"), "2", "0"], env=env, timeout=120)
    assert r.returncode == HANG_EXIT, r.stderr
    assert "no native stacks: neither eu-stack nor gdb is installed" in r.stderr
    assert "native stack (" not in r.stderr
    assert "rank 0 is in no collective (last completed #2)" in r.stderr
    assert "rank 1 waits in all_reduce #3" in r.stderr


def run_py_ranks(script, *args):
    """Two Python ranks of script under ddprun --hang-timeout 2 (and args)."""
    return run([binary("ddprun"), "--nproc-per-node", "2", "--hang-timeout", "2", *args,
                str(script)], env=dict(os.environ, PYTHON_EXEC=PYTHON), timeout=120)


PY_HANG = """\
import os, threading, time

def rank_one_sleeps_here():
    while True:
        time.sleep(100)

def rank_zero_deadlocks_here():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()

def helper_thread_waits_here(ev):
    ev.wait()

rank = int(os.environ["RANK"])
print(f"rank {rank} ready", flush=True)
if rank == 1:
    rank_one_sleeps_here()
else:
    threading.Thread(target=helper_thread_waits_here, args=(threading.Event(),),
                     daemon=True).start()
    rank_zero_deadlocks_here()
"""


def test_hung_python_ranks_print_every_threads_python_stack(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(PY_HANG)
    r = run_py_ranks(script)
    assert r.returncode == HANG_EXIT, r.stderr
    err = r.stderr
    assert "Python stack: SIGABRT to pid" in rank_block(err, 0)
    # faulthandler's dump of each rank, every thread, reached the console,
    # each line tagged with its rank (faulthandler names none).
    assert err.count("Fatal Python error: Aborted") == 2
    for rank in range(2):
        assert f"[rank{rank}]: Fatal Python error: Aborted" in err, err
    assert re.search(r'\[rank1\]: +File ".*hang\.py", line \d+ in rank_one_sleeps_here', err)
    assert re.search(r'File ".*hang\.py", line \d+ in rank_one_sleeps_here', err)
    assert re.search(r'File ".*hang\.py", line \d+ in rank_zero_deadlocks_here', err)
    assert re.search(r'File ".*hang\.py", line \d+ in helper_thread_waits_here', err)
    # The verdict comes after the stacks, the failure summary says why.
    assert err.rindex("in rank_one_sleeps_here") < err.index("the job hung")
    assert "traceback : Hang: ddprun sent SIGABRT" in err


def test_a_python_rank_without_faulthandler_gets_no_sigabrt(tmp_path):
    """python3 -I ignores PYTHONFAULTHANDLER: a SIGABRT would kill the rank
    without a stack, and its error file said faulthandler printed one. It
    is now left to the job's stop, and the dump says why no stack comes."""
    script = tmp_path / "hang.py"
    script.write_text("import threading\nthreading.Event().wait()\n")
    r = run([binary("ddprun"), "--nproc-per-node", "1", "--hang-timeout", "2",
             "--shutdown-timeout", "5", PYTHON, "-I", str(script)], timeout=120)
    assert r.returncode == HANG_EXIT, r.stderr
    assert "Python stack: none, faulthandler is off for it" in rank_block(r.stderr, 0)
    assert "SIGABRT to pid" not in r.stderr and "Fatal Python error" not in r.stderr
    assert "ddprun sent SIGABRT" not in r.stderr, r.stderr


def test_a_python_rank_in_dev_mode_has_faulthandler_despite_minus_i(tmp_path):
    """-X dev turns faulthandler on, -I or not (CPython's development mode):
    the rank was taken for one without it, sent no SIGABRT, its stack never
    shown."""
    script = tmp_path / "hang.py"
    script.write_text("import threading\nthreading.Event().wait()\n")
    r = run([binary("ddprun"), "--nproc-per-node", "1", "--hang-timeout", "2",
             "--shutdown-timeout", "5", PYTHON, "-I", "-X", "dev", str(script)], timeout=120)
    assert r.returncode == HANG_EXIT, r.stderr
    assert "Python stack: SIGABRT to pid" in rank_block(r.stderr, 0), r.stderr
    assert "[rank0]: Fatal Python error: Aborted" in r.stderr, r.stderr
    assert "faulthandler is off" not in r.stderr, r.stderr


def test_a_rank_that_prints_or_computes_or_does_collectives_is_not_hung(tmp_path):
    # Output, CPU time and libddp collectives each count as progress: none of
    # these jobs is stopped although each runs longer than the timeout.
    script = tmp_path / "busy.py"
    script.write_text("import os, sys, time\n"
                      "t = time.monotonic()\n"
                      "while time.monotonic() - t < 4:\n"
                      "    if os.environ['RANK'] == '0':\n"
                      "        print('.', flush=True); time.sleep(0.2)\n"
                      "    else:\n"
                      "        pass\n")
    r = run_py_ranks(script)
    assert r.returncode == 0, r.stderr
    assert "stack dump" not in r.stderr
    r = run([binary("ddprun"), "--nproc-per-node", "2", "--hang-timeout", "1",
             prog("hang_coll"), "20", "slow"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "stack dump" not in r.stderr


@pytest.mark.parametrize("how", ["short-children", "thread-child"])
def test_a_rank_whose_work_runs_in_child_processes_is_not_hung(tmp_path, how):
    """Rank 0 works for 4 s in child processes (short ones one after the
    other, or one started from a thread), silent; rank 1 waits. The CPU of
    children already reaped was not counted (only live ones', and only the
    main thread's), so the job was killed as hung (124)."""
    script = tmp_path / "kids.py"
    script.write_text(
        "import os, subprocess, sys, threading, time\n"
        "def busy(s):\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nt = time.monotonic()\\n'\n"
        "                    f'while time.monotonic() - t < {s}: pass'])\n"
        "if os.environ['RANK'] != '0':\n"
        "    time.sleep(4)\n"
        f"elif '{how}' == 'short-children':\n"
        "    t = time.monotonic()\n"
        "    while time.monotonic() - t < 4:\n"
        "        busy(0.05)\n"
        "else:\n"
        "    th = threading.Thread(target=busy, args=(4,))\n"
        "    th.start(); th.join()\n")
    r = run_py_ranks(script)
    assert r.returncode == 0, r.stderr
    assert "stack dump" not in r.stderr


def test_what_hung_ranks_leave_in_their_groups_gets_sigterm_first(tmp_path):
    """Each rank starts a helper in its process group that cleans up on
    SIGTERM (as multiprocessing's resource tracker does its semaphores),
    then waits for ever. The hang's aborts ended the ranks, and what they
    left was SIGKILLed at once as after a success ("left in its process
    group when the workers ended"): no clean-up, /dev/shm/sem.mp-* left.
    The helper is Python, but no process of the program's own (no
    multiprocessing worker): it gets no SIGABRT for its stack, and so
    keeps its clean-up."""
    script = tmp_path / "grp.py"
    script.write_text(
        "import os, subprocess, sys, threading\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, sys, time\\n'\n"
        "    'def bye(*a):\\n'\n"
        f"    '    open(\"{tmp_path}/clean.%s\" % sys.argv[1], \"w\").close(); sys.exit(0)\\n'\n"
        "    'signal.signal(signal.SIGTERM, bye)\\n'\n"
        f"    'open(\"{tmp_path}/up.%s\" % sys.argv[1], \"w\").close()\\n'\n"
        "    'while True: time.sleep(1)', os.environ['RANK']])\n"
        "threading.Event().wait()\n")
    r = run_py_ranks(script, "--shutdown-timeout", "20")
    assert r.returncode == HANG_EXIT, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("up.")) == \
        ["up.0", "up.1"], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("clean.")) == \
        ["clean.0", "clean.1"], r.stderr
    assert "left in its process group when the workers ended" not in r.stderr
    assert "SIGABRT to its process" not in r.stderr, r.stderr


PY_KIDS = """\
import multiprocessing as mp, os, subprocess, sys, threading, time

def stuck_in_the_child():
    while True:
        time.sleep(100)

def idle_child(q):
    q.get()

def rank_waits_for_its_children(q):
    q.get()

if __name__ == "__main__":
    mp.set_start_method(sys.argv[1])
    lock = mp.get_context("spawn").Lock()  # named: the resource tracker runs
    q, idle = mp.Queue(), mp.Queue()
    kids = [mp.Process(target=stuck_in_the_child), mp.Process(target=idle_child, args=(idle,))]
    for k in kids:
        k.start()
    # A Python process the program starts (a tool's service): not its own
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    print("kids " + " ".join(str(k.pid) for k in kids) + f" helper {helper.pid} main {os.getpid()}",
          flush=True)
    rank_waits_for_its_children(q)
"""


@pytest.mark.parametrize("wrapped,start", [(False, "fork"), (True, "fork"), (False, "forkserver")],
                         ids=["python-rank", "shell-wrapper", "forkserver"])
def test_a_hung_ranks_python_processes_print_their_stacks_one_at_a_time(tmp_path, short_tmpdir,
                                                                        wrapped, start):
    """The rank waits for its two children (as for its DataLoader's
    workers), one stuck in a loop; or the rank is a shell script that runs
    that Python program. The dump named only the rank: its children, where
    the job really hung, were neither listed nor asked for their stacks (a
    wrapper script's Python program not even that). Now each of the rank's
    processes is listed, and its Python ones print their stacks, one at a
    time, each where it was (all are held stopped until their turn: a
    parent seeing its child die would leave the place it hung), the rank
    last; multiprocessing's resource tracker and fork server, and any other
    Python process the program starts (a tool's service, that saves its
    work on SIGTERM), are left alone
    (not the children the fork server forked, which show its command line:
    the DataLoader's workers under Python 3.14's default). The wrapper's
    native stack was the shell's wait for its child: it is now its Python
    program's, where the rank is (not its service's, nor its workers')."""
    script = tmp_path / "kids.py"
    script.write_text(PY_KIDS)
    if wrapped:
        wrapper = tmp_path / "wrap.sh"
        wrapper.write_text(f"#!/bin/sh\n{PYTHON} {script} {start}\necho python ended $?\n")
        wrapper.chmod(0o755)
        cmd = ["--no-python", str(wrapper)]
    else:
        cmd = [str(script), start]
    r = run([binary("ddprun"), "--nproc-per-node", "1", "--hang-timeout", "2", *cmd],
            env=dict(os.environ, PYTHON_EXEC=PYTHON), timeout=120)
    assert r.returncode == HANG_EXIT, r.stderr
    err = r.stderr
    *kids, helper, main = [int(p) for p in re.search(r"^kids (\d+) (\d+) helper (\d+) main (\d+)$",
                                                     r.stdout, re.M).groups()]
    block = rank_block(err, 0)
    if wrapped:
        assert f"  native stack (eu-stack -p {main}, the Python program the rank runs and " \
            "waits for):\n" in block, block
    else:
        assert f"  native stack (eu-stack -p {main}):\n" in block, block
    listed = dict((int(p), rest) for p, rest in
                  re.findall(r"^  its process (\d+) \((.*)$", block, re.M))
    for k in [*kids, helper]:
        assert k in listed, block
    helpers = [p for p, rest in listed.items() if "multiprocessing's helper" in rest]
    assert len(helpers) == (2 if start == "forkserver" else 1), block
    m = re.search(r"^  Python stacks: SIGABRT to its process(?:es)? ([\d, ]+?)"
                  r"(, then to pid (\d+) \(the rank\))?, in turn; faulthandler prints every "
                  r"thread of each below$", block, re.M)
    assert m, block
    aborted = [int(p) for p in m[1].split(", ")]
    assert set(kids) <= set(aborted) and not set(helpers) & set(aborted), block
    assert helper not in aborted, block  # it gets the job's stop
    assert (m[2] is not None) == (not wrapped), block
    # One whole stack after another, each where its process was: the
    # children's (their lines not mixed), then the rank's still waiting
    # for them (not in the DataLoader-like error its children's deaths
    # would have raised).
    dumps = err.split("[rank0]: Fatal Python error: Aborted")[1:]
    assert len(dumps) == len(aborted) + (0 if wrapped else 1), err
    assert sum("in stuck_in_the_child" in d for d in dumps) == 1, err
    assert sum("in idle_child" in d for d in dumps) == 1, err
    assert "in rank_waits_for_its_children" in dumps[-1], err
    assert "Traceback" not in err, err
    assert all(re.fullmatch(r"(\[rank0\]: .*\n)*", d.split("\n", 1)[1]
                            .split("=====")[0].split("python ended")[0])
               for d in dumps), err


# A rank that runs job.py as its child and waits for its end: in waitpid
# (subprocess.call, as conda run --no-capture-output does), in sigsuspend
# (coreutils' timeout), in sigtimedwait for SIGCHLD (tini, dumb-init), in
# poll on the pipes of its output (subprocess.run(capture_output=True), as
# conda run does, through a shell), or through a shell that runs timeout.
LAUNCHERS = {
    "subprocess.call": ["launch.py"],
    "timeout": ["--no-python", "timeout", "600", PYTHON, "job.py"],
    "sigtimedwait": ["launch.py", "sigtimedwait"],
    "capture": ["launch.py", "capture"],
    "shell-timeout": ["--no-python", "sh", "-c", f"timeout 600 {PYTHON} job.py; echo done"],
}
LAUNCH_PY = """import signal, subprocess, sys
if sys.argv[1:] == ["sigtimedwait"]:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    job = subprocess.Popen([sys.executable, "job.py"])
    signal.sigtimedwait([signal.SIGCHLD], 600)
    sys.exit(job.wait())
if sys.argv[1:] == ["capture"]:
    r = subprocess.run(["sh", "-c", sys.executable + " job.py"], capture_output=True)
    sys.stdout.buffer.write(r.stdout)
    sys.exit(r.returncode)
sys.exit(subprocess.call([sys.executable, "job.py"]))
"""
JOB_PY = """import os, time
open("job.pid", "w").write(str(os.getpid()))
time.sleep(600)
"""


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_a_launcher_rank_shows_the_stack_of_the_program_it_waits_for(tmp_path, launcher):
    """The rank is a launcher that runs the program and waits for it: its
    native stack was that wait, and its program, under another Python, got
    no SIGABRT. Now the program the rank waits for stands for it, in both
    (under timeout, the wait in sigsuspend was not taken for one; nor a
    launcher's poll of its program's output; nor a chain through a wrapper
    that is not Python)."""
    (tmp_path / "job.py").write_text(JOB_PY)
    (tmp_path / "launch.py").write_text(LAUNCH_PY)
    r = run([binary("ddprun"), "--nproc-per-node", "1", "--hang-timeout", "2",
             *LAUNCHERS[launcher]], env=dict(os.environ, PYTHON_EXEC=PYTHON), cwd=tmp_path,
            timeout=120)
    assert r.returncode == HANG_EXIT, r.stderr
    job = int((tmp_path / "job.pid").read_text())
    block = rank_block(r.stderr, 0)
    assert f"  native stack (eu-stack -p {job}, the Python program the rank runs and waits " \
        "for):\n" in block, block
    python_rank = LAUNCHERS[launcher][0] == "launch.py"
    rank_too = r", then to pid \d+ \(the rank\)" if python_rank else ""
    assert re.search(rf"^  Python stacks: SIGABRT to its process {job}{rank_too}, in turn",
                     block, re.M), block
    if launcher != "capture":  # (its stderr is the launcher's to show)
        assert re.search(r'^\[rank0\]: +File ".*job\.py", line 3 in <module>', r.stderr,
                         re.M), r.stderr


# Programs that wait, with one Python service they started: for a signal
# while a thread works; or single-threaded, in select on a pipe of its own
# (the service writes to the same stdout, no output of its is read).
NOT_LAUNCHERS = {
    "sigwait": """import os, signal, subprocess, sys, threading, time
svc = subprocess.Popen([sys.executable, "svc.py"])
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
print("svc", svc.pid, "main", os.getpid(), flush=True)
signal.sigwait([signal.SIGTERM])
""",
    "select": """import os, select, subprocess, sys
svc = subprocess.Popen([sys.executable, "svc.py"], stdout=subprocess.PIPE)
r, w = os.pipe()
print("svc", svc.pid, "main", os.getpid(), flush=True)
select.select([r], [], [])
""",
    # It joins a multiprocessing child (waitpid for that one pid), the
    # service beside it, started directly or by a shell.
    "join": """import multiprocessing as mp, os, subprocess, sys, time
svc = subprocess.Popen([sys.executable, "svc.py"])
p = mp.get_context("fork").Process(target=time.sleep, args=(600,))
p.start()
print("svc", svc.pid, "main", os.getpid(), flush=True)
p.join()
""",
    "join-shell": """import multiprocessing as mp, os, subprocess, sys, time
svc = subprocess.Popen(f"{sys.executable} svc.py; echo over", shell=True)
p = mp.get_context("fork").Process(target=time.sleep, args=(600,))
p.start()
print("svc", svc.pid, "main", os.getpid(), flush=True)
p.join()
""",
}
SAVING_SVC = """import os, signal, sys, time
def save(*_):
    open("saved", "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
open("svc.pid", "w").write(str(os.getpid()))
time.sleep(600)
"""


@pytest.mark.parametrize("wait", list(NOT_LAUNCHERS))
def test_a_program_that_waits_for_a_signal_or_its_io_is_no_launcher(tmp_path, wait):
    """The rank's main thread waits for SIGTERM (sigwait) while a thread
    does the work, or it waits in select (its service's stdout piped to
    it), or it joins a multiprocessing child, and it started one Python
    service that saves its work on SIGTERM. No such wait is a launcher's:
    the rank's own stack is shown, and the service gets the job's stop, not
    a SIGABRT (under select with the piped stdout, and beside a join, it
    did)."""
    (tmp_path / "train.py").write_text(NOT_LAUNCHERS[wait])
    (tmp_path / "svc.py").write_text(SAVING_SVC)
    r = run([binary("ddprun"), "--nproc-per-node", "1", "--hang-timeout", "2", "train.py"],
            env=dict(os.environ, PYTHON_EXEC=PYTHON), cwd=tmp_path, timeout=120)
    assert r.returncode == HANG_EXIT, r.stderr
    main = int(re.search(r"^svc \d+ main (\d+)$", r.stdout, re.M)[1])
    svc = int((tmp_path / "svc.pid").read_text())
    block = rank_block(r.stderr, 0)
    assert f"  native stack (eu-stack -p {main}):\n" in block, block
    aborts = re.search(r"^  Python stacks?: SIGABRT to (.*)$", block, re.M)
    assert aborts and str(main) in aborts[1] and str(svc) not in aborts[1], block
    wait_for(lambda: (tmp_path / "saved").exists(), timeout=10, what="the service's save")


def test_a_rank_whose_background_thread_ticks_over_is_still_hung(tmp_path):
    """Every rank waits for ever while a thread wakes 20 times a second for
    a millisecond (an idle runtime's event loop: gloo's takes about 2% of a
    CPU). Any CPU time was progress, and a hung PyTorch gloo job was never
    reported; now CPU time counts from a tenth of a CPU up."""
    script = tmp_path / "idle.py"
    script.write_text("import threading, time\n"
                      "def loop():\n"
                      "    while True:\n"
                      "        t = time.monotonic()\n"
                      "        while time.monotonic() - t < 0.001:\n"
                      "            pass\n"
                      "        time.sleep(0.05)\n"
                      "threading.Thread(target=loop, daemon=True).start()\n"
                      "threading.Event().wait()\n")
    r = run_py_ranks(script)
    assert r.returncode == HANG_EXIT, r.stderr
    assert "no rank made progress" in r.stderr


def read_until(stream, text, seen, timeout=60):
    """Read stream's descriptor (unbuffered) until text shows up (bounded)."""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r}; got {seen!r}"
        if select.select([fd], [], [], left)[0]:
            data = os.read(fd, 65536)
            assert data, f"closed before {text!r}; got {seen!r}"
            seen += data.decode(errors="replace")
    return seen


def test_sigusr2_dumps_every_rank_and_the_job_goes_on(reaper, tmp_path):
    flag = tmp_path / "go"
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", prog("hang_coll"), "2",
                      "wait", str(flag)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)
    out = read_until(p.stdout, "rank 0 did 2", "")
    out = read_until(p.stdout, "rank 1 did 2", out)
    p.send_signal(signal.SIGUSR2)
    err = read_until(p.stderr, "where the ranks are (the job goes on)", "")
    err = read_until(p.stderr, "in no collective (last completed #2)", err)
    flag.write_text("")
    rest_out, rest_err = p.communicate(timeout=60)
    err += rest_err
    assert p.returncode == 0, err
    assert "stack dump of node 0" in err and "on demand (SIGUSR2)" in err
    assert "collective: no collective (last completed #2)" in rank_block(err, 0)
    assert "native stack (eu-stack" in rank_block(err, 1)
    assert "the job hung" not in err


def test_a_rank_failing_during_a_sigusr2_dump_is_summed_up_after_the_dump(reaper, tmp_path):
    """The rank fails while its stack is being taken (the stack tool takes
    4 s here): the dump comes first, says the workers have stopped, and the
    failure summary follows it. The summary came first, and the dump after
    it said "the job goes on" of a job that had ended."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "eu-stack").write_text("#!/bin/sh\necho slow stack of $2\nexec sleep 4\n")
    (tools / "eu-stack").chmod(0o755)
    flag = tmp_path / "go"
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "1", "sh", "-c",
                      f"echo ready; while [ ! -e {flag} ]; do sleep 0.1; done; exit 3"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     env=dict(os.environ, PATH=f"{tools}:/usr/bin:/bin"))
    read_until(p.stdout, "ready", "")
    p.send_signal(signal.SIGUSR2)
    err = read_until(p.stderr, "stack dump of node 0", "")
    flag.write_text("")  # the rank exits 3 while its stack is taken
    rest_out, rest_err = p.communicate(timeout=60)
    err += rest_err
    assert p.returncode == 3, err
    stack = err.find("slow stack of")
    verdict = err.find("where the ranks are (the workers have stopped)")
    summary = err.find("Root Cause (first observed failure)")
    assert 0 <= stack < verdict < summary, err
    assert "the job goes on" not in err, err


def test_sigusr2_named_in_signals_to_handle_is_forwarded_instead(reaper, tmp_path):
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "--signals-to-handle",
                      "SIGTERM,SIGUSR2", prog("launch_sigwait"), str(tmp_path)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: all((tmp_path / f"ready.{i}").exists() for i in range(2))
             or p.poll() is not None, timeout=30, what="workers ready")
    p.send_signal(signal.SIGUSR2)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGUSR2, err
    assert "stack dump" not in err


def test_workers_get_faulthandler_and_the_progress_file(tmp_path):
    cmd = [binary("ddprun"), "--nproc-per-node", "2", "sh", "-c",
           f'env > {tmp_path}/env.$LOCAL_RANK']
    r = run(cmd)
    assert r.returncode == 0, r.stderr
    for lr in range(2):
        env = dict(line.split("=", 1) for line in
                   (tmp_path / f"env.{lr}").read_text().splitlines() if "=" in line)
        assert env["PYTHONFAULTHANDLER"] == "1"
        assert re.fullmatch(r"/proc/\d+/fd/\d+", env["DDP_PROGRESS_FILE"])
        assert "TORCHELASTIC_TIMER_FILE" not in env
    # The user's own PYTHONFAULTHANDLER is kept.
    r = run(cmd, env=dict(os.environ, PYTHONFAULTHANDLER=""))
    assert r.returncode == 0, r.stderr
    assert "PYTHONFAULTHANDLER=\n" in (tmp_path / "env.0").read_text()


FILE_TIMER = """\
import os, sys, time
from torch.distributed.elastic.timer import FileTimerClient, configure, expires

path = os.environ["TORCHELASTIC_TIMER_FILE"]
import stat
assert stat.S_ISFIFO(os.stat(path).st_mode)
configure(FileTimerClient(path))
rank = int(os.environ["RANK"])
with expires(after=1, scope="step"):
    if rank == 1:
        print("rank 1 overruns its timer", flush=True)
        time.sleep(600)
with expires(after=300, scope="released"):
    pass
print(f"rank {rank} finished its step", flush=True)
"""


def test_file_timer_kills_the_worker_whose_timer_expires(tmp_path):
    script = tmp_path / "timer.py"
    script.write_text(FILE_TIMER)
    env = dict(os.environ, PYTHON_EXEC=PYTHON, TORCHELASTIC_ENABLE_FILE_TIMER="1")
    r = run([binary("ddprun"), "--nproc-per-node", "2", str(script)], env=env, timeout=180)
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    assert "rank 0 finished its step" in r.stdout
    assert "rank 1 finished" not in r.stdout
    m = re.search(r"rank 1 \(local rank 1\): file timer 'step' of pid (\d+) expired: SIGKILL",
                  r.stderr)
    assert m, r.stderr
    assert f"exitcode  : -9 (pid: {m.group(1)})" in r.stderr
    assert "traceback : TimerExpired: file timer 'step'" in r.stderr
    fifo = re.search(r"requests are read from (\S+)", r.stderr).group(1)
    assert not os.path.exists(fifo)


def test_file_timer_at_a_given_path_never_kills_a_process_outside_the_job(reaper, tmp_path):
    bystander = reaper.popen(["sleep", "600"])
    fifo = tmp_path / "timer.fifo"
    script = tmp_path / "evil.py"
    script.write_text(
        "import os, time\n"
        "from torch.distributed.elastic.timer import FileTimerClient, FileTimerRequest\n"
        f"c = FileTimerClient(os.environ['TORCHELASTIC_TIMER_FILE'])\n"
        f"c._send_request(FileTimerRequest({bystander.pid}, 'x', time.time() - 1, 9))\n"
        "time.sleep(2)\n"
        "print('done', flush=True)\n")
    env = dict(os.environ, PYTHON_EXEC=PYTHON, TORCHELASTIC_ENABLE_FILE_TIMER="1",
               TORCHELASTIC_TIMER_FILE=str(fifo))
    r = run([binary("ddprun"), str(script)], env=env, timeout=180)
    assert r.returncode == 0, r.stderr
    assert f"refused a timer for pid {bystander.pid}: not a worker of this node" in r.stderr
    assert bystander.poll() is None
    assert not fifo.exists()


def two_nodes(reaper, tmp_path, extra, args, port=None, nnodes=2, wrap=()):
    """Two ddprun (or nnodes) on loopback (static rendezvous), 2 workers each,
    running hang_coll (under the command wrap, if any)."""
    from conftest import free_port
    from mnutil import Agent, clean_env
    port = port or free_port()
    agents = []
    for r in range(nnodes):
        agents.append(Agent(reaper, tmp_path, f"node{r}",
                            ["--nnodes", str(nnodes), "--node-rank", str(r), "--master-addr",
                             "127.0.0.1", "--master-port", str(port), "--nproc-per-node", "2",
                             "--shutdown-timeout", "5", *extra, *wrap, prog("hang_coll"),
                             *args],
                            env=clean_env()))
    return agents


def test_two_nodes_every_node_dumps_its_ranks_and_both_exit_124(reaper, tmp_path):
    agents = two_nodes(reaper, tmp_path, ["--hang-timeout", "2"], ["3", "2"])
    for a in agents:
        assert a.wait(timeout=120) == HANG_EXIT, a.stderr()
    err = [a.stderr() for a in agents]
    # Each node dumps its own ranks, with their stacks.
    assert "stack dump of node 0" in err[0] and "stack dump of node 1" in err[1]
    for rank in (0, 1):
        assert "native stack" in rank_block(err[0], rank)
    assert "hang_coll_sleeping_rank" in rank_block(err[1], 2)
    assert "collective: no collective (last completed #3)" in rank_block(err[1], 2)
    assert "collective: all_reduce #4" in rank_block(err[1], 3)
    # The requester's verdict spans the nodes (both may have found it).
    both = err[0] + err[1]
    assert "rank 2 is in no collective (last completed #3)" in both
    assert "ranks 0-1,3 wait in all_reduce #4" in both
    assert "found the job hung (--hang-timeout)" in both


def test_two_nodes_of_python_workers_still_get_the_verdict(reaper, tmp_path):
    """Each worker is Python running the program as its child: the hang's
    SIGABRT ends every one of them (faulthandler prints its stack), so each
    node's workers are gone before its hold is over. The verdict still comes,
    with the places the ranks were in when the dump began, and the job ends
    124 everywhere. Before, no node printed a verdict: each node's own end,
    published as its workers died, ended the round before the requester had
    the positions (which had also been read again once the ranks were gone:
    none left)."""
    wrap = [PYTHON, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"]
    agents = two_nodes(reaper, tmp_path, ["--hang-timeout", "2"], ["3", "2"], wrap=wrap)
    for a in agents:
        assert a.wait(timeout=120) == HANG_EXIT, a.stderr()
    err = [a.stderr() for a in agents]
    both = err[0] + err[1]
    # (A node's workers may fail on their own first: their peers' abort
    # cut their connections.)
    assert "Fatal Python error: Aborted" in both
    assert both.count("the job hung: no rank made progress") == 1, both
    assert "rank 2 is in no collective (last completed #3)" in both
    assert "ranks 0-1,3 wait in all_reduce #4" in both
    assert "found the job hung (--hang-timeout)" in both
    # The round's end is the requester's, final: no node ended it for its
    # own workers' deaths in the meantime.
    assert "has not ended it" not in both


def test_a_gathering_node_whose_store_stops_answering_still_ends(reaper, tmp_path):
    """Node 1 gathers every node's positions (SIGUSR2) while node 2, stopped,
    sends none; then the store's host (node 0) stops too, its connections
    up: nothing answers the gathering's wait. Node 1 finds the store silent
    (heartbeat), and its leave, which waits for the gathering, waits at most
    35 s more: it exits 75 (lost). Before, the leave waited for an answer
    that never came, and ddprun ran until killed."""
    from conftest import free_port
    from mnutil import Agent, clean_env
    port = free_port()
    agents = [Agent(reaper, tmp_path, f"node{r}",
                    ["--nnodes", "3", "--node-rank", str(r), "--master-addr", "127.0.0.1",
                     "--master-port", str(port), "--nproc-per-node", "1",
                     "--shutdown-timeout", "5", "--rdzv-conf", "heartbeat_timeout=10",
                     "sleep", "300"], env=clean_env()) for r in range(3)]
    try:
        wait_for(lambda: all("round 0:" in a.stderr() for a in agents), timeout=60,
                 what="every node in round 0")
        agents[2].signal(signal.SIGSTOP)

        def node0_dumped():
            if "stack dump of node 0" in agents[0].stderr():
                return True
            # Again: "round 0:" can come before node 1 has its connection
            # for the requests up, and it then dumps only its own ranks
            # (seen once, in the CI's sanitizer run).
            agents[1].signal(signal.SIGUSR2)
            return False

        wait_for(node0_dumped, timeout=90, interval=3, what="node 0 dumped for node 1")
        agents[0].signal(signal.SIGSTOP)
        assert agents[1].wait(timeout=120) == 75, agents[1].stderr()
        err = agents[1].stderr()
        assert "the hang's verdict did not come in 35 s: going on without it" in err, err
    finally:
        for a in (agents[0], agents[2]):
            a.signal(signal.SIGCONT)
            a.signal(signal.SIGKILL)


def test_a_node_lost_while_the_hang_is_gathered_is_neither_waited_for_nor_cleared(reaper,
                                                                                 tmp_path):
    """Node 1's agent stops (a frozen host) once its ranks are in the
    collective that hangs (rank 2 of node 1 sleeps); node 0 finds the job
    hung and asks every node, then finds node 1 lost. It waited the whole
    30 s for node 1's positions; its verdict, from its own ranks only, said
    "every rank is in the same collective: the hang is inside it ... not in
    one rank's program", clearing the rank that hung; and it said "exit
    status 124" and exited 75, the lost node's end being the job's (found by
    a hostile review). Now the loss ends the wait, node 1's ranks are named
    as not known, and the headline names the end that came first. Node 1,
    continued, ends with 75 as well."""
    from mnutil import stop_process
    # (5 s: node 1 must be stopped before it finds the hang itself and
    # sends its positions; a slow machine took over 2 s)
    agents = two_nodes(reaper, tmp_path,
                       ["--hang-timeout", "5", "--rdzv-conf", "heartbeat_timeout=12"], ["3", "2"])
    try:
        wait_for(lambda: "rank 3 did 3" in agents[1].stdout()
                 and "rank 2 did 3" in agents[1].stdout(), timeout=60,
                 what="node 1's ranks in the collective that hangs")
        agents[1].signal(signal.SIGSTOP)
        assert agents[0].wait(timeout=120) == 75, agents[0].stderr()
        # Continued, node 1 finds its job hung and its store gone: it ends
        # as for a lost store, as node 0 did for it. It exited 124 ("cannot
        # ask the other nodes for their stacks: Broken pipe").
        agents[1].signal(signal.SIGCONT)
        assert agents[1].wait(timeout=120) == 75, agents[1].stderr()
        assert "lost the rendezvous store at 127.0.0.1:" in agents[1].stderr()
    finally:
        stop_process(agents[1].p)
    err = agents[0].stderr()
    assert "node 1 lost (no heartbeat" in err, err
    assert re.search(r"the job hung: no rank made progress for [\d.]+ s \(--hang-timeout 5\); "
                     r"the job was ending already: node 1 lost \(no heartbeat", err), err
    assert "ranks 0-1 wait in all_reduce #4" in err, err
    assert ("ranks 2-3: not known where they are (their node sent no positions); the others "
            "may be waiting for them") in err, err
    assert "node 1 was lost before it sent its positions" in err, err
    assert "every rank is in the same collective" not in err, err
    assert "exit status 124" not in err, err


def test_two_nodes_a_stopped_rank_on_the_other_node_is_named(reaper, tmp_path):
    # Rank 2 on node 1 stops itself; whichever node gives the verdict has
    # its record from the store, stop included.
    agents = two_nodes(reaper, tmp_path, ["--hang-timeout", "2"], ["3", "stop", "2"])
    for a in agents:
        assert a.wait(timeout=120) == HANG_EXIT, a.stderr()
    both = agents[0].stderr() + agents[1].stderr()
    assert "rank 2 is stopped (a stop signal" in both, both
    assert "ranks 0-1,3 wait in all_reduce #4" in both
    assert "state T (stopped)" in rank_block(agents[1].stderr(), 2)


def test_two_nodes_the_rank_that_never_calls_ddp_init_is_named_across_nodes(reaper, tmp_path):
    # Rank 2 on node 1 never calls ddp_init: whichever node gives the
    # verdict has the other node's ranks in ddp_init from the store.
    agents = two_nodes(reaper, tmp_path, ["--hang-timeout", "2"], ["3", "late", "2"])
    for a in agents:
        assert a.wait(timeout=120) == HANG_EXIT, a.stderr()
    both = agents[0].stderr() + agents[1].stderr()
    assert "ranks 0-1,3 wait in ddp_init (joining its peers)" in both, both
    assert "rank 2 never called ddp_init" in both, both


def test_two_nodes_a_node_whose_workers_all_exited_gives_its_ranks(reaper, tmp_path):
    # Node 1's ranks both exit 0 before ddp_init; node 1 waits for the job's
    # end with no worker left, yet answers the requester: its ranks exited.
    # Before, it sent no positions and the verdict said the join itself
    # could not complete.
    agents = two_nodes(reaper, tmp_path, ["--hang-timeout", "2"], ["3", "early", "2+"])
    assert agents[0].wait(timeout=120) == HANG_EXIT, agents[0].stderr()
    agents[1].wait(timeout=120)
    err = agents[0].stderr()
    assert "ranks 2-3 exited (status 0) while the others run" in err, err
    assert "ranks 0-1 wait in ddp_init (joining its peers)" in err, err
    assert "the join itself" not in err


def test_two_nodes_a_request_never_written_or_not_one_does_not_stop_the_verdict(reaper,
                                                                              tmp_path):
    """A store client numbers a hang request (hang/count) and writes none (a
    script cut short), then writes one that is not JSON, then {"over":
    true} (what a node in the next round writes to end the last round's
    waits): every node waited on the first for ever, and on the last parked
    again and again (a busy loop); the job's own hang verdict behind them
    never came (the job hung on). Now all three are skipped: every node
    dumps and exits 124."""
    from conftest import free_port
    port = free_port()
    agents = two_nodes(reaper, tmp_path, ["--rdzv-id", "job9", "--hang-timeout", "4"],
                       ["3", "2"], port=port)
    store = [binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "--prefix", "ddprun/job9"]
    wait_for(lambda: run([*store, "add", "r0/hang/count", "1"]).returncode == 0, timeout=60,
             what="the store")
    r = run([*store, "add", "r0/hang/count", "1"])
    assert r.returncode == 0, r.stderr
    assert run([*store, "set", f"r0/hang/req/{r.stdout.strip()}", "garbage"]).returncode == 0
    r = run([*store, "add", "r0/hang/count", "1"])
    assert r.returncode == 0, r.stderr
    over = '{"over": true}'
    assert run([*store, "set", f"r0/hang/req/{r.stdout.strip()}", over]).returncode == 0
    for a in agents:
        assert a.wait(timeout=120) == HANG_EXIT, a.stderr()
    err = agents[0].stderr() + agents[1].stderr()
    assert "hang request 1 was numbered but never written: skipped" in err
    assert "hang request 2 is not one (not JSON): skipped" in err
    assert "ranks 0-1,3 wait in all_reduce #4" in err


DUMPED_RANK = re.compile(r"^ddprun: rank \d+ \(local rank \d+\): pid (\d+) ", re.M)


def node_1_asked_and_every_node_dumped(reaper, tmp_path):
    """Two nodes of hang_coll 3 2 (no --hang-timeout), and node 1's hang
    request written through the store as if from host "elsewhere"; returns
    the agents once both have dumped their two ranks."""
    from conftest import free_port
    port = free_port()
    agents = two_nodes(reaper, tmp_path, ["--rdzv-id", "job8"], ["3", "2"], port=port)
    store = [binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "--prefix", "ddprun/job8"]
    wait_for(lambda: all(f"rank {r} did 3" in agents[r // 2].stdout() for r in range(4)),
             timeout=60, what="every rank past its third all_reduce")
    r = run([*store, "add", "r0/hang/count", "1"])
    assert r.returncode == 0, r.stderr
    req = '{"node": 1, "host": "elsewhere", "fail": true, "why": "the job hung: a test"}'
    assert run([*store, "set", f"r0/hang/req/{r.stdout.strip()}", req]).returncode == 0
    wait_for(lambda: all(len(DUMPED_RANK.findall(a.stderr())) == 2 for a in agents),
             timeout=60, what="both nodes' dumps")
    return agents


def test_a_requester_that_never_ends_the_round_is_named_by_the_node_that_does(reaper,
                                                                             tmp_path):
    """A store client writes node 1's hang request (host "elsewhere") as if
    node 1's agent had asked and never ended the round; both nodes dump.
    Node 1's ranks then die (killed here, as Python ranks die of the dump's
    SIGABRT); node 0's, C ranks the dump did not end, stay hung. Each node
    waits 60 s from the request for the requester's end, then ends the
    round itself, final, naming the node that found the hang. Before, node
    0 waited only once its ranks were gone: for ever; and the end named the
    node that gave up waiting, with its own host."""
    agents = node_1_asked_and_every_node_dumped(reaper, tmp_path)
    for pid in map(int, DUMPED_RANK.findall(agents[1].stderr())):
        try:  # still node 1's ddprun's child (not gone, its pid not reused)
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == agents[1].p.pid:
                os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass  # gone already
    for a in agents:
        assert a.wait(timeout=150) == HANG_EXIT, a.stderr()
    both = agents[0].stderr() + agents[1].stderr()
    assert "the node that found the job hung has not ended it in 60 s: ending it" in both, both
    for a in agents:
        assert "node 1 (host elsewhere) found the job hung" in a.stderr(), a.stderr()
    assert "restarting" not in both


def test_a_signal_after_the_hang_is_named_in_the_end(reaper, tmp_path):
    """Node 1's hang request (written here) has every node dump and wait
    for its end; meanwhile node 0 gets SIGTERM. Its end goes out first and
    says so: the status stays the hang's, 124, but the reason is the signal
    (the end said node 0 "found the job hung", which it did not). A SIGUSR2
    before it, the hang's stacks dumped, is answered so (it said nothing)."""
    agents = node_1_asked_and_every_node_dumped(reaper, tmp_path)
    agents[0].signal(signal.SIGUSR2)
    wait_for(lambda: "SIGUSR2: the job hung and its stacks were dumped; it is ending"
             in agents[0].stderr(), timeout=30, what="node 0's answer to SIGUSR2")
    agents[0].signal(signal.SIGTERM)
    for a in agents:
        assert a.wait(timeout=60) == HANG_EXIT, a.stderr()
    err = agents[1].stderr()
    assert re.search(r"node 0 \(host [^)]*\) received SIGTERM: stopping the workers", err), err
    assert "found the job hung" not in err, err


def test_a_hang_found_during_an_on_demand_dump_is_still_asked_for(reaper, tmp_path):
    """Node 0 gathers every node's positions for SIGUSR2 while node 1,
    stopped, sends none; meanwhile node 0 finds its ranks hung (node 1's
    exited early). The hang was taken as asked for and lost: node 0 ran on
    for ever. Now it is asked for once the gathering is over: the job ends
    124 with the verdict. A second SIGUSR2 during the gathering is answered
    (it was ignored without a word)."""
    agents = two_nodes(reaper, tmp_path,
                       ["--hang-timeout", "8", "--rdzv-conf", "heartbeat_timeout=60"],
                       ["3", "early", "2+"])
    wait_for(lambda: all("round 0:" in a.stderr() for a in agents), timeout=60,
             what="every node in round 0")
    time.sleep(2)  # node 0's ranks in ddp_init (a dump before says less, no harm)
    agents[1].signal(signal.SIGSTOP)
    try:
        agents[0].signal(signal.SIGUSR2)
        wait_for(lambda: "stack dump of node 0" in agents[0].stderr(), timeout=30,
                 what="node 0's dump for SIGUSR2")
        agents[0].signal(signal.SIGUSR2)
        wait_for(lambda: "SIGUSR2: a stack dump is already being made" in agents[0].stderr(),
                 timeout=30, what="the second SIGUSR2 answered")
        wait_for(lambda: "no rank made progress" in agents[0].stderr(), timeout=60,
                 what="node 0 finding the hang")
    finally:
        agents[1].signal(signal.SIGCONT)
    assert agents[0].wait(timeout=120) == HANG_EXIT, agents[0].stderr()
    agents[1].wait(timeout=60)
    err = agents[0].stderr()
    assert "where the ranks of every node are (the job goes on)" in err, err
    assert "the job hung: no rank made progress" in err, err
    assert "ranks 0-1 wait in ddp_init (joining its peers)" in err, err


def test_a_request_counter_set_beyond_any_number_still_ends_the_hung_job(reaper, tmp_path):
    """A store client adds 2^31-1 to hang/count: the number each node's hang
    request then got did not fit an int, so the request went under a key no
    node reads and the asker waited for it for ever (its hang counted as
    asked): the job hung on. Now the number is refused and each node's hang
    ends the job as on one node (its own ranks' dump and verdict), 124,
    final: the restart left does not start the hung job again."""
    from conftest import free_port
    port = free_port()
    agents = two_nodes(reaper, tmp_path, ["--rdzv-id", "job5", "--hang-timeout", "4",
                                          "--max-restarts", "1"], ["3", "2"], port=port)
    store = [binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "--prefix", "ddprun/job5"]
    wait_for(lambda: run([*store, "add", "r0/hang/count", str(2**31 - 1)]).returncode == 0,
             timeout=60, what="the store")
    for a in agents:
        assert a.wait(timeout=120) == HANG_EXIT, a.stderr()
    err = agents[0].stderr() + agents[1].stderr()
    assert "cannot ask the other nodes for their stacks: the store's hang/count is 2147483648" in err
    # (its workers stopped already, or not yet, by this node's own hang)
    assert re.search(r"found the job hung \(--hang-timeout\): (stopping the workers|the "
                     r"workers are stopping|the job ends)\n", err), err
    assert "restarting" not in err, err


def test_a_hang_whose_request_fails_during_an_on_demand_dump_still_ends_the_job(reaper,
                                                                              tmp_path):
    """Each node finds the hang and asks (its request held back 2 s by the
    test hook); meanwhile a store client's on-demand request comes and the
    counter is set beyond any number, so each node's request is refused
    while it dumps for the on-demand one (its stack tool takes 4 s here).
    The refusal was dropped (a dump was under way): the hang was lost, and
    the job ran on for ever. Now each node dumps its ranks once that dump
    is over, and the job ends 124 with the verdict."""
    from conftest import free_port
    from mnutil import Agent, clean_env
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "eu-stack").write_text("#!/bin/sh\necho slow stack of $2\nexec sleep 4\n")
    (tools / "eu-stack").chmod(0o755)
    port = free_port()
    env = clean_env(DDPRUN_TEST_HANG_ASK_DELAY_MS="2000", PATH=f"{tools}:/usr/bin:/bin")
    agents = [Agent(reaper, tmp_path, f"node{r}",
                    ["--nnodes", "2", "--node-rank", str(r), "--master-addr", "127.0.0.1",
                     "--master-port", str(port), "--rdzv-id", "job4", "--nproc-per-node", "2",
                     "--shutdown-timeout", "5", "--hang-timeout", "3", prog("hang_coll"), "3",
                     "2"], env=env)
              for r in range(2)]
    wait_for(lambda: any("asking every node for its ranks' stacks" in a.stderr()
                         for a in agents), timeout=60, what="a node finding the hang")
    store = [binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "--prefix", "ddprun/job4"]
    r = run([*store, "add", "r0/hang/count", "1"])
    assert r.returncode == 0 and r.stdout.strip() == "1", (r.stdout, r.stderr)
    assert run([*store, "add", "r0/hang/count", str(2**31 - 2)]).returncode == 0
    req = '{"node": -1, "fail": false, "why": "asked by a test"}'
    assert run([*store, "set", "r0/hang/req/1", req]).returncode == 0
    for a in agents:
        assert a.wait(timeout=120) == HANG_EXIT, a.stderr()
    during = 0
    for a in agents:
        err = a.stderr()
        asked = err.find("asking every node for its ranks' stacks")
        on_demand = err.find("asked by a test (asked through the store)")
        refused = err.find("the store's hang/count is 21474836")
        assert 0 <= on_demand < refused and asked >= 0, err
        # Found before the on-demand dump, refused during it.
        during += asked < on_demand
        assert "the job hung; dumping this node's ranks only" in err[refused:], err
        assert "the job hung: no rank made progress" in err[refused:], err
    assert during >= 1, [a.stderr() for a in agents]


def test_three_nodes_that_find_the_hang_at_once_give_one_true_verdict(reaper, tmp_path):
    """Rank 3 (node 1) stops calling; every node finds the hang within a
    sample of the others, and most runs two or three ask at once. Each asker
    printed a verdict: the later ones raced the round's end for the
    positions and said "no rank reports its collectives (none uses
    libddp)... could not be read: Cannot allocate memory", node 0's too in
    some runs. Now the first request's verdict is the job's, the only one."""
    agents = two_nodes(reaper, tmp_path, ["--hang-timeout", "4"], ["5", "3"], nnodes=3)
    for a in agents:
        assert a.wait(timeout=120) == HANG_EXIT, a.stderr()
    err = "".join(a.stderr() for a in agents)
    assert err.count("rank 3 is in no collective (last completed #5)") == 1, err
    assert err.count("ranks 0-2,4-5 wait in all_reduce #6") == 1, err
    assert "could not be read" not in err and "none uses libddp" not in err, err


def test_two_nodes_sigusr2_on_one_node_dumps_every_node(reaper, tmp_path):
    flag = tmp_path / "go"
    agents = two_nodes(reaper, tmp_path, [], ["2", "wait", str(flag)])
    wait_for(lambda: all(f"rank {r} did 2" in agents[r // 2].stdout() for r in range(4)),
             timeout=60, what="every rank waiting")
    agents[1].signal(signal.SIGUSR2)
    wait_for(lambda: "where the ranks of every node are" in agents[1].stderr(), timeout=60,
             what="the verdict of every node")
    flag.write_text("")
    for a in agents:
        assert a.wait(timeout=60) == 0, a.stderr()
    assert "stack dump of node 0 (host" in agents[0].stderr()
    assert "on demand (SIGUSR2) (asked by node 1)" in agents[0].stderr()
    assert "ranks 0-3 are in no collective (last completed #2)" in agents[1].stderr()


def test_two_nodes_a_store_client_asks_every_node_for_its_dump(reaper, tmp_path):
    from conftest import free_port
    port = free_port()
    flag = tmp_path / "go"
    agents = two_nodes(reaper, tmp_path, ["--rdzv-id", "job7"], ["2", "wait", str(flag)],
                       port=port)
    wait_for(lambda: all(f"rank {r} did 2" in agents[r // 2].stdout() for r in range(4)),
             timeout=60, what="every rank waiting")
    store = [binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "--prefix", "ddprun/job7"]
    r = run([*store, "add", "r0/hang/count", "1"])
    assert r.returncode == 0, r.stderr
    k = r.stdout.strip()
    # "fail" from outside the job is ignored: a store client never stops it.
    r = run([*store, "set", f"r0/hang/req/{k}",
             '{"node": -1, "fail": true, "why": "asked by the operator"}'])
    assert r.returncode == 0, r.stderr
    for a in agents:
        wait_for(lambda: "asked by the operator (asked through the store)" in a.stderr(),
                 timeout=60, what=f"{a.name}'s dump")
    r = run([*store, "get", "--wait", f"r0/hang/where/{k}/1"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("[[2,1,0,2,2,")
    flag.write_text("")
    for a in agents:
        assert a.wait(timeout=60) == 0, a.stderr()
    assert "native stack" in rank_block(agents[1].stderr(), 3)


def test_two_nodes_a_node_waiting_for_a_computing_node_is_not_hung(reaper, tmp_path):
    # Rank 0 (node 0) computes for 8 s, printing nothing; ranks 2-3 (node 1)
    # wait in all_reduce meanwhile: node 1 alone sees no progress, but node
    # 0's counts for the job.
    agents = two_nodes(reaper, tmp_path, ["--hang-timeout", "3"], ["2", "compute", "8"])
    for a in agents:
        assert a.wait(timeout=120) == 0, a.stderr()
        assert "stack dump" not in a.stderr()


def test_a_stack_tool_that_hangs_is_cut_off_and_the_job_still_ends(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    stuck = tools / "eu-stack"
    stuck.write_text("#!/bin/sh\necho partial stack of $2\nexec sleep 600\n")
    stuck.chmod(0o755)
    env = dict(os.environ, PATH=f"{tools}:/usr/bin:/bin")
    r = run([binary("ddprun"), "--nproc-per-node", "2", "--hang-timeout", "1",
             prog("hang_coll"), "2", "1"], env=env, timeout=180)
    assert r.returncode == HANG_EXIT, r.stderr
    block = rank_block(r.stderr, 1)
    assert "partial stack of" in block
    assert "(the stack tool did not finish in time)" in block
    assert "rank 1 is in no collective (last completed #2)" in r.stderr


def test_sigusr2_after_the_hangs_dump_does_not_dump_again(reaper, tmp_path):
    """The hang dumped and judged, ddprun stops the ranks, which ignore
    SIGTERM here: the stop lasts its shutdown timeout. A SIGUSR2 meanwhile
    says the job is ending; it dumped the stopping ranks again, over the
    positions the hang's verdict had used."""
    from mnutil import Agent, clean_env
    a = Agent(reaper, tmp_path, "node0",
              ["--nproc-per-node", "2", "--hang-timeout", "2", "--shutdown-timeout", "20",
               "sh", "-c", "trap '' TERM; exec \"$0\" \"$@\"", prog("hang_coll"), "3", "1"],
              env=clean_env())
    wait_for(lambda: f"stopping it (exit status {HANG_EXIT})" in a.stderr(), timeout=60,
             what="the hang's verdict")
    a.signal(signal.SIGUSR2)
    wait_for(lambda: "SIGUSR2: the job hung and its stacks were dumped; it is ending"
             in a.stderr(), timeout=30, what="the answer to SIGUSR2")
    assert a.wait(timeout=60) == HANG_EXIT, a.stderr()
    assert a.stderr().count("stack dump of") == 1, a.stderr()
