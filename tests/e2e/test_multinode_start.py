"""Before the first round: a store host name that does not resolve is named
with the reason (looked up only inside a network namespace of the test's own
with nothing but loopback, so no resolver is reachable and the machine's DNS
is never asked; a temporary failure is retried for join_timeout, one node's
too), a master port that another process holds for the family of
--master-addr is "in use", and a node rank 0 started twice ends both with 2."""
import os
import random
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from conftest import binary, free_port
from mnutil import (Agent, clean_env, enter, ip, ipv6_loopback, listening, node_args, wait_for,
                    wait_stderr)
from storeutil import Server, cli

BAD_HOST = "no-such-host.invalid"


@pytest.fixture
def no_route_ns():
    """A network namespace with only lo up (created and removed here)."""
    ns = f"ddpres{os.getpid() % 10000}{random.randrange(100000)}"
    r = ip("netns", "add", ns)
    if r.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {r.stderr.strip()}")
    try:
        r = ip("link", "set", "lo", "up", ns=ns)
        assert r.returncode == 0, r.stderr
        yield ns
    finally:
        ip("netns", "del", ns)


def test_an_unresolvable_master_addr_is_named_with_the_reason(reaper, tmp_path, no_route_ns):
    args = ["--nnodes", "2", "--node-rank", "1", "--master-addr", BAD_HOST, "--master-port",
            "29500", "--rdzv-conf", "join_timeout=2", "true"]
    a = Agent(reaper, tmp_path, "node1", args, prefix=enter(no_route_ns))
    # No resolver answers in there: a temporary failure, retried for join_timeout.
    wait_stderr(a, f"cannot resolve {BAD_HOST} (--master-addr) yet: Temporary failure in name "
                   "resolution; retrying")
    assert a.wait() == 1, a.stderr()
    assert (f"error: cannot resolve the rendezvous store's host {BAD_HOST} (--master-addr): "
            "Temporary failure in name resolution, for 2 s (join_timeout)") in a.stderr()


def test_one_node_whose_master_addr_does_not_resolve_says_so_with_the_reason(reaper,
                                                                            tmp_path):
    """One node hosts its store at --master-addr: a name the resolver
    refuses (an empty label: no query) is named as on several nodes, with
    the resolver's reason (it said "cannot listen on ...: host not found or
    unreachable"). Where this machine can, looked up with no network at all."""
    wrap = ["unshare", "-n"] if os.geteuid() == 0 and shutil.which("unshare") else []
    a = Agent(reaper, tmp_path, "single", ["--master-addr", "bad..name", "--master-port",
                                           "29500", "true"], prefix=wrap)
    assert a.wait() == 1, a.stderr()
    assert a.stderr().startswith("ddprun: error: cannot resolve the rendezvous store's host "
                                 "bad..name (--master-addr): "), a.stderr()
    assert "unreachable" not in a.stderr(), a.stderr()


def test_one_node_retries_a_master_addr_whose_lookup_fails_for_now(reaper, tmp_path,
                                                                   no_route_ns):
    """One node hosts its store at --master-addr: a temporary failure (no
    resolver answers in there) is tried again for join_timeout, as on several
    nodes (it ended the job at once), and said at once."""
    a = Agent(reaper, tmp_path, "single", ["--master-addr", BAD_HOST, "--rdzv-conf",
                                           "join_timeout=2", "true"],
              prefix=enter(no_route_ns))
    assert a.wait() == 1, a.stderr()
    what = f"cannot resolve the rendezvous store's host {BAD_HOST} (--master-addr)"
    assert a.stderr() == (f"ddprun: {what}: Temporary failure in name resolution; retrying for "
                          "up to 2 s (join_timeout)\n"
                          f"ddprun: error: {what}: Temporary failure in name resolution, for "
                          "2 s (join_timeout)\n"), a.stderr()


