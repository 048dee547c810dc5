"""ddprun's command line: torchrun's flags in both spellings, PET_* defaults,
usage errors (one line, exit 2), and programs that cannot run (127/126)."""
import os
import re
import shutil
import socket
import subprocess

import pytest

from conftest import REPO, binary, free_port, prog, run
from mnutil import ipv6_loopback


TRUE = "/bin/true"


def ddprun(*args, env=None, **kw):
    e = dict(os.environ)
    e.update(env or {})
    return run([binary("ddprun"), *args], env=e, **kw)


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_that_cannot_be_written_fail(flag):
    """Written to a full disk they said nothing and exited 0."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        r = subprocess.run([binary("ddprun"), flag], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=30)
    assert r.returncode == 1, r
    assert r.stderr == ("ddprun: error: cannot write to standard output: No space left on "
                        "device\n"), r.stderr


def one_error_line(r):
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("ddprun: error: "), r.stderr
    return lines[0]


def test_help_and_version():
    r = ddprun("--help")
    assert r.returncode == 0 and "--nproc-per-node" in r.stdout and r.stderr == ""
    r = ddprun("-h")
    assert r.returncode == 0 and "usage: ddprun" in r.stdout
    r = ddprun("--version")
    assert r.returncode == 0 and r.stdout.startswith("ddprun ")


@pytest.mark.parametrize(
    "args, says",
    [
        (["--bogus", TRUE], "unrecognized option '--bogus'"),
        (["--nproc-per-node", "zero", TRUE], "--nproc-per-node"),
        (["--nproc-per-node", "0", TRUE], "--nproc-per-node"),
        (["--nproc-per-node"], "expects a value"),
        (["--nproc_per_node", "2"], "missing the program"),
        (["-r", TRUE], f"missing the program to run (-r took '{TRUE}' as its value)"),
        (["--tee", "3", "--log-dir", TRUE], f"(--log-dir took '{TRUE}' as its value)"),
        ([], "missing the program"),
        (["--m", "1", TRUE], "ambiguous option"),
        # the candidates are named, as argparse names them
        (["--no", "1", TRUE], "ambiguous option '--no' (it could be --no-python, --node-rank)"),
        (["--nnodes", "3:2", TRUE], "--nnodes"),
        (["--node-rank", "1", TRUE], "--node-rank"),
        (["--master-port", "70000", TRUE], "--master-port"),
        (["-r", "4", TRUE], "--redirects"),
        (["--tee", "0:1,x:2", TRUE], "--tee"),
        (["--local-ranks-filter", "0,,1", TRUE], "--local-ranks-filter"),
        (["--signals-to-handle", "SIGNOPE", TRUE], "unknown signal 'SIGNOPE'"),
        (["--signals-to-handle", "SIGKILL", TRUE], "cannot be handled"),
        (["--shutdown-timeout", "-1", TRUE], "--shutdown-timeout"),
        (["--shutdown-timeout", "0x10", TRUE], "--shutdown-timeout"),  # float() refuses it
        (["--max-restarts", "many", TRUE], "--max-restarts"),
        # too large: the message gives the range (it said 'expected a
        # non-negative integer' or 'non-negative number of seconds' of them)
        (["--max-restarts", "99999999999", TRUE], "an integer from 0 to 1000000"),
        (["--node-rank", "70000", TRUE], "an integer from 0 to 65535"),
        (["--shutdown-timeout", "1e300", TRUE], "a number of seconds from 0 to 1000000000"),
        (["--rdzv-conf", "join_timeout=1e10", TRUE],
         "a number of seconds above 0, at most 1000000000"),
        (["--rdzv-backend", "etcd", TRUE], "--rdzv-backend"),
        (["--rdzv-conf", "timeout", TRUE], "--rdzv-conf"),
        (["--start-method", "thread", TRUE], "--start-method"),
        (["--standalone=1", TRUE], "takes no value"),
        # argparse: a flag's "=value" is an error, -h's too (not the help)
        (["-m=1", TRUE], "option --module takes no value"),
        (["-h=1", TRUE], "option --help takes no value"),
        (["-r==3", TRUE], "invalid value '=3' for --redirects"),
        (["-m", "--no-python", "mod"], "cannot be used together"),
        (["--log-dir", "--tee", "3", TRUE], "expects a value"),
        (["--event-log-handler", "syslog", TRUE], "--event-log-handler"),
        (["--numa-binding", "gpu", TRUE], "--numa-binding"),
        (["--print-completion", "bash"], "no shell completion script"),
        (["--rdzv-conf", "use_libuv=1,join_timeout=x", TRUE], "join_timeout=x"),
        # A healthy node would be lost after one late heartbeat (they were
        # accepted, and the job ended with 75), or two keys say otherwise.
        (["--rdzv-conf", "keep_alive_interval=5,heartbeat_timeout=5", TRUE],
         "heartbeat_timeout=5 is below two keep_alive_intervals"),
        (["--rdzv-conf", "keep_alive_max_attempt=1", TRUE], "keep_alive_max_attempt=1"),
        (["--rdzv-conf", "heartbeat_timeout=9,keep_alive_max_attempt=3", TRUE],
         "heartbeat_timeout=9 contradicts keep_alive_max_attempt=3"),
        # Malformed on one node as on several (it was 1 there); a port in it
        # was passed over, the store taking another.
        (["--master-addr", "[::1", TRUE], "--master-addr"),
        (["--rdzv-endpoint", "localhost", TRUE], "needs the port"),  # static, as torchrun
        (["--master-addr", "127.0.0.1:5000", TRUE], "without a port"),
        (["--nnodes", "2", "--master-addr", "[::1]:5000", TRUE], "without a port"),
        # a static store's port 0: the flag that gave it is named
        (["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:0", TRUE],
         "--rdzv-endpoint: several nodes need a fixed port, not 0"),
        (["--nnodes", "2", "--master-port", "0", TRUE],
         "--master-port: several nodes need a fixed port, not 0"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args, says):
    r = ddprun(*args)
    assert r.returncode == 2, r
    assert says in one_error_line(r)
    assert r.stdout == ""


def test_bad_pet_variable_names_the_variable():
    r = ddprun(TRUE, env={"PET_NPROC_PER_NODE": "lots"})
    assert r.returncode == 2
    assert "PET_NPROC_PER_NODE" in one_error_line(r)
    r = ddprun("--nnodes", "2", TRUE, env={"PET_RDZV_ENDPOINT": "127.0.0.1:0"})
    assert r.returncode == 2
    assert "PET_RDZV_ENDPOINT: several nodes need a fixed port" in one_error_line(r)


@pytest.mark.parametrize("nnodes", [[], ["--nnodes", "1"], ["--nnodes", "1:1"]])
def test_one_c10d_node_at_port_0_runs_alone_as_standalone(nnodes):
    """torchrun's --standalone is `--rdzv-backend c10d --rdzv-endpoint localhost:0`;
    written out, on one node, it said 'several nodes need a fixed port' (exit 2)."""
    r = ddprun(*nnodes, "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
               "--rdzv-id", "job7", "--nproc-per-node", "2", "sh", "-c",
               'echo "$RANK $WORLD_SIZE $GROUP_WORLD_SIZE $TORCHELASTIC_RUN_ID $MASTER_PORT"')
    assert r.returncode == 0 and r.stderr == "", r
    lines = sorted(r.stdout.splitlines())
    assert [ln.rsplit(" ", 1)[0] for ln in lines] == ["0 2 1 job7", "1 2 1 job7"], r.stdout
    assert {ln.rsplit(" ", 1)[1] for ln in lines} != {"0"}, r.stdout


@pytest.mark.parametrize("alone", [["--standalone"],
                                   ["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"]])
def test_a_node_alone_reads_no_master_address_port_or_node_rank(alone):
    """torchrun's --standalone never reads them, and a Kubeflow pod exports
    PET_MASTER_ADDR, PET_MASTER_PORT and PET_NODE_RANK whatever runs in it:
    ddprun resolved the address, listened on the port (in use: status 1) and
    refused the rank (status 2). Given on the command line they get a
    warning."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        show = ["--nproc-per-node", "2", "sh", "-c", 'echo "$MASTER_ADDR $MASTER_PORT $GROUP_RANK"']
        r = ddprun(*alone, *show, env={"PET_MASTER_ADDR": "bad..name",
                                       "PET_MASTER_PORT": str(port), "PET_NODE_RANK": "1"})
        assert r.returncode == 0 and r.stderr == "", r
        for line in r.stdout.splitlines():
            addr, got, group = line.split()
            assert (addr, group) == ("127.0.0.1", "0") and int(got) not in (0, port), r.stdout
        if len(alone) == 1:  # not even checked (they were usage errors)
            r = ddprun(*alone, *show, env={"PET_MASTER_ADDR": "", "PET_MASTER_PORT": "99999",
                                           "PET_NODE_RANK": "-1"})
            assert r.returncode == 0 and r.stderr == "", r
        r = ddprun(*alone, "--master-addr", "10.255.255.1", "--master-port", str(port),
                   "--node-rank", "1", *show)
    assert r.returncode == 0, r
    assert r.stderr == ("ddprun: warning: --master-addr, --master-port, --node-rank are ignored: "
                        f"{'--standalone' if len(alone) == 1 else '--rdzv-endpoint with port 0'} "
                        "runs this node alone, with its store on a free port of this machine (as "
                        "torchrun's)\n"), r.stderr
    assert all(line.startswith("127.0.0.1 ") for line in r.stdout.splitlines()), r.stdout


