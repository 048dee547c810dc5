"""ddpstore, the CLI, against a running `ddpstore serve`: every command, its
output and its documented exit status, waiters across clients, stdin values,
the MASTER_ADDR/MASTER_PORT default, the port file, IPv4 and IPv6."""
import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import REPO, binary
from storeutil import (CAS_FAILED, CONN, DDPSTORE, ERROR, NOT_FOUND, OK, TIMEOUT, USAGE,
                       Server, cli)

# One worker runs the whole module (tests/run.sh: --dist loadgroup): its
# module-scoped fixture, once.
pytestmark = pytest.mark.xdist_group("test_store_cli")


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    assert s.close() == 0


def test_set_then_get_prints_raw_value(srv):
    assert cli(srv.addr, "set", "greeting", "hello world").returncode == OK
    r = cli(srv.addr, "get", "greeting")
    assert r.returncode == OK
    assert r.stdout == b"hello world"  # raw: no newline added


def test_get_of_missing_key_is_not_found(srv):
    r = cli(srv.addr, "get", "no-such-key", text=True)
    assert r.returncode == NOT_FOUND
    assert "not found" in r.stderr and r.stdout == ""


def test_value_dash_reads_stdin_binary_safe(srv):
    blob = bytes(range(256)) * 4000 + b"\0\n\r\xff"
    assert cli(srv.addr, "set", "blob", "-", input=blob).returncode == OK
    r = cli(srv.addr, "get", "blob")
    assert r.returncode == OK and r.stdout == blob


def test_a_value_on_stdin_past_the_limit_names_it(srv):
    """A value of 8 MiB from stdin is sent; one byte more is refused with the
    limit in bytes and MiB, and that the server's --max-value-len does not
    raise it (it said "value too long")."""
    limit = 8 * 1024 * 1024
    assert cli(srv.addr, "set", "big", "-", input=b"x" * limit).returncode == OK
    for args in (["set", "big", "-"], ["append", "big", "-"], ["cas", "big", "", "-"]):
        r = cli(srv.addr, *args, input=b"y" * (limit + 1), text=True)
        assert r.returncode == ERROR and r.stdout == ""
        assert r.stderr == (f"ddpstore: {args[0]}: the value on standard input is longer than "
                            f"{limit} bytes (8 MiB), the most ddpstore sends, whatever the "
                            "server's --max-value-len\n")
    assert cli(srv.addr, "get", "big").stdout == b"x" * limit


def test_add_keeps_decimal_text_and_takes_negatives(srv):
    assert cli(srv.addr, "add", "ctr", "5", text=True).stdout == "5\n"
    assert cli(srv.addr, "add", "ctr", "-7", text=True).stdout == "-2\n"
    assert cli(srv.addr, "get", "ctr").stdout == b"-2"
    r = cli(srv.addr, "add", "ctr", "x", text=True)
    assert r.returncode == USAGE and "not an integer" in r.stderr


def test_add_to_non_integer_value_fails(srv):
    cli(srv.addr, "set", "word", "abc")
    r = cli(srv.addr, "add", "word", "1", text=True)
    assert r.returncode == CONN  # the server drops the connection, as PyTorch's does
    assert "not an integer" in r.stderr
    assert cli(srv.addr, "get", "word").stdout == b"abc"


