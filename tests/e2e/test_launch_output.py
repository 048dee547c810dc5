"""Output: live (incomplete lines shown before their newline), yet no
console line mixes two workers' bytes; prefixes only where lines start;
torchrun's -r/--redirects, -t/--tee and --log-dir layout with byte-exact
files; --local-ranks-filter; --tag-output; and --max-restarts with one
attempt directory per try."""
import array
import fcntl
import glob
import os
import platform
import re
import select
import signal
import socket
import subprocess
import termios
import time

import pytest

from conftest import PYTHON, binary, pid_alive, prog, run, wait_for


def ddprun(*args, **kw):
    return run([binary("ddprun"), *args], **kw)


def check_lines(text, nproc, lines, length, breaks=False):
    """Every console line is one worker's bytes; every worker's lines are
    all there, whole and in order. breaks: a line may have been ended early
    (output.h: its worker went quiet while another waited), its rest then
    comes on later console lines of letters only (rank r writes letter
    'a' + r, so the letter says whose rest it is)."""
    records = {r: [] for r in range(nproc)}
    for line in text.splitlines():
        m = re.fullmatch(r"(\d+):(\d+):([a-z]*)", line)
        if m:
            rank, i, body = int(m.group(1)), int(m.group(2)), m.group(3)
            assert rank in records, f"no such rank: {line[:120]!r}"
            records[rank].append([i, len(line)])
        else:
            m = re.fullmatch(r"([a-z])\1*", line) if breaks else None
            assert m, f"mixed or broken line: {line[:120]!r}"
            rank, body = ord(m.group(1)) - ord("a"), line
            assert rank in records and records[rank], f"rest of no line: {line[:120]!r}"
            records[rank][-1][1] += len(line)
        assert body == chr(ord("a") + rank) * len(body), f"mixed line from rank {rank}"
    for r in range(nproc):
        assert [i for i, _ in records[r]] == list(range(lines)), \
            f"rank {r} lines missing or out of order"
        for i, n in records[r]:
            assert n == max(length, len(f"{r}:{i}:")), f"rank {r} line {i}: {n} bytes"


def unread(pipe):
    """How many bytes wait in pipe (a reader's file object) that nobody has read."""
    buf = array.array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, buf)
    return buf[0]


