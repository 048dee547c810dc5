"""Exit status (the failed worker's code or 128+signal), fail-fast, and the
failure report in torchrun's layout, with error files read from the workers."""
import json
import os
import re
import resource
import signal
import socket
import subprocess

import pytest

from conftest import binary, pid_alive, prog, run, wait_for


# time: when ddprun saw the failure, to the microsecond; caused_by: only for
# a failure libddp says another rank's caused.
FAIL_RE = re.compile(
    r"\[(\d+)\]:\n  time      : \d{4}-\d\d-\d\d_\d\d:\d\d:\d\d\n  host      : \S+\n"
    r"  rank      : (\d+) \(local_rank: (\d+)\)\n  exitcode  : (-?\d+) \(pid: (\d+)\)"
    r"(?:  \(SIG\w+\))?\n"
    r"  error_file: (.*)\n(?:  caused_by : .*\n)?  traceback : (.*)")


def ddprun(*args, **kw):
    return run([binary("ddprun"), *args], **kw)


def report(stderr):
    """(failures, root) parsed from the report at the end of stderr."""
    start = stderr.index("FAILED\n")
    text = stderr[start:]
    others, root = text.split("Root Cause (first observed failure):\n")
    return FAIL_RE.findall(others), FAIL_RE.findall(root)


def test_success_is_0_and_prints_no_report():
    r = ddprun("--nproc-per-node", "3", "/bin/true")
    assert r.returncode == 0 and r.stderr == "" and r.stdout == ""


def test_worker_exit_code_becomes_ddprun_exit_code():
    r = ddprun("--nproc-per-node", "2", "sh", "-c", '[ "$RANK" = 1 ] && exit 7; exit 0')
    assert r.returncode == 7
    others, root = report(r.stderr)
    assert root[0][1:4] == ("1", "1", "7")
    assert root[0][5] == "<N/A>"
    assert "sh FAILED" in r.stderr


def test_worker_killed_by_sigsegv_gives_139_and_names_the_signal():
    r = ddprun("--nproc-per-node", "2", "sh", "-c",
               '[ "$RANK" = 0 ] && kill -SEGV $$; sleep 30')
    assert r.returncode == 139
    others, root = report(r.stderr)
    assert root[0][3] == "-11"
    assert root[0][6] == f"Signal 11 (SIGSEGV) received by PID {root[0][4]}"
    # named on the exitcode line too, as torchrun 2.x does
    assert f"exitcode  : -11 (pid: {root[0][4]})  (SIGSEGV)\n" in r.stderr
    assert others == []
    assert "<NO_OTHER_FAILURES>" in r.stderr


def test_fail_fast_stops_siblings_that_ignore_sigterm(tmp_path):
    # Ranks 1-3 ignore SIGTERM and would sleep for 1000 s; rank 0 fails once
    # they are all up.
    script = (f'cd {tmp_path}; if [ "$RANK" = 0 ]; then '
              'while [ ! -e pid.1 ] || [ ! -e pid.2 ] || [ ! -e pid.3 ]; do sleep 0.01; done; '
              'exit 3; fi; trap "" TERM; echo $$ > pid.tmp.$RANK; mv pid.tmp.$RANK pid.$RANK; '
              'exec sleep 1000')
    r = ddprun("--nproc-per-node", "4", "--shutdown-timeout", "1", "sh", "-c", script,
               timeout=60)
    assert r.returncode == 3
    for rank in (1, 2, 3):
        pid = int((tmp_path / f"pid.{rank}").read_text())
        assert (f"worker {rank} (pid {pid}) did not stop within the shutdown timeout: "
                "SIGKILL") in r.stderr
        wait_for(lambda: not pid_alive(pid), timeout=10, what=f"rank {rank} gone")
    # Rank 0 left nothing: its group, emptied while the others ran, was
    # still counted, and "processes left by worker 0" sent users looking.
    assert "processes left by worker" not in r.stderr, r.stderr