def test_a_c10d_node_reads_no_node_rank():
    """c10d ranks nodes by arrival: --node-rank 3 of one node was a usage
    error (torchrun passes it over)."""
    r = ddprun("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
               "--node-rank", "3", "sh", "-c", 'echo "$GROUP_RANK"')
    assert r.returncode == 0 and r.stdout == "0\n", r


def test_local_addr_names_what_it_cannot_resolve_and_brackets_ipv6():
    """A --local-addr name that does not resolve (an empty label: no query
    leaves the machine) said 'host not found or unreachable' of
    'bad..name:0'; the round line wrote an IPv6 store as '::1:PORT'."""
    c10d = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "--rdzv-conf", "join_timeout=10", TRUE]
    r = ddprun("--local-addr", "bad..name", *c10d)
    assert r.returncode == 1, r
    assert "cannot resolve --local-addr bad..name: " in r.stderr, r.stderr
    assert "unreachable" not in r.stderr and "bad..name:0" not in r.stderr, r.stderr
    if not ipv6_loopback():
        return
    r = ddprun("--local-addr", "[::1]", *c10d)
    assert r.returncode == 0, r
    assert re.search(r"store \[::1\]:[0-9]+$", r.stderr.strip()), r.stderr


UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def run_ids(*args, env=None):
    r = ddprun(*args, "--nproc-per-node", "2", "sh", "-c", 'echo "$TORCHELASTIC_RUN_ID"',
               env=env)
    assert r.returncode == 0 and r.stderr == "", r
    ids = set(r.stdout.split())
    assert len(ids) == 1, r.stdout
    return ids.pop()