def test_a_stop_signal_while_one_node_retries_its_store_host_ends_it(reaper, tmp_path,
                                                                      no_route_ns):
    a = Agent(reaper, tmp_path, "single", ["--master-addr", BAD_HOST, "true"],
              prefix=enter(no_route_ns))
    wait_stderr(a, "retrying for up to 600 s (join_timeout)")
    a.signal(signal.SIGTERM)
    assert a.wait() == 143, a.stderr()
    assert "received SIGTERM" in a.stderr(), a.stderr()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root: a mount and network namespace of its own")
def test_one_node_finds_a_master_addr_that_resolves_later(tmp_path):
    """The name comes while ddprun retries (a DNS server back, a pod's name
    published), and the job runs. In mount and network namespaces of the
    test's own: a hosts file of its own, then DNS at 127.0.0.1 there, where
    nothing answers (a temporary failure); no query leaves them."""
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    (tmp_path / "nsswitch.conf").write_text("hosts: files dns\n")
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    script = f"""
set -e
for f in hosts nsswitch.conf resolv.conf; do mount --bind {tmp_path}/$f /etc/$f; done
ip link set lo up
{binary("ddprun")} --master-addr master-0.test --rdzv-conf join_timeout=60 \\
    sh -c 'echo "$MASTER_ADDR"' > {tmp_path}/out 2> {tmp_path}/err &
job=$!
i=0
until grep -qs retrying {tmp_path}/err || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done
echo "127.0.0.1 master-0.test" >> /etc/hosts
rc=0; wait $job || rc=$?
exit $rc
"""
    r = subprocess.run(["unshare", "-m", "-n", "--propagation", "private", "sh", "-c", script],
                       stderr=subprocess.PIPE, timeout=90, text=True)
    err = (tmp_path / "err").read_text()
    assert r.returncode == 0, r.stderr + err
    assert ("cannot resolve the rendezvous store's host master-0.test (--master-addr): Temporary "
            "failure in name resolution; retrying") in err, err
    assert (tmp_path / "out").read_text() == "127.0.0.1\n"


def test_an_unresolvable_first_slurm_node_is_named(reaper, tmp_path, no_route_ns):
    env = clean_env(SLURM_JOB_ID="7", SLURM_STEP_ID="0", SLURM_NNODES="2", SLURM_NODEID="1",
                    SLURM_JOB_NODELIST=f"{BAD_HOST},other")
    a = Agent(reaper, tmp_path, "node1", ["--rdzv-conf", "join_timeout=1", "true"], env=env,
              prefix=enter(no_route_ns))
    assert a.wait() == 1, a.stderr()
    assert (f"cannot resolve the rendezvous store's host {BAD_HOST} (Slurm's first node of "
            "SLURM_JOB_NODELIST") in a.stderr()


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 here: no family to fall back to")
def test_a_master_port_held_for_ipv4_by_another_process_is_in_use(reaper, tmp_path):
    with socket.socket(socket.AF_INET) as s:
        s.bind(("0.0.0.0", 0))
        s.listen(8)  # accepts connections, never answers
        port = s.getsockname()[1]
        a = Agent(reaper, tmp_path, "node0", node_args(2, 0, port, 1, "true"))
        assert a.wait() == 1, a.stderr()
    assert (f"cannot listen on port {port} for the rendezvous store: the port is in use for "
            "IPv4, the family of --master-addr 127.0.0.1") in a.stderr()