def test_what_a_failed_worker_left_that_ignores_sigterm_is_named_and_killed(tmp_path):
    """The other side: rank 0 exits 3 leaving a child that ignores SIGTERM."""
    script = (f'cd {tmp_path}; if [ "$RANK" = 0 ]; then (trap "" TERM; exec sh -c '
              '\'echo $$ > kid.tmp; mv kid.tmp kid; exec sleep 1000\') & '
              'while [ ! -e kid ]; do sleep 0.01; done; exit 3; fi; exec sleep 1000')
    r = ddprun("--nproc-per-node", "2", "--shutdown-timeout", "1", "sh", "-c", script,
               timeout=60)
    assert r.returncode == 3
    assert ("processes left by worker 0 did not stop within the shutdown timeout: SIGKILL"
            in r.stderr), r.stderr
    assert "worker 1 (pid" not in r.stderr, r.stderr
    kid = int((tmp_path / "kid").read_text())
    wait_for(lambda: not pid_alive(kid), timeout=10, what="rank 0's child gone")
    others, root = report(r.stderr)
    assert root[0][1] == "0" and others == []


def test_grace_period_covers_what_a_worker_leaves_behind(tmp_path):
    # The worker (sh) dies of SIGTERM at once; its child catches SIGTERM and
    # finishes its cleanup: ddprun waits for it (within the shutdown timeout)
    # instead of killing it as soon as the worker itself is gone.
    p = prog("launch_sigwait")
    script = (f'{p} --exit 0 {tmp_path} & cd {tmp_path}; '
              'while [ ! -e ready.0 ] || [ ! -e ready.1 ]; do sleep 0.01; done; '
              '[ "$RANK" = 0 ] && exit 1; wait')
    r = ddprun("--nproc-per-node", "2", "--shutdown-timeout", "1000", "sh", "-c", script,
               timeout=60)
    assert r.returncode == 1
    assert "rank 1 got SIGTERM" in r.stdout


def test_siblings_that_honour_sigterm_end_without_waiting_for_the_timeout(tmp_path):
    # With a 1000 s shutdown timeout, finishing at all proves SIGTERM was sent.
    r = ddprun("--nproc-per-node", "3", "--shutdown-timeout", "1000", "sh", "-c",
               '[ "$RANK" = 2 ] && exit 5; exec sleep 1000', timeout=60)
    assert r.returncode == 5


def test_error_file_message_and_traceback_are_in_the_report(tmp_path):
    script = r'''
if [ "$RANK" = 1 ]; then
  printf '%s' '{"message": {"message": "ValueError: boom", "extraInfo":
    {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: boom\n",
     "timestamp": "1700000000"}}}' > "$TORCHELASTIC_ERROR_FILE"
  exit 1
fi
sleep 1000'''
    parent = tmp_path / "parent.json"
    r = ddprun("--nproc-per-node", "2", "sh", "-c", script, timeout=60,
               env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(parent)))
    assert r.returncode == 1
    others, root = report(r.stderr)
    assert root[0][1] == "1" and root[0][5].endswith("/attempt_0.1.error.json")
    assert root[0][6] == "Traceback (most recent call last):"
    assert '    File "t.py", line 3\n  ValueError: boom\n====' in r.stderr
    # The named error file is still there to read after ddprun has exited.
    assert os.path.exists(root[0][5])
    # ddprun's own error file (an outer launcher's) gets the root cause + errorCode.
    data = json.loads(parent.read_text())
    assert data["message"]["message"] == "ValueError: boom"
    assert data["message"]["errorCode"] == 1


def test_garbage_error_file_does_not_crash_the_report(tmp_path):
    r = ddprun("sh", "-c", 'echo "{not json" > "$TORCHELASTIC_ERROR_FILE"; exit 2')
    assert r.returncode == 2
    others, root = report(r.stderr)
    assert root[0][6] == "<error file is not torchelastic JSON>"