def test_a_single_node_with_no_port_gets_a_fresh_uuid_run_id_as_torchrun_2():
    """torchrun 2.11+ runs one node given no port and no rendezvous as
    --standalone, with str(uuid.uuid4()) for its run id (the log directory's
    name too); ddprun said "none", so two jobs' scripts that name their
    output by the run id collided."""
    first, second = run_ids(), run_ids("--nnodes", "1")
    assert UUID4.match(first) and UUID4.match(second) and first != second
    assert UUID4.match(run_ids("--standalone", "--rdzv-id", "x"))  # as torchrun's
    # A port or a rendezvous given keeps torchrun 1.x's default; an id given stays.
    assert run_ids("--master-port", str(free_port())) == "none"
    assert run_ids(env={"PET_MASTER_PORT": str(free_port())}) == "none"
    assert run_ids("--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0") == "none"
    assert run_ids("--rdzv-id", "job7") == "job7"


def test_the_readmes_sample_log_path_is_one_a_default_single_node_run_writes(tmp_path):
    """The README's failure report named logs/none_ab12/...: a single node given
    no port has a uuid4 run id, and a log directory's suffix has six letters."""
    def shape(line):
        path = re.search(r"\(whole log: (\S+)\):", line)
        assert path, line
        parts = re.fullmatch(r".*logs/(.*)_([A-Za-z0-9]{6})/(.*)", path.group(1))
        assert parts and UUID4.match(parts.group(1)), path.group(1)
        return parts.group(3)
    readme = open(os.path.join(REPO, "README.md")).read()
    [sample] = [l for l in readme.splitlines() if "(whole log: " in l]
    r = ddprun("--nproc-per-node=2", "--log-dir", str(tmp_path / "logs"), "-r", "3", "sh",
               "-c", '[ "$RANK" = 1 ] && { echo "fatal: cannot open" >&2; exit 3; }; exit 0')
    assert r.returncode == 3
    [printed] = [l for l in r.stderr.splitlines() if "(whole log: " in l]
    assert shape(sample) == shape(printed) == "attempt_0/1/stderr.log"


# A value each option refuses, read from its PET_ variable (ddprun(1), OPTIONS).
# --log-dir refuses none (an empty one is unset, as torchrun's): test_launch_env
# reads PET_LOG_DIR; nor does --role (an empty one too, as torchrun's):
# test_pet_environment_gives_defaults_and_flags_win reads PET_ROLE.
PET_REFUSED = {
    "NNODES": "x", "NPROC_PER_NODE": "x", "RDZV_BACKEND": "x", "RDZV_ID": "",
    "RDZV_CONF": "x", "STANDALONE": "x", "MAX_RESTARTS": "x", "MONITOR_INTERVAL": "x",
    "START_METHOD": "x", "MODULE": "x", "NO_PYTHON": "x", "RUN_PATH": "x",
    "REDIRECTS": "x", "TEE": "x", "LOCAL_RANKS_FILTER": "x",
    "NODE_RANK": "x", "MASTER_ADDR": "", "MASTER_PORT": "x", "SIGNALS_TO_HANDLE": "x",
    "FORWARD_SIGNALS": "x", "SHUTDOWN_TIMEOUT": "x", "TAG_OUTPUT": "x",
    "HANG_TIMEOUT": "x", "EVENT_LOG_HANDLER": "x", "VIRTUAL_LOCAL_RANK": "x",
}


@pytest.mark.parametrize("name", sorted(PET_REFUSED))
def test_every_option_reads_its_pet_variable(name):
    r = ddprun(TRUE, env={"PET_" + name: PET_REFUSED[name]})
    assert r.returncode == 2, r
    assert "PET_" + name in one_error_line(r)


