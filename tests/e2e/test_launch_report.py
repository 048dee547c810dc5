"""Failure reports that show the cause: every failed rank's last stderr
lines (whatever the console filters and redirects do), the path of its log
file, the likely cause of an exit 127/126, the interpreter of a Python
worker, no PyTorch advice for a worker that is not Python, and all of it in
node 0's report for a failure on another node."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import binary, proc_state, run, wait_for
from mnutil import RECORD, all_recorded, static_job

URL = "https://pytorch.org/docs/stable/elastic/errors.html"


def ddprun(*args, **kw):
    return run([binary("ddprun"), *args], **kw)


def root_cause(stderr):
    assert "Root Cause (first observed failure):" in stderr, stderr
    return stderr.split("Root Cause (first observed failure):", 1)[1]


FAIL_RANK1 = ('if [ "$RANK" = 1 ]; then echo "loading shard" >&2; '
              'echo "fatal: cannot open /data/shard-1" >&2; exit 3; fi; sleep 0.2')


def test_a_filtered_ranks_stderr_is_in_the_summary():
    r = ddprun("--nproc-per-node", "2", "--local-ranks-filter", "0", "sh", "-c", FAIL_RANK1)
    assert r.returncode == 3
    # Not on the console as it was written (rank 1 is filtered out) ...
    assert "loading shard" not in r.stderr.split("FAILED", 1)[0]
    # ... but under its failure, with no PyTorch advice for a shell worker.
    root = root_cause(r.stderr)
    assert "rank      : 1 (local_rank: 1)" in root
    assert "  stderr    : last 2 lines:\n    loading shard\n" \
        "    fatal: cannot open /data/shard-1\n" in root
    assert URL not in r.stderr
    assert "traceback : <N/A> (no error file)" in root


def test_a_redirected_ranks_stderr_is_in_the_summary_with_its_log_file(tmp_path):
    r = ddprun("--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"), "-r", "3",
               "sh", "-c", FAIL_RANK1)
    assert r.returncode == 3
    root = root_cause(r.stderr)
    log = [p for p in (tmp_path / "logs").glob("*/attempt_0/1/stderr.log")]
    assert len(log) == 1
    assert f"  stderr    : last 2 lines (whole log: {log[0]}):\n" in root
    assert "    fatal: cannot open /data/shard-1\n" in root


def test_a_temporary_log_dir_named_by_the_report_is_kept(tmp_path):
    r = ddprun("--nproc-per-node", "2", "-r", "2", "sh", "-c", FAIL_RANK1)
    assert r.returncode == 3
    line = [x for x in root_cause(r.stderr).splitlines() if "whole log:" in x][0]
    path = line.split("whole log: ", 1)[1].rstrip("):")
    assert open(path).read() == "loading shard\nfatal: cannot open /data/shard-1\n"


def test_only_the_last_20_lines_and_what_a_terminal_shows_of_them():
    script = ('i=1; while [ $i -le 50 ]; do echo "line $i" >&2; i=$((i+1)); done; '
              r'printf "\033[31mred\033[0m\n\r 10%%\r 90%%\n" >&2; exit 4')
    r = ddprun("--nproc-per-node", "1", "--tee", "0", "sh", "-c", script)
    assert r.returncode == 4
    root = root_cause(r.stderr)
    shown = root.split("  stderr    : last 20 lines:\n", 1)[1].split("\n=")[0].splitlines()
    assert shown == [f"    line {i}" for i in range(33, 51)] + ["    red", "     90%"]


def test_an_error_files_traceback_replaces_the_stderr_lines():
    script = ('echo "noise on stderr" >&2; '
              'printf \'{"message": {"message": "ValueError: boom", "extraInfo": '
              '{"py_callstack": "Traceback:\\\\nValueError: boom", "timestamp": "1"}}}\' '
              '> "$TORCHELASTIC_ERROR_FILE"; exit 1')
    r = ddprun("--nproc-per-node", "1", "sh", "-c", script)
    assert r.returncode == 1
    root = root_cause(r.stderr)
    assert "ValueError: boom" in root
    assert "noise on stderr" not in root and "  stderr    :" not in root


TIME_FMT = "%Y-%m-%d_%H:%M:%S"  # ddprun's time line, torchrun's layout


def shown_time(root):
    line = [x for x in root.splitlines() if x.startswith("  time      : ")][0]
    return line.split(": ", 1)[1]


@pytest.mark.parametrize("form", [
    '{"message": {"message": "E", "extraInfo": {"py_callstack": "Traceback:\\nE", '
    '"timestamp": "T0"}}}',
    '{"message": "E", "timestamp": T0}',
])
def test_the_time_is_the_timestamp_in_the_error_file(tmp_path, form):
    """torchrun dates a failure by the timestamp its error file holds (the
    worker's own clock when it failed), not by when the file was written:
    here 2 s later."""
    (tmp_path / "form").write_text(form)
    script = (f't0=$(date +%s); sleep 2.2; sed "s/T0/$t0/" {tmp_path}/form '
              f'> "$TORCHELASTIC_ERROR_FILE"; echo "$t0" > {tmp_path}/t0; exit 1')
    r = ddprun("--nproc-per-node", "1", "sh", "-c", script)
    assert r.returncode == 1, r.stderr
    t0 = int((tmp_path / "t0").read_text())
    assert shown_time(root_cause(r.stderr)) == time.strftime(TIME_FMT, time.localtime(t0)), \
        r.stderr


@pytest.mark.parametrize("stamp", [
    None, '"soon"', '"17e8"', "null", '"-5"', '"1"', "1e400", '"99999999999999999999"',
    "before the start", "after the failure", "string form, none"])
def test_a_missing_or_bad_timestamp_falls_back_to_when_it_failed(tmp_path, stamp):
    """Where torchrun's report would raise (no timestamp, not an integer) or
    mislead (1970 for a string message without one, 1969, a time outside
    the worker's life), the time is when the worker wrote its error file."""
    now = int(time.time())
    stamp = {"before the start": str(now - 3600),
             "after the failure": str(now + 3600)}.get(stamp, stamp)
    if stamp == "string form, none":
        form = '{"message": "E"}'
    else:
        extra = "" if stamp is None else f', "timestamp": {stamp}'
        form = f'{{"message": {{"message": "E", "extraInfo": {{"py_callstack": "E"{extra}}}}}}}'
    (tmp_path / "form").write_text(form)
    before = time.time()
    r = ddprun("--nproc-per-node", "1", "sh", "-c",
               f'cp {tmp_path}/form "$TORCHELASTIC_ERROR_FILE"; exit 1')
    after = time.time()
    assert r.returncode == 1, r.stderr
    root = root_cause(r.stderr)
    assert "traceback : E\n" in root, r.stderr
    shown = time.mktime(time.strptime(shown_time(root), TIME_FMT))
    assert int(before) <= shown <= after, r.stderr


def test_ranks_failing_when_the_others_are_stopped_are_failures_too(tmp_path):
    """Ranks 0 and 1 have written their error files (as every rank does that
    hits the same error) but are still running when rank 3's exit stops the
    workers: they are listed as failures, rank 3 stays the root cause. Rank
    2, which wrote none, was only stopped."""
    err = ('printf \'{"message": {"message": "RuntimeError: rank %s", "extraInfo": '
           '{"py_callstack": "Traceback:\\\\nRuntimeError: rank %s", "timestamp": "1"}}}\' '
           '"$RANK" "$RANK" > "$TORCHELASTIC_ERROR_FILE"')
    script = (f'cd {tmp_path}; trap "exit 1" TERM; '
              f'if [ "$RANK" = 3 ]; then '
              'while [ ! -e ready.0 ] || [ ! -e ready.1 ] || [ ! -e ready.2 ]; do sleep 0.01; '
              'done; exit 3; fi; '
              f'[ "$RANK" = 2 ] || {err}; touch ready.$RANK; sleep 60 & wait')
    r = ddprun("--nproc-per-node", "4", "sh", "-c", script)
    assert r.returncode == 3, r.stderr
    root = root_cause(r.stderr)
    assert "rank      : 3 (local_rank: 3)" in root, r.stderr
    others = r.stderr.split("Failures:", 1)[1].split("Root Cause", 1)[0]
    for rank in (0, 1):
        assert f"rank      : {rank} (local_rank: {rank})" in others, r.stderr
        assert f"RuntimeError: rank {rank}" in others, r.stderr
    assert "rank      : 2" not in r.stderr, r.stderr


def test_exit_127_from_a_missing_shared_library_names_it(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler is needed to build the test program")
    (tmp_path / "lib.c").write_text("int ddp_test_f(void) { return 0; }\n")
    (tmp_path / "main.c").write_text("int ddp_test_f(void);\n"
                                     "int main(void) { return ddp_test_f(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libddptestgone.so"),
                    str(tmp_path / "lib.c")], check=True)
    subprocess.run([cc, "-o", str(tmp_path / "prog"), str(tmp_path / "main.c"),
                    f"-L{tmp_path}", "-lddptestgone", f"-Wl,-rpath,{tmp_path}"], check=True)
    assert subprocess.run([str(tmp_path / "prog")]).returncode == 0
    os.unlink(tmp_path / "libddptestgone.so")
    r = ddprun("--nproc-per-node", "1", str(tmp_path / "prog"))
    assert r.returncode == 127
    root = root_cause(r.stderr)
    assert ("  cause     : the dynamic loader could not load the shared library "
            "libddptestgone.so (cannot open shared object file") in root
    assert "LD_LIBRARY_PATH" in root
    assert "error while loading shared libraries: libddptestgone.so" in root
    assert URL not in r.stderr


def test_exit_127_command_not_found_and_126_not_executable(tmp_path):
    r = ddprun("--nproc-per-node", "1", "sh", "-c", "ddp-no-such-command-here")
    assert r.returncode == 127
    cause = [x for x in root_cause(r.stderr).splitlines() if x.startswith("  cause")]
    assert len(cause) == 1 and "was not found" in cause[0]
    assert "ddp-no-such-command-here" in cause[0]
    f = tmp_path / "notexec"
    f.write_text("#!/bin/sh\n")
    f.chmod(0o644)
    r = ddprun("--nproc-per-node", "1", "sh", "-c", str(f))
    assert r.returncode == 126
    cause = [x for x in root_cause(r.stderr).splitlines() if x.startswith("  cause")]
    assert len(cause) == 1 and "could not be executed" in cause[0]
    assert "Permission denied" in cause[0]


@pytest.mark.parametrize("first,says", [
    ("#!/nonexistent/interp\n", "bad interpreter: /nonexistent/interp, named on its #! line: "
                                "no such file"),
    ("#! /dev/null -x\n", "bad interpreter: /dev/null, named on its #! line: "
                          "not an executable file"),
    ("#!/bin/sh\r\n", "bad interpreter: its #! line ends in a carriage return (DOS line "
                      "endings"),
])
def test_a_scripts_missing_interpreter_is_named_before_any_worker(tmp_path, first, says):
    """Each worker's execve failed with ENOENT and the report blamed the
    script, which exists ("No such file or directory"): the interpreter its
    #! line names, or the line's carriage return, is said once, before any
    worker starts, with bash's 126."""
    f = tmp_path / "job.sh"
    f.write_text(first + "echo ran\n")
    f.chmod(0o755)
    r = ddprun("--nproc-per-node", "2", str(f))
    assert r.returncode == 126, r.stderr
    assert r.stderr == f"ddprun: error: {f}: {says}" + r.stderr.split(says, 1)[1], r.stderr
    assert r.stderr.count("\n") == 1 and "ran" not in r.stdout


def test_a_shebang_longer_than_the_kernel_reads_still_runs(tmp_path):
    """An interpreter path past the 256 bytes the kernel reads of a #! line:
    the kernel refuses the file (ENOEXEC) and the worker runs it with
    /bin/sh, as execvp does; the check once cut the path there and refused
    the job over a truncated name."""
    d = tmp_path / ("d" * 120) / ("e" * 120)
    d.mkdir(parents=True)
    shutil.copy("/bin/sh", d / "sh")
    f = tmp_path / "job.sh"
    f.write_text(f"#!{d / 'sh'}\necho ran\n")
    assert len(f.read_text().split("\n")[0]) > 256
    f.chmod(0o755)
    r = ddprun("--nproc-per-node", "1", str(f))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran\n"


def test_a_one_line_script_with_no_newline_names_its_missing_interpreter(tmp_path):
    """"#!/nonexistent/interp" and nothing after: the kernel's buffer ends the
    name at the file's end (ENOENT), but the check skipped a line with no
    end and the report blamed the script again."""
    f = tmp_path / "job.sh"
    f.write_text("#!/nonexistent/interp")
    f.chmod(0o755)
    r = ddprun("--nproc-per-node", "1", str(f))
    assert r.returncode == 126, r.stderr
    assert r.stderr == (f"ddprun: error: {f}: bad interpreter: /nonexistent/interp, named on "
                        "its #! line: no such file\n")


@pytest.mark.parametrize("first", ["#!\n", "#!  \t\n"])
def test_a_shebang_that_names_no_interpreter_runs_with_sh(tmp_path, first):
    """A #! line with no name on it: the kernel refuses the file (ENOEXEC)
    and the worker runs it with /bin/sh, as bash and execvp do; the check
    looked up "" and refused the job ("bad interpreter: , named ...")."""
    f = tmp_path / "job.sh"
    f.write_text(first + "echo ran\n")
    f.chmod(0o755)
    r = ddprun("--nproc-per-node", "1", str(f))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran\n"


def test_a_script_whose_interpreter_is_there_runs(tmp_path):
    f = tmp_path / "job.sh"
    f.write_text("#!  /bin/sh -e\necho ran $LOCAL_RANK\n")
    f.chmod(0o755)
    r = ddprun("--nproc-per-node", "2", str(f))
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:2]) == ["ran 0", "ran 1"], r.stdout


