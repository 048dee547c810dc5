"""Two nodes that really have different addresses: each agent runs in its own
network namespace, joined by a veth pair (created and removed here; skipped,
saying why, only where namespaces cannot be created). The workers get a
MASTER_ADDR the other node can reach, and use it: every worker writes a key
to its store with ddpstore and reads the other node's."""
import os
import random
import subprocess
import sys

import pytest

from conftest import binary, free_port
from mnutil import (FAST, Agent, all_recorded, assert_all_dead, clean_env, enter, ip, read_envs,
                    record, wait_stderr, worker_pids)

REC = record("$RANK")
HERE = os.path.dirname(os.path.abspath(__file__))


class Hosts(tuple):
    """(namespaces, IPv4 addresses), unpacked as before; .v6: IPv6 ones."""
    v6 = ()


@pytest.fixture
def two_hosts():
    """Namespaces a and b with 10.X.Y.1 and 10.X.Y.2 on a veth pair (and
    fd00:X:Y::1, ::2: .v6)."""
    tag = f"{os.getpid() % 10000}{random.randrange(1000)}"
    ns = [f"ddpmn{tag}a", f"ddpmn{tag}b"]
    veth = [f"vd{tag}a", f"vd{tag}b"]
    net = f"10.{random.randrange(100, 250)}.{random.randrange(1, 250)}"
    addrs = [f"{net}.1", f"{net}.2"]
    made = []
    try:
        r = ip("netns", "add", ns[0])
        if r.returncode != 0:
            pytest.skip(f"cannot create a network namespace here: {r.stderr.strip()}")
        made.append(ns[0])
        assert ip("netns", "add", ns[1]).returncode == 0
        made.append(ns[1])
        steps = [
            (None, "link", "add", veth[0], "netns", ns[0], "type", "veth", "peer", "name",
             veth[1], "netns", ns[1]),
        ]
        net6 = "fd00:%x:%x" % tuple(int(x) for x in net.split(".")[1:])
        v6 = [f"{net6}::1", f"{net6}::2"]
        for i in (0, 1):
            steps += [(ns[i], "link", "set", "lo", "up"),
                      (ns[i], "addr", "add", f"{addrs[i]}/24", "dev", veth[i]),
                      (ns[i], "-6", "addr", "add", f"{v6[i]}/64", "dev", veth[i],
                       "nodad"),
                      (ns[i], "link", "set", veth[i], "up")]
        for n, *s in steps:
            r = ip(*s, ns=n)
            assert r.returncode == 0, f"ip {' '.join(s)} (in {n}): {r.stderr}"
        hosts = Hosts((ns, addrs))
        hosts.v6 = v6
        yield hosts
    finally:
        for n in made:
            ip("netns", "del", n)


SCRIPT = REC + (
    # Each worker writes its key to the store at MASTER_ADDR:MASTER_PORT and
    # reads the key of the same local rank on the other node.
    '"$DDPSTORE" --timeout 20 set "mn/$RANK" "from $RANK" && '
    'OTHER=$(( (RANK + LOCAL_WORLD_SIZE) % WORLD_SIZE )); '
    '"$DDPSTORE" --timeout 20 get "mn/$OTHER" --wait > "$OUT/got.$RANK"')


def run_pair(reaper, tmp_path, ns, args_of):
    agents, outs = [], []
    for i in (0, 1):
        out = tmp_path / f"out{i}"
        out.mkdir()
        outs.append(out)
        env = clean_env(OUT=str(out), DDPSTORE=binary("ddpstore"))
        agents.append(Agent(reaper, tmp_path, f"node{i}", args_of(i), env=env,
                            prefix=enter(ns[i])))
    for a in agents:
        assert a.wait(timeout=60) == 0, a.stderr()
    return outs


def check_exchange(outs):
    """Each node's one worker read the other node's key."""
    for out in outs:
        got = [n for n in os.listdir(out) if n.startswith("got.")]
        assert len(got) == 1
        other = (int(got[0][4:]) + 1) % 2
        assert (out / got[0]).read_text().strip() == f"from {other}"


def test_static_nodes_in_two_namespaces(reaper, tmp_path, two_hosts):
    ns, addrs = two_hosts
    port = free_port()

    def args(i):
        return ["--nnodes", "2", "--node-rank", str(i), "--master-addr", addrs[0],
                "--master-port", str(port), "--nproc-per-node", "1", "sh", "-c", SCRIPT]

    outs = run_pair(reaper, tmp_path, ns, args)
    for i in (0, 1):
        (e,) = read_envs(outs[i]).values()
        assert e["GROUP_RANK"] == str(i) and e["WORLD_SIZE"] == "2"
        assert e["MASTER_ADDR"] == addrs[0]  # node 0, as each node reaches it
    check_exchange(outs)