@pytest.mark.parametrize("name", ["NUMA_BINDING", "LOGS_SPECS", "PRINT_COMPLETION"])
def test_the_documented_exceptions_have_no_pet_variable(name):
    """As in torchrun, which gives these three no env action."""
    r = ddprun(TRUE, env={"PET_" + name: "x"})
    assert r.returncode == 0 and r.stderr == "", r


def test_bad_store_io_choice_is_a_usage_error():
    r = ddprun(TRUE, env={"DDP_STORE_IO": "epoll"})
    assert r.returncode == 2
    assert "bad DDP_STORE_IO 'epoll' (auto, uring or uv)" in one_error_line(r)


def test_hosts_its_stores_without_io_uring_where_it_is_refused():
    """Under a seccomp filter refusing io_uring (Docker's default profile),
    the stores ddprun hosts fall back to libuv: a job whose workers use the
    store still runs."""
    r = run([prog("no_uring"), binary("ddprun"), "--nproc-per-node=2", prog("ddp_hello")],
            env=dict(os.environ, DDP_STORE_IO="auto"))
    assert r.returncode == 0, r.stderr


def _io_uring_rings_of_parent(env_io):
    """In a worker: how many io_urings ddprun (its parent) holds, before and
    after a connection to its store."""
    count = "ls -l /proc/$PPID/fd | grep -c io_uring"
    script = f"{count}; {binary('ddpstore')} set k v; {count}; true"
    r = run([binary("ddprun"), "--nproc-per-node=1", "/bin/sh", "-c", script],
            env=dict(os.environ, DDP_STORE_IO=env_io))
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


def test_its_store_sets_up_io_uring_at_the_first_connection():
    """auto: ddprun's store takes an io_uring only once a client connects (a
    job that never uses the store does not pay for it); uv: never."""
    probe = subprocess.Popen([binary("ddpstore"), "serve", "--port", "0", "--quiet"],
                             env=dict(os.environ, DDP_STORE_IO="uring"))
    try:
        if probe.wait(timeout=1) == 1:
            pytest.skip("io_uring is not available (built without liburing, or refused here)")
    except subprocess.TimeoutExpired:
        probe.kill()  # it serves: io_uring is there
        probe.wait()
    assert _io_uring_rings_of_parent("auto") == [0, 1]
    assert _io_uring_rings_of_parent("uv") == [0, 0]


def test_both_spellings_and_prefixes_are_accepted():
    for flag in ("--nproc-per-node=3", "--nproc_per_node=3", "--nproc=3"):
        r = ddprun(flag, "sh", "-c", 'echo "$LOCAL_WORLD_SIZE"')
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["3"] * 3, flag
    r = ddprun("--nproc_per_node", "2", "--max_restarts", "0", "--monitor_interval", "1",
               "--start_method", "fork", "--role", "trainer", "--rdzv_id", "job7",
               "sh", "-c", 'echo "$ROLE_NAME $TORCHELASTIC_RUN_ID"')
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["trainer job7"] * 2


def test_pet_environment_gives_defaults_and_flags_win():
    env = {"PET_NPROC_PER_NODE": "2", "PET_ROLE": "envrole", "PET_MAX_RESTARTS": "0"}
    r = ddprun("sh", "-c", 'echo "$ROLE_NAME"', env=env)
    assert r.returncode == 0 and r.stdout.split() == ["envrole"] * 2
    r = ddprun("--role", "flagrole", "sh", "-c", 'echo "$ROLE_NAME"', env=env)
    assert r.stdout.split() == ["flagrole"] * 2
    # an empty role, as torchrun takes it (it was refused: "a non-empty name")
    r = ddprun("--role=", "sh", "-c", 'echo "[$ROLE_NAME]"', env=env)
    assert r.returncode == 0 and r.stdout.split() == ["[]"] * 2, r.stderr


def test_options_after_the_program_belong_to_the_program():
    r = ddprun("--nproc-per-node", "1", "sh", "-c", 'echo "$@"', "sh", "--nproc-per-node", "5")
    assert r.returncode == 0
    assert r.stdout.strip() == "--nproc-per-node 5"


def test_missing_program_is_127_before_any_worker(tmp_path):
    marker = tmp_path / "started"
    r = ddprun("--nproc-per-node", "2", "no-such-program-xyz", str(marker))
    assert r.returncode == 127
    assert "no-such-program-xyz: command not found" in one_error_line(r)
    r = ddprun(str(tmp_path / "missing.py"))
    assert r.returncode == 127
    # A path that is not there is said as bash says it (not "not found").
    r = ddprun("./no-such-program-xyz", cwd=tmp_path)
    assert r.returncode == 127
    assert one_error_line(r) == ("ddprun: error: ./no-such-program-xyz: no such file or "
                                 "directory")
    # An empty name is not found either (it once ran python3 on stdin, exit 0).
    r = ddprun("--nproc-per-node", "2", "", "-c", f"open({str(marker)!r}, 'w')")
    assert r.returncode == 127
    assert "'': command not found" in one_error_line(r)
    assert not marker.exists()