def test_a_python_workers_failure_names_the_interpreter(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nsys.stderr.write('no torch here\\n')\nsys.exit(5)\n")
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3")
    r = ddprun("--nproc-per-node", "1", str(script), env=env)
    assert r.returncode == 5
    root = root_cause(r.stderr)
    assert "  python    : /usr/bin/python3" in root and "(PYTHON_EXEC=/usr/bin/python3)" in root
    assert "    no torch here\n" in root
    assert URL in root  # a Python worker: torchrun's advice about @record stays

    # Found on PATH (here a link, shown with what it points to).
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink("/usr/bin/python3", bindir / "python3")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    env.pop("PYTHON_EXEC", None)
    r = ddprun("--nproc-per-node", "1", str(script), env=env)
    assert r.returncode == 5
    line = [x for x in root_cause(r.stderr).splitlines() if x.startswith("  python    :")]
    real = os.path.realpath("/usr/bin/python3")
    assert line == [f"  python    : {bindir}/python3 -> {real} "
                    "(python3 found on PATH; PYTHON_EXEC chooses another)"]


def test_a_shell_worker_gets_no_pytorch_url():
    r = ddprun("--nproc-per-node", "2", "sh", "-c", "exit 9")
    assert r.returncode == 9
    assert URL not in r.stderr
    assert "  stderr    : <empty>" in root_cause(r.stderr)
    assert "interpreter" not in r.stderr


def test_a_failure_on_node_1_shows_its_stderr_in_node_0s_report(reaper, tmp_path):
    script = (RECORD + '[ "$RANK" = 3 ] && { ' + all_recorded(4) +
              'echo "fatal: node 1 cannot open /data/shard-3" >&2; exit 7; }; exec sleep 60')
    agents, out, _ = static_job(reaper, tmp_path, [2, 2], script,
                                extra=["--local-ranks-filter", "0"])
    for a in agents:
        assert a.wait() == 7, a.stderr()
    root = root_cause(agents[0].stderr())
    assert "rank      : 3 (local_rank: 1)" in root
    assert "  stderr    : last 1 line:\n    fatal: node 1 cannot open /data/shard-3\n" in root


def test_a_failure_dates_from_its_error_file_not_from_a_late_reaping(reaper, tmp_path):
    """Rank 1 (node 1) writes its error file first; its agent, stopped as a
    busy one might be, reaps it late, after rank 0 (node 0) has failed on its
    own. Rank 1 exited before any stop signal, so it is a failure; and it
    failed first, by its error file: the root cause (by the time its agent
    saw it, rank 0 took the blame, as in a compat run)."""
    err = ('printf \'{"message": {"message": "RuntimeError: %s", "extraInfo": '
           '{"py_callstack": "Traceback:\\\\nRuntimeError: %s", "timestamp": "1"}}}\' '
           '"$1" "$1" > "$TORCHELASTIC_ERROR_FILE"')
    def until(f):
        return f'while [ ! -e "$OUT/{f}" ]; do sleep 0.02; done; '
    # Rank 0 fails only once rank 1 has exited (the test saw it a zombie):
    # a rank 1 still running would be taken for stopped by the job's stop (a
    # sleep in rank 0 left that to the scheduler, and a loaded machine lost).
    script = (RECORD + all_recorded(2) +
              f'if [ "$RANK" = 1 ]; then set -- "rank 1 gave up"; {err}; touch "$OUT/wrote"; '
              f'{until("go")}exit 1; else {until("go")}{until("rank1-exited")}'
              f'set -- "peer closed"; {err}; exit 1; fi')
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], script)
    wait_for(lambda: (out / "wrote").exists(), timeout=30, what="rank 1's error file")
    rank1 = int((out / "pid.1.0").read_text())
    agents[1].signal(signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(agents[1].p.pid) == "T", timeout=30, what="node 1 stopped")
        (out / "go").touch()
        wait_for(lambda: proc_state(rank1) == "Z", timeout=30, what="rank 1 a zombie")
        (out / "rank1-exited").touch()
        wait_for(lambda: "failed with exit status 1" in agents[0].stderr(), timeout=30,
                 what="node 0 to see rank 0 fail")
    finally:
        agents[1].signal(signal.SIGCONT)
    for a in agents:
        assert a.wait() == 1, a.stderr()
    root = root_cause(agents[0].stderr())
    assert "rank      : 1 (local_rank: 0)" in root, agents[0].stderr()
    assert "RuntimeError: rank 1 gave up" in root, agents[0].stderr()