@pytest.mark.parametrize("held", ["bare-store", "jobs-met", "c10d-job", "node-1-waits"])
def test_a_master_port_held_by_a_store_without_this_node_0_is_said_so(reaper, tmp_path, held):
    """A ddpstore serve with no job on it holds node 0's port: it said "the
    rendezvous store of another job" and wrote this run id's round 0 closed
    into it, so a later job of that id on the store would find it closed. It
    says what it knows, and writes there only where ddprun jobs met
    (ddprun/runs/n), for this job's nodes that may wait there or be on
    their way, but not where a c10d job of this run id meets: that job
    ended with node 0's "cannot listen"."""
    srv = Server(host=None)
    try:
        node1 = None
        if held != "bare-store":
            assert cli(srv.addr, "add", "ddprun/runs/n", "1").returncode == 0
        if held == "c10d-job":
            assert cli(srv.addr, "set", "ddprun/none/config",
                       '{"backend":"c10d","nnodes":"1:2","max_restarts":0,"version":"0",'
                       '"node_rank":-1,"host":"x"}').returncode == 0
        if held == "node-1-waits":
            node1 = Agent(reaper, tmp_path, "node1", node_args(2, 1, srv.port, 1, "true"))
            wait_for(lambda: cli(srv.addr, "get", "ddprun/none/config").returncode == 0,
                     what="node 1's settings in the store")
        a = Agent(reaper, tmp_path, "node0", node_args(2, 0, srv.port, 1, "true"))
        assert a.wait() == 1, a.stderr()
        msg = f"cannot listen on port {srv.port} for the rendezvous store"
        assert msg in a.stderr()
        assert "(by a store that holds no node 0 of --rdzv-id none" in a.stderr()
        closed = cli(srv.addr, "get", "ddprun/none/r0/closed")
        if held == "bare-store":
            assert (", nor any ddprun job: a ddpstore serve, or another program's store)"
                    in a.stderr())
            r = cli(srv.addr, "numkeys")
            assert r.returncode == 0 and r.stdout.strip() == b"0", r.stdout
        else:
            assert (": another job's rendezvous store, another --rdzv-id, or a ddpstore serve "
                    "that jobs share)" in a.stderr())
        if held in ("jobs-met", "node-1-waits"):
            assert closed.stdout.startswith(b"error:")
        if held == "node-1-waits":
            assert node1.wait() == 1, node1.stderr()
            assert msg in node1.stderr()
        if held == "c10d-job":
            assert closed.returncode != 0 and closed.stdout == b"", closed
        assert "another job, another --rdzv-id" not in a.stderr()
    finally:
        assert srv.close() == 0


def test_node_rank_0_started_twice_ends_both_with_2(reaper, tmp_path):
    port = free_port()
    first = Agent(reaper, tmp_path, "first", node_args(2, 0, port, 1, "true"))
    wait_for(lambda: listening(port), what="the first node 0's store")
    second = Agent(reaper, tmp_path, "second", node_args(2, 0, port, 1, "true"))
    for a in (second, first):
        assert a.wait() == 2, a.stderr()
        assert "node rank 0 is claimed twice" in a.stderr()
        assert f"whose store holds port {port}" in a.stderr()


def test_an_unresolvable_rdzv_endpoint_is_named(reaper, tmp_path, no_route_ns):
    args = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{BAD_HOST}:29400",
            "--rdzv-conf", "join_timeout=1", "true"]
    a = Agent(reaper, tmp_path, "node", args, prefix=enter(no_route_ns))
    assert a.wait() == 1, a.stderr()
    assert (f"cannot resolve the rendezvous store's host {BAD_HOST} (--rdzv-endpoint): "
            "Temporary failure in name resolution") in a.stderr()