def test_a_python_that_python_exec_names_and_a_directory_are_said_so(tmp_path):
    """PYTHON_EXEC=nosuchpython said only 'nosuchpython: command not found',
    and a directory run with --no-python was 'not an executable file'."""
    (tmp_path / "x.py").write_text("print(1)\n")
    r = ddprun(str(tmp_path / "x.py"), env={"PYTHON_EXEC": "nosuchpython"})
    assert r.returncode == 127, r
    assert one_error_line(r) == ("ddprun: error: nosuchpython: command not found (the Python "
                                 "that PYTHON_EXEC names)")
    r = ddprun("--no-python", str(tmp_path))
    assert r.returncode == 126, r
    assert one_error_line(r) == f"ddprun: error: {tmp_path}: is a directory"
    # A path, or a directory, named by PYTHON_EXEC is said as such too.
    r = ddprun(str(tmp_path / "x.py"), env={"PYTHON_EXEC": "/nonexistent/python"})
    assert r.returncode == 127, r
    assert one_error_line(r) == ("ddprun: error: /nonexistent/python: no such file or "
                                 "directory (the Python that PYTHON_EXEC names)")
    r = ddprun(str(tmp_path / "x.py"), env={"PYTHON_EXEC": str(tmp_path)})
    assert r.returncode == 126, r
    assert one_error_line(r) == (f"ddprun: error: {tmp_path}: is a directory (the Python "
                                 "that PYTHON_EXEC names)")