def test_add_says_why_it_failed(srv):
    """An N beyond int64 is out of range (it read "not an integer"); a sum
    beyond int64 wraps around, as in PyTorch's servers (it closed the
    connection); a value beyond int64 closes the connection, as a value that
    is not a number does, and add reads the value again to say which."""
    r = cli(srv.addr, "add", "ovf", "9223372036854775808", text=True)
    assert r.returncode == USAGE and r.stderr.count("\n") == 1
    assert "'9223372036854775808' is out of range" in r.stderr
    r = cli(srv.addr, "add", "ovf", "-99999999999999999999", text=True)
    assert r.returncode == USAGE and "out of range" in r.stderr
    assert cli(srv.addr, "add", "ovf", "9223372036854775807", text=True).stdout == \
        "9223372036854775807\n"
    r = cli(srv.addr, "add", "ovf", "1", text=True)
    assert r.returncode == OK and r.stdout == "-9223372036854775808\n"
    r = cli(srv.addr, "add", "ovf", "-1", text=True)
    assert r.returncode == OK and r.stdout == "9223372036854775807\n"
    assert cli(srv.addr, "get", "ovf").stdout == b"9223372036854775807"
    cli(srv.addr, "set", "huge", "99999999999999999999")
    r = cli(srv.addr, "add", "huge", "1", text=True)
    assert r.returncode == CONN and "the value of 'huge' is out of the int64 range" in r.stderr


def test_cas_swaps_only_on_expected_value(srv):
    r = cli(srv.addr, "cas", "leader", "", "node-a")
    assert r.returncode == OK and r.stdout == b"node-a"
    r = cli(srv.addr, "cas", "leader", "", "node-b")
    assert r.returncode == CAS_FAILED and r.stdout == b"node-a"
    r = cli(srv.addr, "cas", "leader", "node-a", "node-b")
    assert r.returncode == OK and r.stdout == b"node-b"


def test_check_del_numkeys_append_ping(srv):
    cli(srv.addr, "set", "c1", "x")
    assert cli(srv.addr, "check", "c1").returncode == OK
    assert cli(srv.addr, "check", "c1", "c2").returncode == NOT_FOUND
    n = int(cli(srv.addr, "numkeys").stdout)
    assert cli(srv.addr, "del", "c1").returncode == OK
    assert cli(srv.addr, "del", "c1").returncode == NOT_FOUND
    assert int(cli(srv.addr, "numkeys").stdout) == n - 1
    cli(srv.addr, "append", "log", "ab")
    cli(srv.addr, "append", "log", "cd")
    assert cli(srv.addr, "get", "log").stdout == b"abcd"
    assert cli(srv.addr, "ping").returncode == OK


def test_waiters_across_clients_are_woken_by_one_set(srv):
    waiters = [subprocess.Popen([DDPSTORE, "--addr", srv.addr, "wait", "go", "also",
                                 "--timeout", "60"], stderr=subprocess.PIPE)
               for _ in range(3)]
    cli(srv.addr, "set", "also", "1")
    time.sleep(0.2)
    assert all(w.poll() is None for w in waiters)  # still parked: "go" is missing
    cli(srv.addr, "set", "go", "1")
    for w in waiters:
        assert w.wait(timeout=30) == OK


def test_get_wait_blocks_until_the_key_arrives(srv):
    p = subprocess.Popen([DDPSTORE, "--addr", srv.addr, "get", "late", "--wait"],
                         stdout=subprocess.PIPE)
    time.sleep(0.2)
    assert p.poll() is None
    cli(srv.addr, "set", "late", "finally")
    out, _ = p.communicate(timeout=30)
    assert p.returncode == OK and out == b"finally"


def test_wait_timeout_exit_status(srv):
    r = cli(srv.addr, "wait", "never", "--timeout", "0.2", text=True)
    assert r.returncode == TIMEOUT and "timed out" in r.stderr
    r = cli(srv.addr, "get", "never", "--wait", "--timeout", "0.2")
    assert r.returncode == TIMEOUT


def test_addr_defaults_to_master_addr_and_port(srv):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(srv.port))
    cli(srv.addr, "set", "envkey", "v")
    r = cli(None, "get", "envkey", env=env)
    assert r.returncode == OK and r.stdout == b"v"
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    r = cli(None, "ping", env=env, text=True)
    assert r.returncode == USAGE and "MASTER_ADDR" in r.stderr