def test_a_program_that_accepts_on_the_store_port_without_answering_is_said(reaper, tmp_path):
    """Node 1 finds something on --master-port that takes its connection and
    never answers (another program on the port): it said only "nothing
    answers there yet", then "timed out"."""
    with socket.socket(socket.AF_INET) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # the kernel accepts; nothing ever answers
        port = s.getsockname()[1]
        a = Agent(reaper, tmp_path, "node1",
                  ["--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
                   "--master-port", str(port), "--rdzv-conf", "join_timeout=7", "true"])
        assert a.wait(timeout=60) == 1, a.stderr()
    err = a.stderr()
    hint = "something there accepts connections but does not answer as a store"
    assert f"nothing answers there yet: {hint}" in err, err
    assert f"within 7 s: timed out; {hint} (another program on that port?)\n" in err, err


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root: a mount and network namespace of its own")
@pytest.mark.parametrize("nodes", [
    [],
    ["--nnodes", "2", "--node-rank", "1", "--master-port", "29500"],
    ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "master-0.test:29400"],
], ids=["one-node", "static-node-1", "c10d"])
def test_a_signal_ends_ddprun_during_a_slow_store_host_lookup(tmp_path, nodes):
    """A resolver that takes its time (here a DNS server of the test's own
    that never answers, 30 s a try, twice; the SIGTERM comes once the
    lookup has asked it): one node looked --master-addr
    up in its event loop, so a SIGTERM went unheard until the try ended;
    and on every kind of job the exit waited for the try (libuv's thread
    pool cannot drop a call under way). Now the lookup's thread is left to
    end alone: ddprun ends long before the resolver would (no timing is
    asserted beyond that order; the wait for it is bounded at 30 s, then
    SIGKILL). In mount and network namespaces of the test's own."""
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    (tmp_path / "nsswitch.conf").write_text("hosts: files dns\n")
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:30 attempts:2\n")
    (tmp_path / "dns.py").write_text(
        "import socket, time\n"
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 53))\n"
        "open(__file__ + '.up', 'w').close(); u.recvfrom(512)\n"
        "open(__file__ + '.asked', 'w').close(); time.sleep(120)\n")
    args = " ".join(nodes) if nodes else "--master-addr master-0.test"
    if nodes and nodes[0] == "--nnodes" and "c10d" not in nodes:
        args += " --master-addr master-0.test"
    script = f"""
for f in hosts nsswitch.conf resolv.conf; do mount --bind {tmp_path}/$f /etc/$f; done
ip link set lo up
{sys.executable} {tmp_path}/dns.py & dns=$!
i=0; until [ -e {tmp_path}/dns.py.up ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i+1)); done
{binary("ddprun")} {args} true 2> {tmp_path}/err & job=$!
i=0; until [ -e {tmp_path}/dns.py.asked ] || [ $i -ge 300 ]; do sleep 0.05; i=$((i+1)); done
kill -TERM $job
i=0; while kill -0 $job 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
kill -0 $job 2>/dev/null && echo "still running" && kill -KILL $job
rc=0; wait $job || rc=$?
echo "rc $rc"
kill $dns
"""
    r = subprocess.run(["unshare", "-m", "-n", "--propagation", "private", "sh", "-c", script],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=90, text=True)
    err = (tmp_path / "err").read_text()
    assert "still running" not in r.stdout, r.stdout + err
    assert "rc 143\n" in r.stdout, r.stdout + r.stderr + err
    assert "ddprun: received SIGTERM: stopping" in err, err
    if not nodes:
        assert err == "ddprun: received SIGTERM: stopping (no worker is running)\n", err


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root: a mount and network namespace of its own")
def test_one_node_listens_on_every_address_its_store_host_has(tmp_path):
    """--master-addr a name of two addresses, one inside the other as text
    (127.0.0.1, 27.0.0.1, the first sorted first): the store listens on both
    (a repeat was found by substring, so the second was passed over). In
    mount and network namespaces of the test's own, from a hosts file of its
    own, with 27.0.0.1 on their loopback."""
    (tmp_path / "hosts").write_text("127.0.0.1 master-0.test\n27.0.0.1 master-0.test\n")
    (tmp_path / "nsswitch.conf").write_text("hosts: files\n")
    script = f"""
for f in hosts nsswitch.conf; do mount --bind {tmp_path}/$f /etc/$f; done
ip link set lo up
ip addr add 27.0.0.1/32 dev lo
{binary("ddprun")} --master-addr master-0.test sh -c \\
    'ss -Htln "sport = :$MASTER_PORT" | sort'
"""
    r = subprocess.run(["unshare", "-m", "-n", "--propagation", "private", "sh", "-c", script],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    listening = [line.split()[3].rsplit(":", 1)[0] for line in r.stdout.splitlines()]
    assert sorted(listening) == ["127.0.0.1", "27.0.0.1"], r.stdout + r.stderr