def test_a_program_in_the_current_directory_but_not_on_path_is_named(tmp_path):
    """`ddprun a.out` runs a.out of the current directory under mpirun and srun;
    here, as execvp, only from PATH: the line says how to run the one here."""
    (tmp_path / "a.out").write_text("#!/bin/sh\necho ran\n")
    os.chmod(tmp_path / "a.out", 0o755)
    r = ddprun("a.out", cwd=tmp_path)
    assert r.returncode == 127
    assert one_error_line(r) == ("ddprun: error: a.out: command not found (it is not on "
                                 "PATH; for the one in this directory write ./a.out)")
    r = ddprun("./a.out", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "ran\n", r


def test_not_executable_is_126(tmp_path):
    f = tmp_path / "data.txt"
    f.write_text("hello\n")
    r = ddprun(str(f))
    assert r.returncode == 126
    assert "permission denied" in one_error_line(r)
    r = ddprun(str(tmp_path))  # a directory
    assert r.returncode == 126
    # A symlink loop: the shell's 126 and reason (it was "command not found", 127).
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    r = ddprun("./loop1", cwd=tmp_path)
    assert r.returncode == 126
    assert one_error_line(r) == "ddprun: error: ./loop1: Too many levels of symbolic links"
    r = ddprun("loop1", cwd=tmp_path, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert r.returncode == 126, r
    # ... but one on PATH before the program does not stop the search, as
    # Python's subprocess (torchrun) and bash go on
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "loop1").write_text("#!/bin/sh\necho found\n")
    os.chmod(tmp_path / "bin" / "loop1", 0o755)
    r = ddprun("loop1", cwd=tmp_path, env={"PATH": f"{tmp_path}:{tmp_path}/bin:/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout == "found\n", r
    # A file taken for a directory: the shell's 126, "Not a directory".
    r = ddprun(str(f / "x"))
    assert r.returncode == 126
    assert one_error_line(r) == f"ddprun: error: {f}/x: Not a directory"


def test_run_path_runs_a_directory_and_wins_over_module_and_no_python(tmp_path):
    """torchrun's --run-path is runpy.run_path of the script: a directory's
    __main__.py runs (it was "permission denied (not a readable file)", 126),
    and -m and --no-python beside it are ignored (the pair was refused, and
    -m ran python -m)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__main__.py").write_text('import os; print("main", os.environ["RANK"])\n')
    (tmp_path / "empty").mkdir()
    (tmp_path / "envmod.py").write_text('print("mod")\n')
    r = ddprun("--nproc-per-node", "2", "--run-path", "pkg", cwd=tmp_path)
    assert r.returncode == 0 and sorted(r.stdout.splitlines()) == ["main 0", "main 1"], r
    r = ddprun("--run-path", "empty", cwd=tmp_path)
    assert r.returncode == 126
    assert "empty: a directory without a readable __main__.py" in one_error_line(r)
    r = ddprun("--run-path", "--no-python", "-m", "envmod.py", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "mod\n", r
    r = ddprun("--run-path", "-m", "envmod", cwd=tmp_path)
    assert r.returncode == 127 and "cannot open envmod" in one_error_line(r), r


def test_what_python_runs_is_run_with_python_as_torchrun_does(tmp_path):
    """A directory with a __main__.py, a zip application and a script named
    .PY run with Python, as torchrun runs every program (they were exec'd:
    "command not found", 127); so do a Python script without .py and a .zip
    that are not executable, by name or path (they were 127 with "write
    ./train_script", then 126); with --no-python such a script says how to
    run it with Python."""
    import zipapp
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__main__.py").write_text('import os; print("main", os.environ["RANK"])\n')
    zipapp.create_archive(pkg, tmp_path / "app.pyz")
    (tmp_path / "tr2.PY").write_text('import os; print("main", os.environ["RANK"])\n')
    for name in ("pkg", "app.pyz", "tr2.PY"):
        r = ddprun("--nproc-per-node", "2", name, cwd=tmp_path)
        assert r.returncode == 0 and sorted(r.stdout.splitlines()) == ["main 0", "main 1"], r
    (tmp_path / "trainer").write_text('import os, sys; print("main", os.environ["RANK"], '
                                      'sys.argv[1:])\n')
    (tmp_path / "pyline").write_text('#!/usr/bin/env python3\nprint("main", 0, [])\n')
    shutil.copy(tmp_path / "app.pyz", tmp_path / "app.zip")
    for name in ("trainer", "./trainer", str(tmp_path / "trainer"), "pyline", "app.zip"):
        r = ddprun(name, *(["--epochs", "3"] if "trainer" in name else []), cwd=tmp_path)
        want = "main 0 ['--epochs', '3']" if "trainer" in name else "main 0"
        assert r.returncode == 0 and r.stdout.startswith(want), (name, r)
    # An executable or a command on PATH is still executed directly.
    os.chmod(tmp_path / "pyline", 0o755)
    r = ddprun("pyline", cwd=tmp_path, env={"PATH": f"{tmp_path}:/usr/bin:/bin",
                                            "PYTHON_EXEC": "/nonexistent/python"})
    assert r.returncode == 0 and r.stdout == "main 0 []\n", r
    # Without a #! line (a shell's script reads the same), chmod +x comes first.
    r = ddprun("--no-python", "./trainer", cwd=tmp_path)
    assert r.returncode == 126
    assert one_error_line(r) == ("ddprun: error: ./trainer: permission denied (not an "
                                 "executable file; chmod +x it, or, if it is a Python script, "
                                 "run it as python3 ./trainer, or name it .py)"), r
    os.chmod(tmp_path / "pyline", 0o644)
    r = ddprun("--no-python", "./pyline", cwd=tmp_path)
    assert r.returncode == 126
    assert one_error_line(r) == ("ddprun: error: ./pyline: permission denied (not an "
                                 "executable file; a Python script: run it as python3 "
                                 "./pyline, or name it .py)"), r
    # Not for a script of another interpreter (with a byte order mark too),
    # nor for a file named as something else, nor for PYTHON_EXEC itself.
    for name, text in (("run.sh", "#!/bin/sh\necho hi\n"), ("bom", "\ufeff#!/bin/sh\necho\n"),
                       ("job.sh", "echo hi\n")):
        (tmp_path / name).write_text(text)
        r = ddprun(f"./{name}", cwd=tmp_path)
        assert r.returncode == 126
        assert one_error_line(r) == (f"ddprun: error: ./{name}: permission denied (not an "
                                     "executable file)"), r
    r = ddprun("tr2.PY", cwd=tmp_path, env=dict(os.environ, PYTHON_EXEC=str(tmp_path / "trainer")))
    assert r.returncode == 126
    assert one_error_line(r) == (f"ddprun: error: {tmp_path}/trainer: permission denied (not "
                                 "an executable file: the Python that PYTHON_EXEC names)"), r


def test_program_is_found_on_path_like_exec(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "myprog").write_text("#!/bin/sh\necho found $LOCAL_RANK\n")
    os.chmod(bindir / "myprog", 0o755)
    r = ddprun("myprog", env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout == "found 0\n"
    # A script without "#!" runs with /bin/sh, as execvp does.
    (bindir / "noshebang").write_text("echo plain $RANK\n")
    os.chmod(bindir / "noshebang", 0o755)
    r = ddprun("noshebang", env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout == "plain 0\n"


def test_nproc_cpu_is_the_cpus_it_may_run_on():
    # torch._utils.cpu_count(): len(os.sched_getaffinity(0)), not the online CPUs.
    n = len(os.sched_getaffinity(0))
    r = ddprun("--nproc-per-node", "cpu", "sh", "-c", 'echo "$LOCAL_WORLD_SIZE"')
    assert r.returncode == 0
    assert r.stdout.split() == [str(n)] * n


@pytest.mark.parametrize("nproc", ["cpu", "auto"])
def test_nproc_cpu_honours_the_affinity_mask(nproc):
    # taskset (or a cpuset) leaves one CPU: one worker, as torchrun starts.
    cpu = min(os.sched_getaffinity(0))
    r = run(["taskset", "-c", str(cpu), binary("ddprun"), "--nproc-per-node", nproc,
             "sh", "-c", 'echo "$LOCAL_WORLD_SIZE"'],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1\n"


def test_nproc_gpu_without_a_gpu_is_a_clear_error(tmp_path):
    # No CUDA driver on this machine (or none visible): one line, no worker.
    r = ddprun("--nproc-per-node", "gpu", "sh", "-c", "touch " + str(tmp_path / "ran"),
               env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 1
    assert "--nproc-per-node=gpu: no visible GPU" in one_error_line(r)
    assert not (tmp_path / "ran").exists()


def test_nproc_auto_falls_back_to_cpus_without_a_gpu():
    r = ddprun("--nproc-per-node", "auto", "sh", "-c", 'echo "$LOCAL_WORLD_SIZE"',
               env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0
    assert r.stdout.split()[0] in (str(os.cpu_count()),)


FAKE_CUDA = r"""
#include <stdlib.h>
#include <string.h>
/* A stand-in driver: FAKE_GPUS devices, CUDA_VISIBLE_DEVICES honoured. */
int cuInit(unsigned flags) { return 0; }
int cuDeviceGetCount(int *n)
{
    const char *all = getenv("FAKE_GPUS"), *vis = getenv("CUDA_VISIBLE_DEVICES");
    int count = all ? atoi(all) : 0, k = 0;
    if (vis != NULL) {
        const char *p = vis;
        if (*p == '\0') { *n = 0; return 0; }
        for (k = 1; (p = strchr(p, ',')) != NULL; p++) k++;
        if (k < count) count = k;
    }
    *n = count;
    return 0;
}
"""


def test_nproc_gpu_counts_devices_through_the_driver(tmp_path):
    src = tmp_path / "fakecuda.c"
    src.write_text(FAKE_CUDA)
    lib = tmp_path / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True,
                   timeout=60)
    e = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), FAKE_GPUS="3")
    e.pop("CUDA_VISIBLE_DEVICES", None)
    cmd = [binary("ddprun"), "--nproc-per-node", "gpu", "sh", "-c", 'echo "$LOCAL_WORLD_SIZE"']
    r = run(cmd, env=e)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3"] * 3
    r = run(cmd, env=dict(e, CUDA_VISIBLE_DEVICES="1,2"))
    assert r.stdout.split() == ["2"] * 2
    r = run(cmd, env=dict(e, FAKE_GPUS="0"))
    assert r.returncode == 1 and "no visible GPU" in r.stderr


def help_of(flag):
    """--help's text of one option: its line and the indented lines after it."""
    text = ddprun("--help").stdout
    block = re.search(rf"^  {re.escape(flag)} .*\n(?:^ {{29}}\S.*\n)*", text, re.M)
    assert block, text
    return " ".join(block.group(0).split())


def test_help_gives_forward_signals_no_default_but_none():
    """A parenthesis that ends an option's help is its default: --forward-signals
    ended in (SIGUSR1,USR2,12), its example; it has no default."""
    text = help_of("--forward-signals LIST")
    assert "(none)" in text and not text.endswith(")"), text
    assert "(SIGTERM,SIGINT,SIGHUP,SIGQUIT)" in help_of("--signals-to-handle LIST")


def test_every_flag_in_help_is_in_the_man_page():
    helptext = ddprun("--help").stdout
    flags = set(re.findall(r"--[a-z][a-z-]+", helptext))
    man = open(os.path.join(REPO, "man", "ddprun.1")).read().replace("\\-", "-")
    missing = sorted(f for f in flags if f not in man)
    assert len(flags) > 20 and missing == []


def test_every_option_the_parser_takes_is_in_help_and_in_the_man_page():
    """The parser's table of options (launcher/cli.c), each long and short name:
    --help left --print-completion out."""
    src = open(os.path.join(REPO, "launcher", "cli.c")).read()
    table = re.findall(r'\[O_\w+\] = \{"([a-z-]+)", (?:\'(\w)\'|0),', src)
    assert len(table) > 30
    helptext = ddprun("--help").stdout
    man = open(os.path.join(REPO, "man", "ddprun.1")).read().replace("\\-", "-")
    for name, short in table:
        for flag in [f"--{name}"] + ([f"-{short}"] if short else []):
            pattern = rf"(?<![\w-]){re.escape(flag)}(?![\w-])"
            assert re.search(pattern, helptext), f"--help lacks {flag}"
            assert re.search(pattern, man), f"ddprun(1) lacks {flag}"


# Every flag of torchrun 2.14's --help (python3 -m torch.distributed.run --help
# in Debian sid's python3-torch 2.14.1), in the spelling its help shows.
TORCHRUN_214 = [
    "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "static",
    "--rdzv-endpoint", "", "--rdzv-id", "job", "--rdzv-conf", "join_timeout=30",
    "--max-restarts", "0", "--monitor-interval", "0.5", "--start-method", "spawn",
    "--event-log-handler", "null", "--role", "trainer", "--no-python",
    "--log-dir", "LOGS", "-r", "0", "-t", "0",
    "--log-line-prefix-template", "[${role_name}${local_rank}]:",
    "--local-ranks-filter", "0,1", "--duplicate-stdout-filters", "",
    "--duplicate-stderr-filters", "", "--node-rank", "0", "--master-addr", "127.0.0.1",
    "--local-addr", "127.0.0.1", "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
    "--shutdown-timeout", "30", "--virtual-local-rank",
]


def test_a_torchrun_2_14_command_line_runs_unchanged(tmp_path):
    args = [str(tmp_path / "logs") if a == "LOGS" else a for a in TORCHRUN_214]
    r = ddprun(*args, "sh", "-c", "echo ok $RANK $LOCAL_RANK")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")) == ["", "ok 0 0", "ok 1 0"]
    assert r.stderr == ""
    # --numa-binding and --logs-specs are accepted too (with a warning each,
    # tested below); -m, --run-path and --standalone are tested elsewhere.
    r = ddprun("--logs_specs", "mine", "--numa_binding", "node", TRUE)
    assert r.returncode == 0, r.stderr


def warnings(r):
    lines = r.stderr.strip().splitlines()
    assert all(line.startswith("ddprun: warning: ") for line in lines), r.stderr
    return lines


def test_unknown_rdzv_conf_keys_pass_with_one_warning():
    # torchrun 2.x's c10d backend reads store_type; Debian's builds need
    # use_libuv=0 somewhere: a command line with them must still run.
    r = ddprun("--rdzv-conf", "use_libuv=1, store_type=tcp,join_timeout=9", TRUE)
    assert r.returncode == 0, r.stderr
    assert warnings(r) == ["ddprun: warning: --rdzv-conf: ddprun does not use use_libuv, "
                           "store_type (passed over, as torchrun passes keys its backend "
                           "does not read)"]


def test_is_host_refuses_with_the_words_it_takes():
    """is_host=2 said "expected 1 or 0", yet is_host=true ran: the refusal
    lists torchrun's spellings (get_as_bool), each of which runs, in any case,
    and ddprun(1) names them."""
    r = ddprun("--rdzv-conf", "is_host=2", TRUE)
    assert r.returncode == 2
    said = re.search(r"is_host=2: expected (.*) \(on\) or (.*) \(off\), in any case \(see",
                     r.stderr.strip())
    assert said, r.stderr
    words = [w for part in said.groups() for w in part.split(", ")]
    assert sorted(words) == sorted(["1", "true", "t", "yes", "y", "0", "false", "f", "no", "n"])
    for w in words + [w.upper() for w in words]:
        r = ddprun("--rdzv-conf", f"is_host={w}", TRUE)
        assert r.returncode == 0 and r.stderr == "", (w, r.stderr)
    man = " ".join(open(os.path.join(REPO, "man", "ddprun.1")).read().split())
    assert "true, t, yes and y are 1, false, f, no and n are 0, in any case" in man


def test_logs_specs_and_event_log_handler_say_they_are_ignored():
    r = ddprun("--logs-specs", "fancy", "--event-log-handler", "console", TRUE)
    assert r.returncode == 0, r.stderr
    w = warnings(r)
    assert len(w) == 2
    assert "--logs-specs fancy is ignored" in w[0]
    assert "--event-log-handler console is ignored" in w[1]
    # torchrun's default handler says nothing
    r = ddprun("--event-log-handler", "null", TRUE, env={"PET_EVENT_LOG_HANDLER": "console"})
    assert r.returncode == 0 and r.stderr == ""


def test_duplicate_filters_copy_matching_teed_lines_to_one_file(tmp_path):
    logs = tmp_path / "logs"
    script = ('echo "loss=1 r$RANK"; echo "noise r$RANK"; echo "a,b r$RANK"; '
              'echo "warn: r$RANK" >&2; echo "other r$RANK" >&2')
    r = ddprun("--nproc-per-node", "2", "--log-dir", str(logs), "-t", "0:3,1:1",
               "--duplicate-stdout-filters", "loss,a,,b", "--duplicate_stderr_filters", "warn",
               "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("warn: r") == 2  # the console is unchanged
    (run_dir,) = os.listdir(logs)
    attempt = logs / run_dir / "attempt_0"
    out = sorted((attempt / "filtered_stdout.log").read_text().splitlines())
    assert out == ["[default0]:a,b r0", "[default0]:loss=1 r0",
                   "[default1]:a,b r1", "[default1]:loss=1 r1"]
    # rank 1's stderr is not tee'd: torchrun copies only tee'd streams
    assert (attempt / "filtered_stderr.log").read_text() == "[default0]:warn: r0\n"


def test_duplicate_filters_without_a_teed_stream_warn(tmp_path):
    r = ddprun("--duplicate-stdout-filters", "loss", "sh", "-c", "echo loss")
    assert r.returncode == 0 and r.stdout == "loss\n"
    assert warnings(r) == ["ddprun: warning: --duplicate-stdout-filters copies only tee'd "
                           "streams (-t/--tee), as torchrun's does: no stdout is tee'd, "
                           "so no line is copied"]