def test_a_fifo_for_an_error_file_does_not_wedge_ddprun(tmp_path):
    """A worker leaves a FIFO where its error file goes, and the parent's
    error file is a FIFO no one reads: ddprun blocked in open() for ever, its
    event loop inside (SIGTERM did nothing). Neither is read or written; the
    summary says why."""
    outer = tmp_path / "outer.fifo"
    os.mkfifo(outer)
    script = 'rm -f "$TORCHELASTIC_ERROR_FILE"; mkfifo "$TORCHELASTIC_ERROR_FILE"; exit 3'
    r = ddprun("--nproc-per-node", "1", "sh", "-c", script, timeout=60,
               env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(outer)))
    assert r.returncode == 3, r.stderr
    others, root = report(r.stderr)
    assert root[0][5].endswith(".error.json")
    assert root[0][6] == "<error file is not a regular file: not read>"
    # A report to pass on, to a FIFO nobody reads: said, not waited for.
    script = ('printf \'{"message": {"message": "boom", "extraInfo": {"py_callstack": "", '
              '"timestamp": "1"}}}\' > "$TORCHELASTIC_ERROR_FILE"; exit 3')
    r = ddprun("--nproc-per-node", "1", "sh", "-c", script, timeout=60,
               env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(outer)))
    assert r.returncode == 3, r.stderr
    assert (f"warning: cannot write the root cause's error report to {outer} "
            "(TORCHELASTIC_ERROR_FILE): a FIFO that no process reads") in r.stderr


@pytest.mark.parametrize("content", ["oops", ""])
def test_a_worker_error_file_that_is_not_json_is_named_not_the_parent_file(tmp_path, content):
    """The root cause wrote an error file that is not JSON (or an empty one):
    nothing to pass on, and the warning blamed the parent's file ("cannot
    write ... to OUTER: Invalid argument"). Now it names the worker's file."""
    outer = tmp_path / "outer.json"
    script = f'printf "{content}" > "$TORCHELASTIC_ERROR_FILE"; exit 3'
    r = ddprun("--nproc-per-node", "1", "sh", "-c", script, timeout=60,
               env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(outer)))
    assert r.returncode == 3, r.stderr
    others, root = report(r.stderr)
    what = "not JSON" if content else "empty"
    assert (f"warning: cannot write the root cause's error report to {outer} "
            f"(TORCHELASTIC_ERROR_FILE): the worker's error file ({root[0][5]}) is {what}"
            in r.stderr), r.stderr
    assert not outer.exists()


def test_a_parent_fifo_whose_reader_never_reads_is_given_up(tmp_path):
    """The parent's error file is a FIFO with a reader that never reads, and
    the report is larger than the pipe holds: ddprun's write blocked for
    ever, its exit with it. Now it gives up after 5 s without progress and
    says so; the exit status is the worker's."""
    outer = tmp_path / "outer.fifo"
    os.mkfifo(outer)
    reader = os.open(outer, os.O_RDONLY | os.O_NONBLOCK)
    try:
        script = ('printf \'{"message": {"message": "%s", "extraInfo": {"py_callstack": "", '
                  '"timestamp": "1"}}}\' "$(head -c 300000 /dev/zero | tr "\\0" x)" '
                  '> "$TORCHELASTIC_ERROR_FILE"; exit 3')
        r = ddprun("--nproc-per-node", "1", "sh", "-c", script, timeout=60,
                   env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(outer)))
    finally:
        os.close(reader)
    assert r.returncode == 3, r.stderr[-2000:]
    assert (f"warning: cannot write the root cause's error report to {outer} "
            "(TORCHELASTIC_ERROR_FILE): its reader took no data for 5 s, gave up") in r.stderr


def test_a_parent_fifo_with_a_reader_gets_the_whole_copy(tmp_path):
    """The same FIFO read by a process: the 5 MB error file (copied unread)
    arrives whole through the non-blocking writes."""
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"message": {"message": "E: " + "y" * (5 << 20),
                                           "extraInfo": {"py_callstack": "", "timestamp": "1"}}}))
    outer = tmp_path / "outer.fifo"
    got = tmp_path / "got.json"
    os.mkfifo(outer)
    cat = subprocess.Popen(["sh", "-c", f"exec cat {outer} > {got}"])
    try:
        r = ddprun("--nproc-per-node", "1", "sh", "-c",
                   f'cp {big} "$TORCHELASTIC_ERROR_FILE"; exit 4', timeout=60,
                   env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(outer)))
        assert cat.wait(timeout=60) == 0
    finally:
        if cat.poll() is None:
            cat.kill()
            cat.wait()
    assert r.returncode == 4, r.stderr[-2000:]
    assert "warning" not in r.stderr
    assert got.read_bytes() == big.read_bytes()