def test_four_workers_printing_long_lines_fast_never_interleave():
    # 4 x 300 lines of 20 KB, each written in three pieces, on stdout and
    # stderr. A worker descheduled between its pieces for longer than the
    # hold lets a waiting one end its line early (by design, output.h; seen
    # once in a loaded CI run: a line cut at 14,099 bytes): what may never
    # happen is two workers' bytes on one line, or bytes lost or reordered.
    r = ddprun("--nproc-per-node", "4", "sh", "-c",
               f"{prog('launch_spew')} 300 20000 & {prog('launch_spew')} 300 20000 stderr; wait",
               timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    check_lines(r.stdout, 4, 300, 20000, breaks=True)
    check_lines(r.stderr, 4, 300, 20000, breaks=True)


def test_last_line_without_newline_is_kept_on_its_own_line():
    r = ddprun("--nproc-per-node", "2", "sh", "-c", 'printf "rank$RANK-no-newline"')
    assert r.returncode == 0
    assert sorted(r.stdout.splitlines()) == ["rank0-no-newline", "rank1-no-newline"]
    assert r.stdout.endswith("\n")


def test_tag_output_prefixes_each_console_line_with_the_rank():
    r = ddprun("--nproc-per-node", "3", "--tag-output", "sh", "-c",
               'echo "out $RANK"; echo "err $RANK" >&2')
    assert r.returncode == 0
    assert sorted(r.stdout.splitlines()) == [f"[rank{i}]: out {i}" for i in range(3)]
    assert sorted(r.stderr.splitlines()) == [f"[rank{i}]: err {i}" for i in range(3)]


def test_local_ranks_filter_shows_only_those_ranks():
    r = ddprun("--nproc-per-node", "4", "--local-ranks-filter", "1,3", "sh", "-c",
               'echo "out $RANK"; echo "err $RANK" >&2')
    assert r.returncode == 0
    assert sorted(r.stdout.splitlines()) == ["out 1", "out 3"]
    assert sorted(r.stderr.splitlines()) == ["err 1", "err 3"]


@pytest.mark.parametrize("ranks", ["1, 3", " 1 ,+3 ", "01,3_0,3"])
def test_local_ranks_filter_reads_each_rank_as_pythons_int(ranks):
    """torchrun: set(map(int, s.split(","))); "0, 1" was a usage error."""
    r = ddprun("--nproc-per-node", "4", "--local-ranks-filter", ranks, "sh", "-c",
               'echo "out $RANK"')
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["out 1", "out 3"]


@pytest.mark.parametrize("ranks", ["1,,3", "1, ", "1 3", "0x1", "1.0"])
def test_local_ranks_filter_that_int_refuses_is_a_usage_error(ranks):
    r = ddprun("--local-ranks-filter", ranks, "/bin/true")
    assert r.returncode == 2
    assert r.stderr == (f"ddprun: error: invalid value '{ranks}' for --local-ranks-filter: "
                        "expected a comma-separated list of local ranks from 0 to 4095 "
                        "(see ddprun --help)\n")


def test_local_ranks_filter_warns_about_a_rank_this_node_does_not_have():
    r = ddprun("--nproc-per-node", "2", "--local-ranks-filter", "1,5", "sh", "-c",
               'echo "out $RANK"')
    assert r.returncode == 0
    assert r.stdout.splitlines() == ["out 1"]
    (warning,) = r.stderr.splitlines()
    assert warning.startswith("ddprun: warning: --local-ranks-filter: local rank 5 ")


@pytest.mark.parametrize("flag", ["--redirects", "--tee"])
def test_a_redirect_map_warns_about_a_rank_this_node_does_not_have(tmp_path, flag):
    """As --local-ranks-filter does; '5:3' with 2 workers wrote nothing, silently."""
    r = ddprun("--nproc-per-node", "2", "--log-dir", str(tmp_path), flag, "1:1,5:3,6:0",
               "sh", "-c", 'echo "out $RANK"')
    assert r.returncode == 0
    (warning,) = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert warning == (f"ddprun: warning: {flag}: local rank 5 does not exist on this node "
                       "(2 workers): no file is written for it")


@pytest.mark.parametrize("maps, logs", [
    (["-r", "5:3", "-t", "4:1"], None),  # only local ranks this node does not run
    (["-r", "0:0,1:0"], None),  # every rank of this node to none
    (["-r", "5:3,1:1"], "1/stdout.log"),
    (["-t", "0:2"], "0/stderr.log"),
], ids=["other-ranks-only", "none-for-every-rank", "one-of-this-nodes", "tee-one"])
def test_logs_are_named_only_when_this_node_writes_some(tmp_path, maps, logs):
    """-r/-t without --log-dir: 'logs are in DIR' names the kept temporary
    directory when a local rank of this node writes a log there; a map of
    other ranks only said it of an empty tree, and left that behind."""
    r = ddprun("--nproc-per-node", "2", *maps, "sh", "-c",
               'echo "out $RANK"; echo "err $RANK" >&2')
    assert r.returncode == 0, r.stderr
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("ddprun: logs are in ")]
    kept = os.listdir(tmp_path / "tmpdir")
    if logs is None:
        assert said == [] and kept == [], (r.stderr, kept)
        return
    assert len(said) == 1, r.stderr
    d = said[0][len("ddprun: logs are in "):]
    assert d.startswith(str(tmp_path / "tmpdir")), d
    assert os.path.isfile(os.path.join(d, "attempt_0", logs)), d