def test_prefix_namespaces_keys(srv):
    cli(srv.addr, "--prefix", "job7", "set", "k", "in-job")
    assert cli(srv.addr, "get", "k").returncode == NOT_FOUND
    assert cli(srv.addr, "get", "job7/k").stdout == b"in-job"


@pytest.mark.parametrize("args,needle", [
    ([], "no command"),
    (["frobnicate"], "unknown command"),
    (["get"], "wrong number"),
    (["set", "k"], "wrong number"),
    (["ping", "--bogus"], "unknown option"),
    (["ping", "--timeout", "soon"], "bad value 'soon' for --timeout (a number of seconds from 0 "
                                    "to 1000000000)"),
    (["ping", "--timeout", "1e12"], "bad value '1e12' for --timeout (out of range: a number of "
                                    "seconds from 0 to 1000000000)"),
    (["ping", "--connect-timeout", "-1"], "--connect-timeout (a number of seconds"),
    (["ping", "--port", "5"], "serve only"),
    (["set", "k", "v", "--wait"], "--wait"),
    (["keys", "a", "b"], "wrong number"),
    (["barrier", "k"], "wrong number"),
    (["barrier", "k", "0"], "not a positive integer"),
    (["barrier", "k", "two"], "not a positive integer"),
])
def test_usage_errors_exit_2_with_one_line(srv, args, needle):
    r = cli(srv.addr, *args, text=True)
    assert r.returncode == USAGE
    assert needle in r.stderr and r.stderr.count("\n") == 1


def test_connection_failure_exit_status():
    with socket.socket() as s:  # bound, not listening: refused, and no other test's meanwhile
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = cli(f"127.0.0.1:{port}", "ping", "--connect-timeout", "0.3", text=True)
    assert r.returncode == CONN and "connection refused" in r.stderr


def test_help_and_version():
    assert cli(None, "--help").returncode == OK
    r = cli(None, "--version", text=True)
    assert r.returncode == OK and r.stdout.startswith("ddpstore ")


def to_full(*args):
    """ddpstore args with its standard output on /dev/full (a full disk)."""
    with open("/dev/full", "wb") as full:
        return subprocess.run([DDPSTORE, *args], stdout=full, stderr=subprocess.PIPE,
                              timeout=30, text=True)


FULL = "ddpstore: cannot write to standard output: No space left on device\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--version"], ["ping", "--help"]])
def test_help_and_version_that_cannot_be_written_fail(args):
    # They exited 0, the text lost in silence.
    r = to_full(*args)
    assert r.returncode == ERROR and r.stderr == FULL


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_output_that_cannot_be_written_fails(srv):
    """Every command that prints says a write that fails, exit 1 where it
    would succeed (add, numkeys and keys exited 0); a status of its own
    stays (cas's mismatch, status's not found)."""
    assert cli(srv.addr, "set", "full", "v").returncode == OK
    for args in (["get", "full"], ["add", "full-ctr", "1"], ["numkeys"], ["keys"],
                 ["cas", "full", "v", "w"]):
        r = to_full("--addr", srv.addr, *args)
        assert r.returncode == ERROR and r.stderr == FULL, (args, r.stderr)
    r = to_full("--addr", srv.addr, "cas", "full", "v", "x")
    assert r.returncode == CAS_FAILED and r.stderr == FULL
    r = to_full("--addr", srv.addr, "status", "--rdzv-id", "no-such-run")
    assert r.returncode == NOT_FOUND and r.stderr.endswith(FULL)


def test_port_file_holds_the_chosen_port(srv):
    with open(srv.port_file) as f:
        text = f.read()
    assert text == f"{srv.port}\n"
    assert not [n for n in os.listdir(srv.dir) if ".tmp." in n]


def test_listens_on_ipv4_and_ipv6_on_one_port():
    s = Server(host="127.0.0.1,::1")  # loopback only; the default is every interface
    try:
        assert cli(f"127.0.0.1:{s.port}", "set", "fam", "both").returncode == OK
        r = cli(f"[::1]:{s.port}", "get", "fam")
        assert r.returncode == OK and r.stdout == b"both"
    finally:
        assert s.close() == 0