def test_a_rank_failing_on_node_1_when_stopped_is_listed_not_the_root_cause(reaper, tmp_path):
    """Rank 1 (node 1) has written its error file but is still running when
    rank 0 (node 0) exits and the job stops: node 0's report lists it among
    the failures, though its error file is older, and rank 0 is the root
    cause on both nodes (node 1's list says it was still running)."""
    err = ('printf \'{"message": {"message": "RuntimeError: rank 1", "extraInfo": '
           '{"py_callstack": "Traceback:\\\\nRuntimeError: rank 1", "timestamp": "1"}}}\' '
           '> "$TORCHELASTIC_ERROR_FILE"')
    script = (RECORD + all_recorded(2) + 'trap "exit 1" TERM; '
              f'if [ "$RANK" = 1 ]; then {err}; touch "$OUT/wrote"; sleep 60 & wait; fi; '
              'while [ ! -e "$OUT/wrote" ]; do sleep 0.01; done; exit 3')
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], script)
    for a in agents:
        assert a.wait() == 3, a.stderr()
    root = root_cause(agents[0].stderr())
    assert "rank      : 0 (local_rank: 0)" in root, agents[0].stderr()
    others = agents[0].stderr().split("Failures:", 1)[1].split("Root Cause", 1)[0]
    assert "rank      : 1 (local_rank: 0)" in others and "RuntimeError: rank 1" in others, \
        agents[0].stderr()