def test_dynamic_nodes_in_two_namespaces(reaper, tmp_path, two_hosts):
    ns, addrs = two_hosts
    port = free_port()

    def args(i):
        return ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                f"{addrs[0]}:{port}", "--rdzv-id", "netns", "--nproc-per-node", "1",
                "sh", "-c", SCRIPT]

    outs = run_pair(reaper, tmp_path, ns, args)
    envs = [next(iter(read_envs(o).values())) for o in outs]
    first = [i for i in (0, 1) if envs[i]["GROUP_RANK"] == "0"]
    assert len(first) == 1
    # The workers' store is group rank 0's, at the address its connection
    # to the rendezvous store has in its own namespace.
    for e in envs:
        assert e["MASTER_ADDR"] == addrs[first[0]]
        assert e["MASTER_PORT"] != str(port)
    check_exchange(outs)


def test_a_node_cut_off_between_attempts_is_lost(reaper, tmp_path, two_hosts):
    """Node 1's network goes away while the workers stop for a restart (its
    connection does not close: no FIN crosses a link that is down). The
    store's host watched heartbeats only while workers ran: it waited
    join_timeout for node 1, then ended with 1. Now it notices the silence
    after heartbeat_timeout and both end with 75, node 1 for its silent
    store."""
    ns, addrs = two_hosts
    port = free_port()
    out = tmp_path / "out"
    out.mkdir()
    env = clean_env(OUT=str(out))
    # Round 0: rank 0 fails; rank 1 ignores SIGTERM, so node 1 takes
    # --shutdown-timeout (5 s) to stop it.
    script = (record() + 'trap "" TERM; if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
              '[ "$RANK" = 0 ] && { ' + all_recorded(2) + 'exit 3; }; sleep 60; fi')
    agents = [Agent(reaper, tmp_path, f"node{i}",
                    ["--nnodes", "2", "--node-rank", str(i), "--master-addr", addrs[0],
                     "--master-port", str(port), "--nproc-per-node", "1", "--max-restarts", "2",
                     "--shutdown-timeout", "5", "--rdzv-conf", FAST, "sh", "-c", script],
                    env=env, prefix=enter(ns[i])) for i in (0, 1)]
    wait_stderr(agents[1], "restarting every node")
    veth = ip("-o", "link", "show", "type", "veth", ns=ns[1]).stdout.split(":")[1].strip()
    assert ip("link", "set", veth.split("@")[0], "down", ns=ns[1]).returncode == 0
    assert agents[0].wait() == 75, agents[0].stderr()
    assert "node 1 lost (no heartbeat from host" in agents[0].stderr()
    assert agents[1].wait() == 75, agents[1].stderr()
    assert "no reply from the rendezvous store" in agents[1].stderr()
    assert_all_dead(worker_pids(out))


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_libddp_across_hosts_where_node_0_reaches_its_store_on_loopback(reaper, tmp_path,
                                                                          two_hosts, family):
    """Node 0 names its own store 127.0.0.1 (as Debian's 127.0.1.1 line for
    the host's name makes it, or --master-addr localhost there): its node
    leader listened for the TCP ring on the address it reached the store
    from, loopback, which node 1 cannot reach, and the job sat silent until
    DDP_TIMEOUT (600 s by default). It listens on every address, of both
    families (node 1 may reach the store over IPv6: it listened on 0.0.0.0
    at first), and node 1 connects where it reaches the store."""
    ns, addrs = two_hosts
    if family == "ipv6":
        addrs = two_hosts.v6
    port = free_port()
    agents = []
    for i in (0, 1):
        args = ["--nnodes", "2", "--node-rank", str(i), "--master-addr",
                "127.0.0.1" if i == 0 else addrs[0], "--master-port", str(port),
                "--nproc-per-node", "2", binary("train"), "--check-sync"]
        agents.append(Agent(reaper, tmp_path, f"node{i}", args,
                            env=clean_env(DDP_TIMEOUT="20"), prefix=enter(ns[i])))
    for a in agents:
        assert a.wait(timeout=90) == 0, a.stdout() + a.stderr()
    assert "parameters identical on all 4 rank(s) after every step" in agents[0].stdout()