def test_ipv6_only_host():
    s = Server(host="::1")
    try:
        assert cli(f"[::1]:{s.port}", "set", "v6", "yes").returncode == OK
        r = cli(f"127.0.0.1:{s.port}", "ping", "--connect-timeout", "0.2")
        assert r.returncode == CONN
    finally:
        assert s.close() == 0


def test_serve_exits_0_on_sigterm():
    s = Server()
    assert cli(s.addr, "ping").returncode == OK
    assert s.stop() == 0


@pytest.mark.parametrize("host,needle", [
    ("", "--host is empty (leave it out to listen on every interface"),
    ("127.0.0.1,,::1", "bad value '127.0.0.1,,::1' for --host (an empty item in the list"),
    (",127.0.0.1", "an empty item in the list"),
    ("127.0.0.1,", "an empty item in the list"),
])
def test_serve_empty_host_is_a_usage_error(host, needle):
    """An empty --host, or an empty item of a list, is a usage error (it
    listened on every interface, "serving on  port N", or passed the item
    over in silence)."""
    r = subprocess.run([DDPSTORE, "serve", "--host", host, "--port", "0"],
                       stderr=subprocess.PIPE, timeout=30, text=True)
    assert r.returncode == USAGE, r.stderr
    assert needle in r.stderr and r.stderr.count("\n") == 1


def test_serve_host_that_does_not_resolve_is_named():
    """A --host name that does not resolve says so, naming it (it read "host
    is unreachable"). The names are ones the resolver refuses without a query
    (an empty label, a leading hyphen), looked up, where this machine can, in
    a network namespace with no route out, so nothing leaves the machine."""
    wrap = (["unshare", "-n"] if os.geteuid() == 0 and shutil.which("unshare") else [])
    for host, bad in (("bad..name", "bad..name"), ("127.0.0.1,-bad", "-bad")):
        r = subprocess.run(wrap + [DDPSTORE, "serve", "--host", host, "--port", "0"],
                           stderr=subprocess.PIPE, timeout=30, text=True)
        assert r.returncode == 1, r.stderr
        assert f"the name '{bad}' does not resolve" in r.stderr, r.stderr
        assert "unreachable" not in r.stderr and r.stderr.count("\n") == 1