def test_a_parent_error_file_that_is_a_socket_is_named_as_one(tmp_path):
    """open() says ENXIO ("No such device or address") for a socket, as for a
    FIFO nobody reads: the warning said "a FIFO" for both."""
    path = tmp_path / "outer.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    try:
        script = ('printf \'{"message": {"message": "boom", "extraInfo": {"py_callstack": "", '
                  '"timestamp": "1"}}}\' > "$TORCHELASTIC_ERROR_FILE"; exit 3')
        r = ddprun("--nproc-per-node", "1", "sh", "-c", script, timeout=60,
                   env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(path)))
    finally:
        s.close()
    assert r.returncode == 3, r.stderr
    assert (f"warning: cannot write the root cause's error report to {path} "
            "(TORCHELASTIC_ERROR_FILE): a socket, which cannot be opened") in r.stderr


def test_the_parents_error_file_may_be_dev_stderr(tmp_path):
    """torchrun's open(path, "w") writes to /dev/stderr: so does ddprun (a
    check for regular files once dropped it, silently)."""
    script = ('printf \'{"message": {"message": "boom", "extraInfo": {"py_callstack": "", '
              '"timestamp": "1"}}}\' > "$TORCHELASTIC_ERROR_FILE"; exit 3')
    r = ddprun("--nproc-per-node", "1", "sh", "-c", script, timeout=60,
               env=dict(os.environ, TORCHELASTIC_ERROR_FILE="/dev/stderr"))
    assert r.returncode == 3, r.stderr
    line = [l for l in r.stderr.splitlines() if l.startswith('{"message"')]
    assert len(line) == 1, r.stderr
    data = json.loads(line[0])
    assert data["message"]["message"] == "boom" and data["message"]["errorCode"] == 3


def test_an_error_file_too_large_to_read_is_named_and_passed_on(tmp_path):
    """5 MB of valid error file (over the 4 MiB ddprun reads): the summary
    said "<N/A>" and "no error file", and the parent's error file got
    nothing. Now the summary names it and the parent's is a copy."""
    big = tmp_path / "big.json"
    doc = {"message": {"message": "ValueError: " + "x" * (5 << 20),
                       "extraInfo": {"py_callstack": "", "timestamp": "1"}}}
    big.write_text(json.dumps(doc))
    parent = tmp_path / "parent.json"
    r = ddprun("--nproc-per-node", "1", "sh", "-c",
               f'cp {big} "$TORCHELASTIC_ERROR_FILE"; exit 3', timeout=60,
               env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(parent)))
    assert r.returncode == 3, r.stderr[-2000:]
    others, root = report(r.stderr)
    assert root[0][5].endswith(".error.json")
    assert root[0][6] == "<error file over 4 MiB: not read, see the file>"
    assert parent.read_bytes() == big.read_bytes()


def parent_message(path):
    data = json.loads(path.read_text())
    assert set(data["message"]["extraInfo"]) == {"py_callstack", "timestamp"}, data
    return data["message"]["message"]


def test_ddpruns_own_failure_goes_to_the_parents_error_file(tmp_path):
    """With no failure of a worker's to pass on, an outer launcher's error
    file (TorchX reads it) got nothing when ddprun itself failed; torchrun's
    @record on its main writes the agent's exception there (found by a
    hostile review). A port in use, a program that is not there, a signal."""
    parent = tmp_path / "parent.json"
    env = dict(os.environ, TORCHELASTIC_ERROR_FILE=str(parent))
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        r = ddprun("--master-port", str(port), "/bin/true", env=env)
    assert r.returncode == 1, r.stderr
    assert parent_message(parent) == (
        f"cannot listen on 127.0.0.1:{port}: the port is in use (pick another port in "
        "--master-port, or leave it out to use a free one)")
    parent.unlink()
    r = ddprun("no-such-program-here", env=env)
    assert r.returncode == 127, r.stderr
    assert parent_message(parent) == "no-such-program-here: command not found"
    parent.unlink()
    p = subprocess.Popen([binary("ddprun"), "--nproc-per-node", "2", "sh", "-c",
                          f'touch {tmp_path}/up.$LOCAL_RANK; exec sleep 60'], env=env,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: all((tmp_path / f"up.{i}").exists() for i in range(2)),
                 what="both workers up")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 143
    finally:
        p.kill()
        p.communicate()
    assert parent_message(parent) == f"ddprun (pid {p.pid}) on host {socket.gethostname()} " \
                                     "received SIGTERM"