def forwarded_pair(reaper, tmp_path, two_hosts, fwd_host, env1=None, nproc=2):
    """Node 0 at its address; node 1 reaching its store through a port
    forward on its own loopback, fwd_host (as `ssh -L` makes one). The two
    agents, once they exited."""
    ns, addrs = two_hosts
    port = free_port()
    # (sys.executable: tests/compat imports this file under its own conftest.)
    fwd = reaper.popen([*enter(ns[1]), sys.executable, os.path.join(HERE, "tcp_forward.py"),
                        fwd_host, str(port), addrs[0], str(port), "80"],
                       stdout=subprocess.PIPE, text=True)
    assert fwd.stdout.readline().strip() == "listening"
    agents = []
    for i in (0, 1):
        args = ["--nnodes", "2", "--node-rank", str(i), "--master-addr",
                addrs[0] if i == 0 else fwd_host, "--master-port", str(port),
                "--nproc-per-node", str(nproc), binary("train"), "--check-sync"]
        env = clean_env(DDP_TIMEOUT="600", **(env1 if i == 1 and env1 else {}))
        agents.append(Agent(reaper, tmp_path, f"node{i}", args, env=env, prefix=enter(ns[i])))
    for a in agents:
        a.wait(timeout=90)
    return agents


@pytest.mark.parametrize("fwd_host", ["127.0.0.1", "::1"])
def test_libddp_across_hosts_where_node_1_reaches_the_store_through_a_port_forward(
        reaper, tmp_path, two_hosts, fwd_host):
    """Node 1 reaches node 0's store through a port forward on its own
    loopback: its node leader listened for the TCP ring on every address
    but announced loopback, which node 0 took for the store's host's and so
    tried its own host: the job failed, blaming node 1. Node 1 announces an
    address of its own host now (over [::1] on a node whose only IPv6
    address is link-local: its IPv4 one)."""
    if fwd_host == "::1":
        ns = two_hosts[0]
        assert ip("-6", "addr", "del", f"{two_hosts.v6[1]}/64", "dev", f"vd{ns[1][5:-1]}b",
                  ns=ns[1]).returncode == 0
    agents = forwarded_pair(reaper, tmp_path, two_hosts, fwd_host)
    for a in agents:
        assert a.rc == 0, a.stdout() + a.stderr()
    assert "parameters identical on all 4 rank(s) after every step" in agents[0].stdout()


@pytest.mark.parametrize("named", [False, True])
def test_a_port_forwarded_node_whose_only_interface_is_a_bridge_says_so_or_names_it(
        reaper, tmp_path, two_hosts, named):
    """As above, where node 1's only interface is named as docker's bridge,
    which is passed over: no other host could reach its leader, which the
    job says at once (not after DDP_TIMEOUT, 600 s here; the agents' wait
    bound is 90 s), or DDP_SOCKET_IFNAME names it and the job runs."""
    ns = two_hosts[0]
    veth, bridge = f"vd{ns[1][5:-1]}b", f"docker{ns[1][5:-1]}"[:15]
    for step in (("link", "set", veth, "down"), ("link", "set", veth, "name", bridge),
                 ("link", "set", bridge, "up")):
        assert ip(*step, ns=ns[1]).returncode == 0, step
    agents = forwarded_pair(reaper, tmp_path, two_hosts, "127.0.0.1",
                            env1={"DDP_SOCKET_IFNAME": bridge} if named else None, nproc=1)
    if named:
        for a in agents:
            assert a.rc == 0, a.stdout() + a.stderr()
        return
    assert all(a.rc != 0 for a in agents), [a.rc for a in agents]
    err = agents[0].stdout() + agents[0].stderr()
    assert ("node 1's leader reaches the store on loopback (127.0.0.1: a port forward?) and "
            "has no other address up (DDP_SOCKET_IFNAME names one there)") in err, err


def test_a_socket_interface_that_is_not_there_fails_at_once_naming_it(reaper, tmp_path,
                                                                      two_hosts):
    agents = forwarded_pair(reaper, tmp_path, two_hosts, "127.0.0.1",
                            env1={"DDP_SOCKET_IFNAME": "nosuch0"}, nproc=1)
    assert all(a.rc != 0 for a in agents), [a.rc for a in agents]
    err = agents[1].stdout() + agents[1].stderr()
    assert "DDP_SOCKET_IFNAME=nosuch0: no interface of that name is up with an address" in err, \
        err