def test_a_client_address_that_does_not_resolve_is_named_with_the_reason():
    """A name that does not resolve is said at once, retried for
    --connect-timeout, and the last error (exit 5) names it with the
    resolver's reason (it waited in silence, then said "host not found or
    unreachable"). Looked up as above: nothing leaves the machine."""
    wrap = (["unshare", "-n"] if os.geteuid() == 0 and shutil.which("unshare") else [])
    r = subprocess.run(wrap + [DDPSTORE, "--addr", "bad..name:29500", "--connect-timeout", "1",
                               "ping"], stderr=subprocess.PIPE, timeout=60, text=True)
    assert r.returncode == CONN, r.stderr
    first, last = r.stderr.splitlines()
    assert first.startswith("ddpstore: the name 'bad..name' does not resolve yet ("), first
    assert first.endswith("): retrying for up to 1 s (--connect-timeout)"), first
    assert last.startswith("ddpstore: cannot connect to bad..name:29500: the name "
                           "'bad..name' does not resolve ("), last


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root: a network namespace of its own")
def test_a_client_that_reaches_itself_leaves_the_port_free(tmp_path):
    """A connection to a port of this host where nothing listens can take
    that port as its own source, when it is in the ephemeral range, and so
    reach itself. Such a socket closed normally sat in TIME_WAIT for a
    minute, and the store's host could not bind the port ('in use'). In a
    network namespace of the test's own whose only ephemeral port is the
    store's, every try does so: the blocking client's (ddpstore) and the
    event loop's (a waiting node's ddprun)."""
    port = 40123
    script = f"""
ip link set lo up
echo "{port} {port}" > /proc/sys/net/ipv4/ip_local_port_range
{DDPSTORE} --addr 127.0.0.1:{port} --connect-timeout 1 ping 2> {tmp_path}/ping
echo "ping $?"
{binary("ddprun")} --nnodes 2 --node-rank 1 --master-port {port} --rdzv-conf join_timeout=1 \\
    true 2> {tmp_path}/node1
echo "node1 $?"
echo "time-wait $(ss -Htan state time-wait | wc -l)"
timeout 2 {DDPSTORE} serve --host 127.0.0.1 --port {port}
echo "serve $?"
"""
    r = subprocess.run(["unshare", "-n", "sh", "-c", script], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=90, text=True)
    out = r.stdout + r.stderr + (tmp_path / "ping").read_text() + (tmp_path / "node1").read_text()
    assert "ping 5\n" in r.stdout, out
    assert "connection refused" in (tmp_path / "ping").read_text(), out
    assert "node1 1\n" in r.stdout, out
    assert "time-wait 0\n" in r.stdout, out
    # The port is free: the server listens until its timeout ends it.
    assert "serve 124\n" in r.stdout, out
    assert f"serving on 127.0.0.1 port {port}" in r.stderr and "in use" not in out, out


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root: a mount and network namespace of its own")
def test_a_server_whose_name_comes_once_it_starts_is_reached(tmp_path):
    """A server's name that resolves only once it starts (a Kubernetes pod's):
    the client retries the name within --connect-timeout, as PyTorch's does,
    and reaches it. In namespaces of its own: the name is in a hosts file of
    the test's, the only source (nsswitch "files"), so nothing is asked of
    any resolver."""
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    (tmp_path / "nsswitch.conf").write_text("hosts: files\n")
    script = f"""
set -e
mount --bind {tmp_path}/hosts /etc/hosts
mount --bind {tmp_path}/nsswitch.conf /etc/nsswitch.conf
ip link set lo up
{DDPSTORE} --addr master-0.test:29577 --connect-timeout 30 ping > {tmp_path}/out 2>&1 &
client=$!
i=0; until grep -q "does not resolve yet" {tmp_path}/out || [ $i -ge 300 ]; do sleep 0.05; i=$((i+1)); done
echo "127.0.0.1 master-0.test" >> /etc/hosts
timeout 60 {DDPSTORE} serve --host 127.0.0.1 --port 29577 --quiet &
server=$!
rc=0; wait $client || rc=$?
kill $server; wait $server || true
exit $rc
"""
    r = subprocess.run(["unshare", "-m", "-n", "--propagation", "private", "sh", "-c", script],
                       stderr=subprocess.PIPE, timeout=90, text=True)
    out = (tmp_path / "out").read_text()
    assert r.returncode == 0, r.stderr + out
    assert "the name 'master-0.test' does not resolve yet" in out, out


@pytest.mark.parametrize("args,needle", [
    (["--max-value-len", "1"], "bad value '1' for --max-value-len (out of range: a number from 65536 "
                               "to 1073741824)"),
    (["--max-value-len", "65535"], "out of range"),
    (["--max-value-len", "1073741825"], "out of range"),
    (["--max-value-len", "99999999999999"], "out of range"),
    (["--max-value-len", "8M"], "bad value '8M' for --max-value-len (a number"),
    (["--max-conn-buffer", "99999999999999"], "bad value '99999999999999' for "
                                              "--max-conn-buffer (out of range"),
    (["--max-conn-buffer", "0"], "out of range"),
    # a request that carries the longest key and value must fit
    (["--max-conn-buffer", "1"], "--max-conn-buffer 1 cannot hold a SET of the longest "
                                 "key and value (8192 + 8388608 bytes, and 17 of framing): "
                                 "give at least 8396817"),
    (["--max-conn-buffer", "8396816"], "give at least 8396817"),
    (["--max-value-len", "65536", "--max-key-len", "100", "--max-conn-buffer", "65652"],
     "give at least 65653"),
    (["--max-conns", "1000001"], "--max-conns (out of range: a number from 1 to 1000000)"),
    (["--port", "70000"], "bad value '70000' for --port (out of range: a port from 0 to 65535)"),
    (["--port", "http"], "bad value 'http' for --port (a port from 0 to 65535)"),
])
def test_serve_limits_have_bounds(args, needle):
    r = subprocess.run([DDPSTORE, "serve", "--host", "127.0.0.1", "--port", "0", *args],
                       stderr=subprocess.PIPE, timeout=30, text=True)
    assert r.returncode == USAGE, r.stderr
    assert needle in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("port", ["29500abc", "70000", "-1", " 29500", "0x10"])