def run_dir(logdir, run_id="*"):
    dirs = glob.glob(os.path.join(logdir, f"{run_id}_*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


TTY_PROBE = ('import os, sys; print("rank", os.environ["RANK"], sys.stdout.isatty(), '
             'sys.stderr.isatty(), flush=True); print("to err", file=sys.stderr)')


def run_on_a_terminal(args, timeout=60):
    """ddprun ARGS with a pseudo-terminal as its stdin, stdout and stderr
    (raw: its bytes unchanged); (status, what it wrote)."""
    import pty
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n" on the way out
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    p = subprocess.Popen([binary("ddprun"), *args], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout=timeout), out.decode()


def test_workers_output_is_a_pipe_even_on_a_terminal(tmp_path):
    """ddprun(1), DIFFERENCES FROM TORCHRUN: on a terminal too, a worker's
    output is a pipe (a pager started there would wait for keys nothing can
    send: git log in a worker hung for ever when it was a pseudo-terminal);
    a worker's last lines before it exits are all there."""
    script = tmp_path / "probe.py"
    script.write_text(TTY_PROBE + "\nimport sys\nsys.stdout.write(''.join("
                      "f'line {i:05d} ' + 'x' * 60 + '\\n' for i in range(2000)))\n"
                      "print('last line', flush=True)\n")
    rc, out = run_on_a_terminal(["--nproc-per-node", "2", str(script)])
    assert rc == 0, out
    assert sorted(line for line in out.splitlines() if line.startswith("rank")) == [
        "rank 0 False False", "rank 1 False False"], out
    assert out.count("to err\n") == 2 and out.count("last line\n") == 2, out[-2000:]
    assert out.count("\nline 01999 ") == 2, out[-2000:]


@pytest.mark.parametrize("how", ["libddp", "wrapped-python"])
def test_a_workers_lines_reach_the_console_as_printed_not_at_its_exit(reaper, how):
    """A C program on libddp that printf()s a line and then works for a
    minute, or a Python program that a shell script starts (ddprun gives
    -u only to the Python programs it starts itself): through the pipe
    their stdio was fully buffered, so the line came 4 KiB later or at the
    exit (on a terminal, as under torchrun, it is line-buffered). Now libddp
    line-buffers a stdout that is a pipe, and the workers get
    PYTHONUNBUFFERED=1 (unless it is set: it is removed here, as this
    machine exports it)."""
    if how == "libddp":
        cmd = [prog("ddp_hello"), "linger", "120"]
    else:
        cmd = ["--no-python", "/bin/sh", "-c",
               f"{PYTHON} -c \"import time; print('lingering 0'); time.sleep(120)\"; true"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "1", *cmd], env=env,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    got = b""
    deadline = time.monotonic() + 60  # the worker prints at once, then sleeps 120 s
    while b"lingering 0\n" not in got and time.monotonic() < deadline:
        if select.select([p.stdout], [], [], 1)[0]:
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            got += chunk
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert b"lingering 0\n" in got, got


@pytest.mark.parametrize("args,want", [((), "1"), (("full",), "0"), (("-r", "1"), "0")],
                         ids=["pipe", "set-by-the-program", "file"])
def test_ddp_init_line_buffers_only_a_pipe_stdio_has_not_set_up(tmp_path, args, want):
    """A stdout pipe that the program has not set up becomes line-buffered
    in ddp_init; a mode the program chose itself stays (it forced line
    buffering on a program that had asked for 64 KiB blocks: ten times
    slower printing), and so does a file's (-r) full buffering."""
    # (-r 1: stdout to a file, stderr, where it says, still to the console)
    redirect = ["--log-dir", str(tmp_path), *args] if "-r" in args else []
    prog_args = [] if "-r" in args else list(args)
    r = run([binary("ddprun"), "--nproc-per-node", "2", *redirect, prog("ddp_hello"),
             "bufmode", *prog_args], timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.findall(r"^linebuf 0 (\d)$", r.stderr, re.M) == [want], r.stderr


@pytest.mark.parametrize("restarts", ["0", "2"])
def test_a_reader_that_goes_away_ends_the_job_as_it_would_without_ddprun(reaper, restarts):
    """`ddprun ... | head -1`: the workers wrote on, ddprun read and dropped
    their output, and the pipeline never ended (the job ran to its end, 0).
    Now, as under torchrun (whose workers write to that pipe themselves),
    their next write fails: SIGPIPE ends them, ddprun exits 141 and says
    why. So do a restart's workers (they got the dead console, dropped,
    and ran on)."""
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "--max-restarts", restarts,
                      "--no-python", "yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"y\n"
    p.stdout.close()  # head -1 is done
    assert p.wait(timeout=60) == 128 + signal.SIGPIPE
    err = p.stderr.read().decode()
    assert "exitcode  : -13" in err, err
    assert "cause     : the reader of ddprun's output went away" in err, err


def test_a_reader_that_goes_away_leaves_a_teed_stream_going_into_its_file(reaper, tmp_path):
    """With --tee the worker's output also goes to its file: that goes on,
    whole, once the console's reader is gone, and the job ends as it
    would have."""
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "1", "--tee", "1", "--log-dir",
                      str(tmp_path), "--no-python", "sh", "-c",
                      "echo first; sleep 1; for i in $(seq 2 20000); do echo line $i; done"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"[default0]:first\n"
    p.stdout.close()
    assert p.wait(timeout=60) == 0, p.stderr.read()
    (log,) = glob.glob(str(tmp_path / "*" / "attempt_0" / "0" / "stdout.log"))
    with open(log) as f:
        lines = f.read().splitlines()
    assert lines[0] == "first" and lines[-1] == "line 20000" and len(lines) == 20000


def test_redirects_write_torchrun_layout_and_keep_console_clean(tmp_path):
    r = ddprun("--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"), "-r", "3",
               "sh", "-c", 'echo "out $RANK"; echo "err $RANK" >&2')
    assert r.returncode == 0
    assert r.stdout == "" and r.stderr == ""
    d = run_dir(tmp_path / "logs")
    for lr in range(2):
        assert open(f"{d}/attempt_0/{lr}/stdout.log").read() == f"out {lr}\n"
        assert open(f"{d}/attempt_0/{lr}/stderr.log").read() == f"err {lr}\n"


def test_per_rank_redirect_map(tmp_path):
    r = ddprun("--nproc-per-node", "2", "--log-dir", str(tmp_path), "--redirects", "0:1,1:2",
               "--rdzv-id", "job", "sh", "-c", 'echo "out $RANK"; echo "err $RANK" >&2')
    assert r.returncode == 0
    d = run_dir(tmp_path, "job")
    assert os.listdir(f"{d}/attempt_0/0") == ["stdout.log"]
    assert os.listdir(f"{d}/attempt_0/1") == ["stderr.log"]
    assert r.stdout == "out 1\n" and r.stderr == "err 0\n"


def test_tee_writes_files_and_prefixed_console_lines(tmp_path):
    r = ddprun("--nproc-per-node", "2", "--log-dir", str(tmp_path), "-t", "3", "--role",
               "trainer", "sh", "-c", 'echo "out $RANK"; echo "err $RANK" >&2')
    assert r.returncode == 0
    d = run_dir(tmp_path)
    for lr in range(2):
        assert open(f"{d}/attempt_0/{lr}/stdout.log").read() == f"out {lr}\n"
        assert open(f"{d}/attempt_0/{lr}/stderr.log").read() == f"err {lr}\n"
    assert sorted(r.stdout.splitlines()) == ["[trainer0]:out 0", "[trainer1]:out 1"]
    assert sorted(r.stderr.splitlines()) == ["[trainer0]:err 0", "[trainer1]:err 1"]


def test_tee_prefix_template_and_filter_only_affect_the_console(tmp_path):
    # "$$" is "$", as string.Template has it (it stayed "$$")
    env = dict(os.environ, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="<${role_name}:${rank}$$> ")
    r = ddprun("--nproc-per-node", "2", "--log-dir", str(tmp_path), "--tee", "1",
               "--local-ranks-filter", "0", "sh", "-c", 'echo "out $RANK"', env=env)
    assert r.returncode == 0
    assert r.stdout == "<default:0$> out 0\n"
    d = run_dir(tmp_path)
    assert open(f"{d}/attempt_0/1/stdout.log").read() == "out 1\n"


def test_the_prefix_template_hostname_is_gethostnames_name():
    """ddprun(1) called ${hostname} the short host name; it is gethostname()'s,
    whole."""
    env = dict(os.environ, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="${hostname}|")
    r = ddprun("--tee", "1", "sh", "-c", "echo out", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{socket.gethostname()}|out\n"


def test_restarts_count_up_and_use_a_new_attempt_directory(tmp_path):
    # Fails on the first two attempts, succeeds on the third.
    script = ('echo "attempt $TORCHELASTIC_RESTART_COUNT"; '
              '[ "$TORCHELASTIC_RESTART_COUNT" -ge 2 ] || exit 3')
    r = ddprun("--nproc-per-node", "2", "--max-restarts", "3", "--log-dir", str(tmp_path),
               "-t", "1", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    assert "restart 1 of 3" in r.stderr and "restart 2 of 3" in r.stderr
    assert "FAILED" not in r.stderr
    d = run_dir(tmp_path)
    assert sorted(os.listdir(d)) == ["attempt_0", "attempt_1", "attempt_2"]
    for n in range(3):
        logs = [open(f"{d}/attempt_{n}/{lr}/stdout.log").read() for lr in range(2)]
        if n == 2:
            assert logs == ["attempt 2\n"] * 2
        else:  # the first failure may stop its sibling before it prints
            assert f"attempt {n}\n" in logs and set(logs) <= {"", f"attempt {n}\n"}


def test_restarts_exhausted_fail_with_the_last_attempts_report(tmp_path):
    r = ddprun("--nproc-per-node", "2", "--max-restarts", "2", "--log-dir", str(tmp_path),
               "sh", "-c", '[ "$RANK" = 1 ] && exit 6; sleep 30', timeout=60)
    assert r.returncode == 6
    assert r.stderr.count("FAILED") == 1
    assert "restart 2 of 2" in r.stderr and "restart 3" not in r.stderr
    assert re.search(r"error_file: <N/A>", r.stderr)
    assert sorted(os.listdir(run_dir(tmp_path))) == ["attempt_0", "attempt_1", "attempt_2"]


def test_log_dir_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "afile"
    f.write_text("")
    r = ddprun("--log-dir", str(f), "/bin/true")
    assert r.returncode == 1
    assert r.stderr.startswith("ddprun: error: cannot create log directory")


def test_a_stalled_reader_does_not_stall_signals_or_fail_fast(reaper, tmp_path):
    # Nobody reads ddprun's stdout while two workers print 100 MB each: ddprun
    # must still react to SIGTERM (stop the workers); what it holds for the
    # console is written once the reader comes back.
    spew = prog("launch_spew")
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "sh", "-c",
                      f"echo $$ > {tmp_path}/pid.$RANK; exec {spew} 100000 1000"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    wait_for(lambda: all((tmp_path / f"pid.{r}").exists() for r in range(2)), timeout=20,
             what="workers started")
    wait_for(lambda: all((tmp_path / f"pid.{r}").read_text().strip() for r in range(2)),
             timeout=5, what="pids written")
    pids = [int((tmp_path / f"pid.{r}").read_text()) for r in range(2)]

    # The pipe to the test is (nearly) full: ddprun's writes would block now.
    wait_for(lambda: unread(p.stdout) >= 32768, timeout=20, what="ddprun's stdout pipe to fill")
    p.send_signal(signal.SIGTERM)
    for x in pids:
        wait_for(lambda: not pid_alive(x), timeout=20, what=f"worker {x} stopped")
    out = p.stdout.read()  # the reader is back
    assert p.wait(timeout=30) == 128 + signal.SIGTERM
    assert len(out) > 0
    for line in out.decode().splitlines():
        # A worker killed mid-line leaves its last line short, never mixed.
        m = re.fullmatch(r"([01]):\d+:([ab]*)", line)
        assert m and set(m.group(2)) <= {"ab"[int(m.group(1))]}, line[:80]


def blocked_in_the_last_write(pid):
    """pid waits in poll() on one fd without a timeout (x86-64: syscall 7),
    as ddprun's last write of the output it holds does for its reader (its
    event loop waits in epoll_wait)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            call = f.read().split()
    except OSError:
        return False
    return len(call) > 3 and call[0] == "7" and call[2] == "0x1" and call[3] == "0xffffffff"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="reads x86-64 syscall numbers")
def test_a_stop_signal_ends_the_last_write_to_a_reader_that_never_reads(reaper, tmp_path):
    """The job is over (rank 0 exited 3) and ddprun writes out what it holds
    for stdout, which nobody reads: SIGTERM ends that at once, with the
    job's status. Since the signals were ignored once the status was
    decided (so that Slurm's repeat of its SIGTERM did not end ddprun with
    the signal), nothing but SIGKILL ended it."""
    spew = prog("launch_spew")
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "1", "sh", "-c",
                      f"{spew} 300 1000; exit 3"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    read_until(p, b"exitcode  : 3", stream=p.stderr)  # the failure report
    wait_for(lambda: blocked_in_the_last_write(p.pid), timeout=30,
             what="ddprun's last write to its unread stdout")
    p.send_signal(signal.SIGTERM)
    try:
        assert p.wait(timeout=20) == 3
    finally:
        p.stdout.close()


def test_stderr_and_the_failure_report_do_not_wait_for_an_unread_stdout(reaper, tmp_path):
    # stdout and stderr are different pipes, and nobody reads stdout: rank
    # 0's error line and ddprun's failure report still reach stderr while
    # its stdout output waits; then all of that arrives too, and the exit
    # status is the worker's.
    spew = prog("launch_spew")
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "sh", "-c",
                      f'if [ "$RANK" = 0 ]; then {spew} 300 1000; echo marker-$RANK >&2; '
                      'exit 3; else sleep 60; fi'],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = read_until(p, b"exitcode  : 3", stream=p.stderr)  # the failure report
    assert unread(p.stdout) >= 32768, "stdout was meant to be full while the report came"
    assert b"marker-0" in err
    out, rest = p.communicate(timeout=30)
    assert p.returncode == 3, err + rest
    check_lines(out.decode(), 1, 300, 1000)


def test_a_socket_nobody_reads_holds_back_neither_failures_nor_the_report(reaper, tmp_path):
    """ddprun's stdout a socket (journald's for a service, a harness's
    socketpair) that nobody reads: it stayed a blocking write in the event
    loop, which froze there: a worker's failure was never seen (a zombie),
    no report came, and a SIGTERM waited for the reader. It is written with
    RWF_NOWAIT now; the rest waits for the reader, as on a pipe, and all of
    it arrives once it reads."""
    spew = prog("launch_spew")
    ours, theirs = socket.socketpair()
    with ours:
        with theirs:
            p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "sh", "-c",
                              f'if [ "$RANK" = 0 ]; then {spew} 3000 1000; echo marker-$RANK >&2; '
                              'exit 3; else sleep 60; fi'],
                             stdout=theirs.fileno(), stderr=subprocess.PIPE)
        err = read_until(p, b"exitcode  : 3", stream=p.stderr)  # the failure report
        assert b"marker-0" in err
        # Every line spewed comes once the socket is read, and ddprun ends.
        out = b""
        while True:
            chunk = ours.recv(1 << 20)
            if not chunk:
                break
            out += chunk
        os.set_blocking(p.stderr.fileno(), True)
        rest = p.stderr.read()
        assert p.wait(timeout=30) == 3, err + rest
    check_lines(out.decode(), 1, 3000, 1000)


def test_a_console_or_log_file_that_cannot_be_written_is_said(tmp_path):
    """A full disk under stdout, or a tee'd file past its size limit, lost
    the output without a word (exit 0 either way; torchrun's workers failed
    on their own writes there). One warning each now, naming the file."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    say = ["--nproc-per-node", "2", "sh", "-c", "for i in 1 2 3; do echo line$i; done"]
    with open("/dev/full", "w") as full:
        r = subprocess.run([binary("ddprun"), *say], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    assert r.returncode == 0, r
    assert r.stderr == ("ddprun: warning: cannot write to standard output: No space left on "
                        "device (the workers' output there is dropped from now on)\n"), r.stderr

    # Under a file size limit (ulimit -f) ddprun itself died of SIGXFSZ,
    # without a word, on either kind of file; its workers still get the
    # signal's default (their SigIgn shows neither it nor SIGPIPE).
    def small_files():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
    out = tmp_path / "out"
    with open(out, "w") as f:
        r = subprocess.run([binary("ddprun"), "--nproc-per-node", "2", "sh", "-c",
                            "grep SigIgn /proc/self/status >&2; head -c 20000 /dev/zero"],
                           stdout=f, stderr=subprocess.PIPE, text=True, timeout=60,
                           preexec_fn=small_files)
    assert r.returncode == 0, r
    assert os.path.getsize(out) == 8192
    ign = [int(v, 16) for v in re.findall(r"^SigIgn:\s*([0-9a-f]+)$", r.stderr, re.M)]
    assert len(ign) == 2 and not any(v & (1 << (signal.SIGXFSZ - 1) | 1 << (signal.SIGPIPE - 1))
                                     for v in ign), r.stderr
    assert r.stderr.count("ddprun: warning: cannot write to standard output: File too large "
                          "(the workers' output there is dropped from now on)\n") == 1, r.stderr
    logs = tmp_path / "logs"
    r = subprocess.run([binary("ddprun"), "--log-dir", str(logs), "-t", "1", "sh", "-c",
                        "head -c 20000 /dev/zero | tr '\\0' x"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=60, preexec_fn=small_files)
    assert r.returncode == 0, r
    (log,) = glob.glob(f"{logs}/*/attempt_0/0/stdout.log")
    assert os.path.getsize(log) == 8192
    assert r.stderr == (f"ddprun: warning: cannot write {log}: File too large (the rest of "
                        "this stream is not written there)\n"), r.stderr


def test_a_backed_up_stdout_pauses_only_the_streams_it_shows(reaper, tmp_path):
    # Rank 0 prints 20 MB that nobody reads: ddprun stops reading the
    # workers' stdout pipes once it holds 8 MiB of it, but not their stderr
    # pipes: rank 1's line on stderr, written seconds later, arrives.
    spew = prog("launch_spew")
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "sh", "-c",
                      f'if [ "$RANK" = 0 ]; then exec {spew} 20000 1000; fi; '
                      'sleep 3; echo marker-$RANK >&2'],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = read_until(p, b"marker-1", stream=p.stderr)
    assert unread(p.stdout) >= 32768, "stdout was meant to be backed up while rank 1 wrote"
    out, rest = p.communicate(timeout=60)
    assert p.returncode == 0, err + rest
    check_lines(out.decode(), 1, 20000, 1000)


# A thread of the program prints while its main thread waits for it.
THREAD_PRINTS = r"""
import os, threading
def spew():
    r = int(os.environ["RANK"])
    for i in range(10000):
        os.write(1, f"{r}:{i}:".encode().ljust(1000, bytes([97 + r])) + b"\n")
t = threading.Thread(target=spew)
t.start()
t.join()
"""


@pytest.mark.parametrize("writer", ["main", "thread"])
def test_a_backed_up_console_is_no_hang(reaper, writer):
    """A reader that stops (a pager not scrolled, Ctrl-S) pauses the workers
    on their own writes: --hang-timeout took that for a hang of the job,
    SIGABRTed its ranks and exited 124 (found by a user's review); then
    still where a thread of the rank wrote, not its main thread (found by
    a review)."""
    cmd = [prog("launch_spew"), "10000", "1000"] if writer == "main" else \
        [PYTHON, "-c", THREAD_PRINTS]
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "--hang-timeout", "1", *cmd],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: unread(p.stdout) > 0, timeout=30, what="stdout backed up")
    # Not a timing assertion: the reader stays away past the hang timeout.
    time.sleep(3)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert b"hung" not in err, err
    check_lines(out.decode(), 2, 10000, 1000)


STALLS_PAST_THE_QUEUE = r"""
import fcntl, os, time
if os.environ["RANK"] == "0":
    fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)  # its write completes
    os.write(1, b"x" * (8 * 1024 * 1024 + 160 * 1024) + b"\n")
time.sleep(1000)
"""


def test_a_hung_job_behind_a_backed_up_console_is_still_hung(reaper):
    """Rank 0 printed past the console's queue (ddprun paused the console)
    and then, like rank 1, hung in a sleep, no write of it waiting: that the
    console was paused made every rank count as working, and the hang was
    never found (found by a review). Only a rank that waits on its write is
    not hung."""
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "--hang-timeout", "1",
                      PYTHON, "-c", STALLS_PAST_THE_QUEUE],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = read_until(p, b"the job hung", stream=p.stderr)
    out, rest = p.communicate(timeout=60)
    assert p.returncode == 124, err + rest
    assert len(out) == 8 * 1024 * 1024 + 160 * 1024 + 1


# Rank 0 writes one line longer than ddprun queues for a console nobody
# reads (CONSOLE_HIGH, 8 MiB, output_console.c, plus the two pipes' 64 KiB):
# ddprun pauses the console with that line open, its end waiting in rank 0's
# pipe (made 1 MiB, so that rank 0's write completes). Rank 1 writes its line
# only then, on the test's word: it waits unread in its pipe too. Both live
# on until the test has read their lines: a worker's exit would drain its
# pipe, not the resume.
PAUSED_LINE = 8 * 1024 * 1024 + 512 * 1024
PAUSE_WORKER = r"""
import fcntl, os, sys, time
def put(fd, b):
    while b:
        b = b[os.write(fd, b):]
def wait(name):
    for _ in range(1500):
        if os.path.exists(os.environ[name]):
            break
        time.sleep(0.02)
if os.environ["RANK"] == "0":
    fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)
    put(1, b"0:0:" + b"a" * int(sys.argv[1]) + b"\n")
    put(2, b"rank0 wrote\n")
else:
    wait("GO")
    put(1, b"1:0:" + b"b" * 1000 + b"\n")
    put(2, b"rank1 wrote\n")
wait("END")
"""


def test_a_paused_console_breaks_no_line_when_it_resumes(reaper, tmp_path):
    """When the reader comes back, rank 1's line waits for rank 0's open
    line to end, the pause being neither rank 0's silence (it could not
    write) nor rank 1's wait. The real pause and resume, end to end. At the
    resume rank 0's pipe still holds its line's end, which is enough not to
    take rank 0 for silent (test_unread_bytes_are_not_silence); the unit
    test test_paused_console_breaks_no_line holds the loop's clock and is the
    one that catches a deadline counting the pause. The old version of this
    test had two workers print 15 MB each in pieces: a worker descheduled
    200 ms between two pieces of a line may have its line ended (output.h),
    so it failed now and then under load; here no worker is ever silent in
    mid-line."""
    go, end = tmp_path / "go", tmp_path / "end"
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", PYTHON, "-c", PAUSE_WORKER,
                      str(PAUSED_LINE)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     env=dict(os.environ, GO=str(go), END=str(end)))
    err = read_until(p, b"rank0 wrote", stream=p.stderr)
    assert unread(p.stdout) > 0, "stdout was meant to be backed up"
    go.touch()
    err += read_until(p, b"rank1 wrote", stream=p.stderr)
    # Not a timing assertion: the pause outlasts OUTPUT_HOLD_IDLE_MS and
    # OUTPUT_HOLD_MAX_MS.
    time.sleep(1.2)
    want = b"0:0:" + b"a" * PAUSED_LINE + b"\n1:0:" + b"b" * 1000 + b"\n"
    out = p.stdout.read(len(want))  # the workers still run
    end.touch()
    out += p.stdout.read()
    err += p.stderr.read()
    assert p.wait(timeout=60) == 0, err
    assert out == want, [line[:40] for line in out.split(b"\n")]


