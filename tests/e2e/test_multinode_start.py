"""Before the first round: a store host name that does not resolve is named
with the reason (looked up only inside a network namespace of the test's own
with nothing but loopback, so no resolver is reachable and the machine's DNS
is never asked), a master port that another process holds for the family of
--master-addr is "in use", and a node rank 0 started twice ends both with 2."""
import os
import random
import shutil
import socket

import pytest

from conftest import free_port
from mnutil import (Agent, clean_env, enter, ip, ipv6_loopback, listening, node_args, wait_for,
                    wait_stderr)

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