def test_serve_bad_master_port_is_refused(port):
    # $MASTER_PORT is read as strictly as --port: sscanf once took "29500abc"
    # as 29500 and served there.
    env = dict(os.environ, MASTER_PORT=port)
    r = subprocess.run([DDPSTORE, "serve", "--host", "127.0.0.1"], env=env,
                       stderr=subprocess.PIPE, timeout=30, text=True)
    assert r.returncode == USAGE, r.stderr
    assert f"bad MASTER_PORT '{port}'" in r.stderr and r.stderr.count("\n") == 1


def test_serve_limits_at_their_bounds_serve():
    for args in (["--max-value-len", "65536", "--max-key-len", "100", "--max-conn-buffer",
                  "65653"],
                 ["--max-conn-buffer", "8396817"],
                 ["--max-value-len", "1073741824", "--max-conn-buffer", "4294967296",
                  "--max-conns", "1000000"]):
        s = Server(*args)
        try:
            assert cli(s.addr, "ping").returncode == OK
        finally:
            assert s.close() == 0


def test_serve_port_in_use_is_a_clear_error():
    s = Server()
    try:
        r = subprocess.run([DDPSTORE, "serve", "--host", "127.0.0.1", "--port", str(s.port)],
                           stderr=subprocess.PIPE, timeout=30, text=True)
        assert r.returncode == 1
        assert "cannot listen" in r.stderr and r.stderr.count("\n") == 1
    finally:
        assert s.close() == 0


def test_keys_lists_value_keys_one_per_line_sorted():
    sv = Server()
    try:
        r = cli(sv.addr, "keys", text=True)
        assert r.returncode == OK and r.stdout == ""
        for k in ("job/b", "job/a", "other", "jobless"):
            assert cli(sv.addr, "set", k, "v").returncode == OK
        assert cli(sv.addr, "add", "job/count", "1").returncode == OK
        r = cli(sv.addr, "keys", text=True)
        assert r.returncode == OK
        assert r.stdout == "job/a\njob/b\njob/count\njobless\nother\n"
        # A PREFIX argument filters; --prefix is the PrefixStore view.
        assert cli(sv.addr, "keys", "job/", text=True).stdout == "job/a\njob/b\njob/count\n"
        assert cli(sv.addr, "--prefix", "job", "keys", text=True).stdout == "a\nb\ncount\n"
        assert cli(sv.addr, "keys", "nothing-here", text=True).stdout == ""
    finally:
        assert sv.close() == 0


def test_barrier_returns_when_n_have_arrived(srv):
    first = [subprocess.Popen([DDPSTORE, "--addr", srv.addr, "barrier", "stage1", "3",
                               "--timeout", "60"], stderr=subprocess.PIPE)
             for _ in range(2)]
    # Both arrivals are counted (the counter is a decimal value) and parked.
    deadline = time.monotonic() + 30
    while cli(srv.addr, "get", "stage1").stdout != b"2":
        assert time.monotonic() < deadline, "the two arrivals were not counted"
        time.sleep(0.05)
    assert all(p.poll() is None for p in first)
    assert cli(srv.addr, "barrier", "stage1", "3").returncode == OK
    for p in first:
        assert p.wait(timeout=30) == OK
    assert cli(srv.addr, "get", "stage1").stdout == b"3"