# --- Live output: bytes before their newline, prefix only at line starts ---

# A worker that writes $1, waits (bounded) for the file $GO to appear, then
# writes $2: what the test sees before it creates the file was passed
# through before the line's end.
WAIT_GO = ('printf "$1"; i=0; while [ ! -e "$GO" ] && [ $i -lt 1500 ]; do sleep 0.02; '
           'i=$((i+1)); done; printf "$2"')


def read_until(p, want, timeout=30, stream=None):
    """Read p.stdout (or stream, raw) until it holds want; return what was read."""
    got = b""
    fd = (stream or p.stdout).fileno()
    os.set_blocking(fd, False)

    def more():
        nonlocal got
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return want in got
        got += chunk
        return want in got or chunk == b""
    wait_for(more, timeout=timeout, what=f"{want!r} from ddprun")
    assert want in got, got
    os.set_blocking(fd, True)
    return got


def live(reaper, tmp_path, args, first, second):
    go = tmp_path / "go"
    env = dict(os.environ, GO=str(go))
    p = reaper.popen([binary("ddprun"), *args, "sh", "-c", WAIT_GO, "sh", first, second],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return p, go


def test_progress_update_reaches_the_console_before_its_newline(reaper, tmp_path):
    p, go = live(reaper, tmp_path, ["--nproc-per-node", "1"], r"\rstep 1", r"\rstep 2\n")
    early = read_until(p, b"step 1")
    assert not go.exists()  # seen while the worker still waits mid-line
    go.touch()
    out = early + p.stdout.read()
    assert p.wait(timeout=30) == 0
    assert out == b"\rstep 1\rstep 2\n"


def test_tag_output_prefix_only_where_a_line_starts(reaper, tmp_path):
    p, go = live(reaper, tmp_path, ["--nproc-per-node", "1", "--tag-output"],
                 "abc", r"def\nghi\n\rbar 1\rbar 2\n")
    early = read_until(p, b"abc")
    go.touch()
    out = early + p.stdout.read()
    assert p.wait(timeout=30) == 0
    # "def" continues the line "abc" started: no second prefix; a redrawn
    # bar ("\r") keeps its prefix.
    assert out == (b"[rank0]: abcdef\n[rank0]: ghi\n"
                   b"\r[rank0]: bar 1\r[rank0]: bar 2\n")


def test_prompt_without_newline_is_shown_and_tee_file_is_exact(reaper, tmp_path):
    logs = tmp_path / "logs"
    p, go = live(reaper, tmp_path, ["--nproc-per-node", "1", "--log-dir", str(logs), "-t", "3"],
                 "Continue? [y/n] ", r"y\n\r 50%%\r100%%\n\000end")
    early = read_until(p, b"Continue? [y/n] ")
    go.touch()
    out = early + p.stdout.read()
    assert p.wait(timeout=30) == 0
    assert out == (b"[default0]:Continue? [y/n] y\n\r[default0]: 50%\r[default0]:100%\n"
                   b"[default0]:\0end\n")
    d = run_dir(logs)
    # The file gets the bytes exactly: no prefix, no added newline.
    assert open(f"{d}/attempt_0/0/stdout.log", "rb").read() == \
        b"Continue? [y/n] y\n\r 50%\r100%\n\0end"


def test_redirected_log_files_are_byte_exact(tmp_path):
    data = r"a\rb\r\nno newline here"
    r = ddprun("--nproc-per-node", "2", "--log-dir", str(tmp_path), "-r", "3", "sh", "-c",
               f'printf "{data}"; printf "{data}" >&2')
    assert r.returncode == 0
    d = run_dir(tmp_path)
    for lr in range(2):
        for f in ("stdout.log", "stderr.log"):
            assert open(f"{d}/attempt_0/{lr}/{f}", "rb").read() == \
                b"a\rb\r\nno newline here"


def test_lines_written_in_slow_pieces_are_never_mixed_between_workers():
    # Three workers write 20 lines each in pieces with pauses between them, so
    # that incomplete lines are shown while the others have lines to write.
    # Every console line holds one worker's bytes only, and each worker's
    # bytes arrive complete and in order (a line may be ended early on the
    # console while another's output waits: then it continues on the next).
    script = ('c=$(printf "\\\\$(printf %03o $((97 + RANK)))"); i=0; '
              'while [ $i -lt 20 ]; do printf "$c$c$c"; sleep 0.03; printf "$c$c$c$c"; '
              'sleep 0.07; printf "$c$c\\n"; i=$((i+1)); done')
    r = ddprun("--nproc-per-node", "3", "--tag-output", "sh", "-c", script, timeout=120)
    assert r.returncode == 0, r.stderr
    got = {0: "", 1: "", 2: ""}
    for line in r.stdout.split("\n")[:-1]:
        m = re.fullmatch(r"\[rank(\d)\]: ([a-c]*)", line)
        assert m, f"mixed or broken line: {line!r}"
        rank = int(m.group(1))
        assert set(m.group(2)) <= {"abc"[rank]}, f"another worker's bytes in {line!r}"
        got[rank] += m.group(2)
    for rank in range(3):
        assert got[rank] == "abc"[rank] * 9 * 20


def test_an_open_line_is_ended_early_for_another_workers_line(reaper, tmp_path):
    # Rank 0 opens a line ("a prompt") and waits; rank 1 then writes a line:
    # it is shown while rank 0's line is still open, on a line of its own
    # (rank 0's console line ended early), and rank 0's rest follows on a
    # new line with its prefix.
    script = ('w() { i=0; while [ ! -e "$1" ] && [ $i -lt 1500 ]; do sleep 0.02; '
              'i=$((i+1)); done; }; '
              'if [ "$RANK" = 0 ]; then printf "open"; w "$GO"; printf " rest\\n"; '
              'else w "$GO1"; echo "from b"; fi')
    env = dict(os.environ, GO=str(tmp_path / "go"), GO1=str(tmp_path / "go1"))
    p = reaper.popen([binary("ddprun"), "--nproc-per-node", "2", "--tag-output", "sh", "-c",
                      script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    early = read_until(p, b"[rank0]: open")
    (tmp_path / "go1").touch()
    early += read_until(p, b"from b\n")
    assert not (tmp_path / "go").exists()
    (tmp_path / "go").touch()
    out = early + p.stdout.read()
    assert p.wait(timeout=30) == 0
    assert out == b"[rank0]: open\n[rank1]: from b\n[rank0]:  rest\n"