def test_a_worker_failing_without_an_error_file_writes_nothing_to_the_parents(tmp_path):
    """As torchrun's @record: a worker's failure is passed on only as its
    error file, and one without writes nothing; nor does a success. An empty
    TORCHELASTIC_ERROR_FILE is none (torchrun 2.x gives its workers "" under
    --log-dir /dev/null, and so does ddprun): ddprun warned that it "cannot
    write why the job failed to  (TORCHELASTIC_ERROR_FILE)", and a ddprun
    run by another then had that warning quoted as its failure."""
    parent = tmp_path / "parent.json"
    env = dict(os.environ, TORCHELASTIC_ERROR_FILE=str(parent))
    assert ddprun("sh", "-c", "exit 3", env=env).returncode == 3
    assert ddprun("/bin/true", env=env).returncode == 0
    assert not parent.exists()
    env = dict(os.environ, TORCHELASTIC_ERROR_FILE="")
    r = ddprun("--no-python", "/nonexistent", env=env)
    assert r.returncode == 127 and "warning" not in r.stderr, r.stderr
    r = ddprun("sh", "-c", 'echo "{}" > "$TORCHELASTIC_ERROR_FILE"; exit 3', env=env)
    assert r.returncode == 3 and "warning" not in r.stderr, r.stderr


def test_temporary_log_dir_is_removed_unless_the_report_needs_it(tmp_path):
    t = tmp_path / "own"
    t.mkdir()
    env = dict(os.environ, TMPDIR=str(t))
    assert ddprun("--nproc-per-node", "2", "/bin/true", env=env).returncode == 0
    assert ddprun("--nproc-per-node", "2", "/bin/false", env=env).returncode == 1
    assert os.listdir(t) == []
    r = ddprun("sh", "-c", 'echo "{}" > "$TORCHELASTIC_ERROR_FILE"; exit 1', env=env)
    assert r.returncode == 1 and len(os.listdir(t)) == 1


def test_sigwait_prog_exit_code_passes_through(tmp_path):
    # A C worker that exits 9 on SIGUSR1 (forwarded), status 128+SIGUSR1 wins.
    p = prog("launch_sigwait")
    r = ddprun("--nproc-per-node", "1", "--signals-to-handle", "SIGUSR1", "sh", "-c",
               f'{p} --exit 9 {tmp_path} & while [ ! -e {tmp_path}/ready.0 ]; do sleep 0.01; '
               'done; kill -USR1 $PPID; wait', timeout=60)
    assert r.returncode == 128 + 10
    assert "rank 0 got SIGUSR1" in r.stdout


def test_more_workers_than_the_open_files_limit_allows_are_refused_before_any_starts(tmp_path):
    """Under ulimit -n 64 (soft and hard), 30 workers: ddprun started 20 of
    them, then stopped with "cannot make a pipe: Too many open files". Now it
    refuses before starting any, saying what it needs and what to raise;
    2 workers still run."""
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    mark = tmp_path / "started"
    mark.mkdir()
    r = ddprun("--nproc-per-node", "30", "sh", "-c", f'touch "{mark}/$RANK"',
               preexec_fn=limit)
    assert r.returncode == 1, r.stderr
    assert re.search(r"ddprun: error: 30 workers need about \d+ open files here, but the "
                     r"limit is 64 \(ulimit -n", r.stderr), r.stderr
    assert os.listdir(mark) == []
    r = ddprun("--nproc-per-node", "2", "sh", "-c", f'touch "{mark}/$RANK"', preexec_fn=limit)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(mark)) == ["0", "1"]