def test_barrier_timeout_says_how_many_arrived(srv):
    r = cli(srv.addr, "barrier", "lonely", "4", "--timeout", "0.2", text=True)
    assert r.returncode == TIMEOUT
    assert r.stderr == "ddpstore: barrier: timed out with 1 of 4 arrived\n"


def test_barrier_on_a_non_counter_fails(srv):
    cli(srv.addr, "set", "word2", "abc")
    r = cli(srv.addr, "barrier", "word2", "2", text=True)
    assert r.returncode == CONN, r.stderr
    assert r.stderr == ("ddpstore: barrier: the server closed the connection: the value of "
                        "'word2' is not an integer\n")


def test_a_barrier_whose_server_ends_says_so():
    """The server ends while a barrier waits: the connection closes as it
    does for a value that is no counter, and a second connection (3 s at
    most) tells the two apart. It blamed the value."""
    s = Server()
    p = subprocess.Popen([DDPSTORE, "--addr", s.addr, "barrier", "gate", "2"],
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while cli(s.addr, "get", "gate").stdout != b"1":
            assert time.monotonic() < deadline and p.poll() is None, "barrier did not arrive"
            time.sleep(0.02)
        assert s.close() == 0, s.log()
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == CONN, err
    assert err == (f"ddpstore: barrier: the server at {s.addr} closed the connection and "
                   "refuses a new one: has it ended?\n"), err


def with_hosts(tmp_path, text, cmd):
    """cmd run where /etc/hosts reads text: in a mount namespace of its own,
    so the machine's file is never touched."""
    hosts = tmp_path / "hosts"
    hosts.write_text(text)
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *cmd]


@contextlib.contextmanager
def silent_port(addr, port):
    """A listener at addr:port whose queue is full (one connection it never
    accepts): the kernel drops further connections to it, which get no
    answer."""
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as held:
        if fam == socket.AF_INET6:
            held.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        held.bind((addr, port))
        held.listen(0)
        with socket.create_connection((addr, port), timeout=5):  # the queue's one place
            yield


def served_with_silent_twin(serving, silent):
    """A Server at serving and, at silent on the same port, silent_port
    (entered): (server, an ExitStack that leaves it). The port is the server's pick for its
    own family; where another program holds it on the other family, a new
    server picks again (a bounded few times)."""
    for _ in range(5):
        s = Server(host=serving)
        twin = contextlib.ExitStack()
        try:
            twin.enter_context(silent_port(silent, s.port))
        except OSError as e:
            assert s.close() == 0
            if e.errno != errno.EADDRINUSE:
                raise
            continue
        return s, twin
    pytest.fail(f"no port free on both {serving} and {silent} in 5 tries")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1): a mount namespace with its own /etc/hosts")
@pytest.mark.parametrize("serving,silent", [("127.0.0.1", "::1"), ("::1", "127.0.0.1")])
def test_a_name_with_two_addresses_reaches_the_one_that_serves(tmp_path, serving, silent):
    """A dual-stack name (an IPv6 and an IPv4 address) whose store listens on
    one of them, the other's port held by a listener whose queue is full (the
    kernel drops connections to it: no answer). Every address is tried, a
    silent one for a bounded while, whichever the resolver puts first. Until
    2026-12-05 the client tried only the first address, to the end of its
    connect timeout."""
    s, twin = served_with_silent_twin(serving, silent)
    try:
        with twin:
            r = subprocess.run(with_hosts(tmp_path, "::1 dual\n127.0.0.1 dual\n",
                                          [DDPSTORE, "--addr", f"dual:{s.port}",
                                           "--connect-timeout", "30", "ping"]),
                               capture_output=True, text=True, timeout=90)
    finally:
        assert s.close() == 0
    assert r.returncode == OK, r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1): a mount namespace with its own /etc/hosts")
@pytest.mark.parametrize("serving,silent", [("127.0.0.1", "::1"), ("::1", "127.0.0.1")])
def test_the_launcher_reaches_a_store_at_a_name_with_two_addresses(tmp_path, serving, silent):
    """The same for ddprun's own client (libuv): node 1 of a static
    rendezvous whose --master-addr is the dual-stack name, a silent address
    first or second. It has reached the store once it counts the nodes there
    ("1 of 2 joined"); node 0 never comes, and ddprun is stopped by pid."""
    s, twin = served_with_silent_twin(serving, silent)
    p = None
    err = b""
    try:
        with twin:
            p = subprocess.Popen(with_hosts(tmp_path, "::1 dual\n127.0.0.1 dual\n",
                                            [binary("ddprun"), "--nnodes", "2",
                                             "--node-rank", "1", "--master-addr", "dual",
                                             "--master-port", str(s.port),
                                             "--nproc-per-node", "1", "/bin/true"]),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            os.set_blocking(p.stderr.fileno(), False)
            deadline = time.monotonic() + 60
            while (b"1 of 2 joined" not in err and p.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.1)
                err += p.stderr.read() or b""
    finally:
        if p:
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()  # never left behind
                p.wait(timeout=10)
            err += p.stderr.read() or b""
        assert s.close() == 0
    assert b"ddprun: waiting for nodes: 1 of 2 joined" in err, err.decode(errors="replace")


def run_example(tmp_path, script):
    """Run a documentation example in sh, in tmp_path, with ddpstore on PATH;
    only /tmp/port becomes a file of tmp_path (tests run side by side). The
    example leaves its server in the background: it is stopped by its
    process group, the example's own."""
    script = script.replace("/tmp/port", str(tmp_path / "port"))
    env = dict(os.environ, PATH=f"{os.path.dirname(DDPSTORE)}:{os.environ['PATH']}")
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    out, err = tmp_path / "stdout", tmp_path / "stderr"  # files: the server holds pipes open
    with open(out, "wb") as o, open(err, "wb") as e:
        p = subprocess.Popen(["sh", "-ec", script], cwd=tmp_path, env=env, stdout=o,
                             stderr=e, start_new_session=True)
        try:
            p.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=10)
    return p.returncode, out.read_text(), err.read_text()


def test_the_readme_store_example_runs_as_written(tmp_path):
    """The README's ddpstore block, pasted into a shell: it read the port file
    before the server had written it (cat: no such file), and its cas printed
    the stored host name before "I lead"."""
    readme = open(os.path.join(REPO, "README.md")).read()
    blocks = [b.split("```", 1)[0] for b in readme.split("```sh\n")[1:]]
    [example] = [b for b in blocks if "ddpstore serve --port 0" in b]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x").write_bytes(b"y" * 1000)
    rc, out, err = run_example(tmp_path, example)
    assert rc == 0, err
    assert out == "1\nI lead\n"
    assert (tmp_path / "data.tar").stat().st_size >= 1000


def test_the_man_page_store_examples_run_as_written(tmp_path):
    """ddpstore(1)'s EXAMPLES, one after the other in one shell: the first read
    the port file before the server had written it."""
    man = open(os.path.join(REPO, "man", "ddpstore.1")).read().split(".SH EXAMPLES", 1)[1]
    blocks = [b.split(".EE", 1)[0].replace("\\-", "-") for b in man.split(".EX\n")[1:]]
    assert len(blocks) == 2 and "ddpstore serve --port 0" in blocks[0]
    rc, out, err = run_example(tmp_path, "".join(blocks))
    assert rc == 0, err
    assert out == "yesI lead\n"  # get prints the raw value, no newline added
