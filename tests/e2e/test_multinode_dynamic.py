"""Dynamic rendezvous (--rdzv-backend c10d): node ranks by arrival, a round
that closes at MAX nodes or at MIN plus the last call, a late node that makes
the running nodes rejoin (no restart counted), a lost node that the others
continue without (a restart counted), a lost store host, and jobs with
different --rdzv-id sharing one store without seeing each other."""
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import binary, free_port, wait_for
import storeutil
from mnutil import (FAST, Agent, assert_all_dead, clean_env, dyn_agent, ipv6_loopback, listening,
                    read_envs, record, serve_store, store_get, wait_stderr, worker_pids)

# Tag: WORLD_SIZE.RANK.RESTART_COUNT (a rejoin keeps the restart count).
REC = record("$WORLD_SIZE.$RANK.$TORCHELASTIC_RESTART_COUNT")


def setup_out(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    return out, clean_env(OUT=str(out))


def test_a_round_closes_at_max_nodes_with_ranks_by_arrival(reaper, tmp_path):
    out, env = setup_out(tmp_path)
    port = free_port()
    ep = f"127.0.0.1:{port}"
    agents = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "1:3", n, REC, env=env)
              for i, n in enumerate([1, 2, 1])]
    for a in agents:
        assert a.wait() == 0, a.stderr()
    envs = read_envs(out)
    assert sorted(envs) == [(4, r, 0) for r in range(4)]
    groups = {}
    for e in envs.values():
        groups.setdefault(e["GROUP_RANK"], []).append(int(e["RANK"]))
        assert e["GROUP_WORLD_SIZE"] == "3" and e["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    assert sorted(groups) == ["0", "1", "2"]
    # Ranks follow the group ranks, each node its own count.
    assert sorted(r for g in sorted(groups) for r in sorted(groups[g])) == [0, 1, 2, 3]
    # Every worker meets at group rank 0's store for this round, not the
    # rendezvous endpoint.
    stores = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs.values()}
    assert len(stores) == 1
    addr, wport = stores.pop()
    assert addr == "127.0.0.1" and wport != str(port)


def test_a_late_node_makes_the_running_nodes_rejoin_without_a_restart(reaper, tmp_path):
    out, env = setup_out(tmp_path)
    ep = f"127.0.0.1:{free_port()}"
    script = REC + '[ "$WORLD_SIZE" = 3 ] || exec sleep 60'
    conf = FAST + ",last_call_timeout=0.3"
    first = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "2:3", 1, script, conf=conf, env=env)
             for i in range(2)]
    # MIN nodes and the last call: the round runs with two.
    wait_for(lambda: len(read_envs(out)) == 2, what="a two-node round")
    late = dyn_agent(reaper, tmp_path, "late", ep, "2:3", 1, script, conf=conf, env=env)
    for a in [*first, late]:
        assert a.wait() == 0, a.stderr()
    envs = read_envs(out)
    assert sorted(envs) == [(2, 0, 0), (2, 1, 0), (3, 0, 0), (3, 1, 0), (3, 2, 0)]
    assert "waiting for the next round" in late.stderr()
    assert "every node rejoins in round 1" in first[0].stderr()


def test_a_late_node_meets_running_nodes_whose_workers_stop_slowly(reaper, tmp_path):
    """As above, but the running nodes' workers take 3 s to stop, longer
    than the last call: the late node's last call closed round 1 with
    itself alone (MIN 1) while they still stopped; they found it closed
    without them, waited as late nodes, made it rejoin, and the two groups
    took turns for ever. The last call now waits for the round before's
    nodes (coord_rejoin.c), as torchrun starts no round before every node
    of the last has left it."""
    out, env = setup_out(tmp_path)
    ep = f"127.0.0.1:{free_port()}"
    script = REC + ('[ "$WORLD_SIZE" = 3 ] && exit 0; trap "sleep 3; exit 0" TERM; '
                    'sleep 60 & wait')
    conf = FAST + ",last_call_timeout=1"
    first = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "1:3", 1, script, conf=conf, env=env)
             for i in range(2)]
    wait_for(lambda: len(read_envs(out)) == 2, what="a two-node round")
    late = dyn_agent(reaper, tmp_path, "late", ep, "1:3", 1, script, conf=conf, env=env)
    for a in [*first, late]:
        assert a.wait() == 0, a.stderr()
    envs = read_envs(out)
    assert sorted(envs) == [(2, 0, 0), (2, 1, 0), (3, 0, 0), (3, 1, 0), (3, 2, 0)], envs
    for a in [*first, late]:
        assert "round 1 closed with" not in a.stderr(), a.stderr()


def test_a_restart_waits_for_the_node_whose_workers_stop_slowly(reaper, tmp_path):
    """A failure restarts the job: the node whose worker failed has nothing
    left to stop and came to round 1 at once; its last call closed the
    round with itself alone (MIN 1) while the other's workers took 3 s to
    stop. Both now run the restart."""
    out, env = setup_out(tmp_path)
    ep = f"127.0.0.1:{free_port()}"
    script = REC + ('[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] && exit 0; '
                    'if [ "$RANK" = 0 ]; then '
                    'while [ ! -e "$OUT/env.2.1.0" ]; do sleep 0.1; done; exit 1; fi; '
                    'trap "sleep 3; exit 0" TERM; sleep 60 & wait')
    conf = FAST + ",last_call_timeout=1"
    agents = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "1:2", 1, script, conf=conf, env=env,
                        extra=["--max-restarts", "1"]) for i in range(2)]
    for a in agents:
        assert a.wait() == 0, a.stderr()
        assert "restarting every node (restart 1 of 1)" in a.stderr()
    assert sorted(read_envs(out)) == [(2, 0, 0), (2, 0, 1), (2, 1, 0), (2, 1, 1)]


def test_a_join_timeout_shorter_than_the_workers_stop_does_not_close_without_them(reaper,
                                                                                  tmp_path):
    """join_timeout (2 s) ends the late node's wait in round 1 while the
    running nodes' workers still stop (4 s): it closed the round alone
    there, skipping the wait for them that its last call has, and the two
    groups took turns for ever (found by a review of that wait)."""
    out, env = setup_out(tmp_path)
    ep = f"127.0.0.1:{free_port()}"
    script = REC + ('[ "$WORLD_SIZE" = 3 ] && exit 0; trap "sleep 4; exit 0" TERM; '
                    'sleep 60 & wait')
    conf = FAST.replace("join_timeout=30", "join_timeout=2") + ",last_call_timeout=1"
    first = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "1:3", 1, script, conf=conf, env=env,
                       extra=["--shutdown-timeout", "20"]) for i in range(2)]
    wait_for(lambda: len(read_envs(out)) == 2, what="a two-node round")
    late = dyn_agent(reaper, tmp_path, "late", ep, "1:3", 1, script, conf=conf, env=env,
                     extra=["--shutdown-timeout", "20"])
    for a in [*first, late]:
        assert a.wait(timeout=60) == 0, a.stderr()
    assert sorted(read_envs(out)) == [(2, 0, 0), (2, 1, 0), (3, 0, 0), (3, 1, 0), (3, 2, 0)]


def test_nodes_that_fill_a_rejoin_round_leave_the_running_nodes_their_places(reaper,
                                                                              tmp_path):
    """--nnodes 1:3 runs with two nodes; two more come at once, room for
    one. They reached round 1 first (nothing to stop) and filled it with the
    faster of the running nodes, so the slower one, which had run the job,
    was left out as a spare. The nodes of the round before now go first;
    one of the newcomers is the spare (and, the job done without it, ends
    with 1, as the man page says of a spare)."""
    out, env = setup_out(tmp_path)
    ep = f"127.0.0.1:{free_port()}"
    script = REC + ('[ "$WORLD_SIZE" = 3 ] && exit 0; '
                    'trap "[ $NODE = a1 ] && sleep 4; exit 0" TERM; sleep 60 & wait')
    conf = FAST + ",last_call_timeout=1"
    agents = {n: dyn_agent(reaper, tmp_path, n, ep, "1:3", 1, script, conf=conf,
                           env=dict(env, NODE=n)) for n in ("a0", "a1")}
    wait_for(lambda: len(read_envs(out)) == 2, what="a two-node round")
    agents.update({n: dyn_agent(reaper, tmp_path, n, ep, "1:3", 1, script, conf=conf,
                                env=dict(env, NODE=n)) for n in ("late0", "late1")})
    rcs = {n: a.wait(timeout=60) for n, a in agents.items()}
    in3 = sorted(e["NODE"] for k, e in read_envs(out).items() if k[0] == 3)
    assert len(in3) == 3 and "a0" in in3 and "a1" in in3, (in3, rcs)
    spare = ({"late0", "late1"} - set(in3)).pop()
    assert rcs == {n: 1 if n == spare else 0 for n in agents}, rcs
    assert "round 1 is full" in agents[spare].stderr()


def test_a_node_killed_while_its_workers_stop_for_a_rejoin_is_not_waited_for(reaper,
                                                                             tmp_path):
    """Node b's agent dies while its workers stop for a rejoin: its
    connection's close marks it gone in round 1 (from/1), and round 1
    closes with the others as soon as they came. The mark was a
    create-if-absent on the key b beat on, so it never took, and round 1
    waited for b's beats to stop for heartbeat_timeout (25 s here: the
    agents' wait bound is 20 s)."""
    out, env = setup_out(tmp_path)
    port = free_port()
    ep = f"127.0.0.1:{port}"
    script = ('[ -e "$OUT/go" ] && exit 0; '
              'trap "[ $NODE = b ] && sleep 8; exit 0" TERM; ' + REC + 'sleep 60 & wait')
    conf = "keep_alive_interval=0.2,heartbeat_timeout=25,join_timeout=60,last_call_timeout=1"
    a = dyn_agent(reaper, tmp_path, "a", ep, "1:3", 1, script, conf=conf + ",is_host=1",
                  env=dict(env, NODE="a"), extra=["--shutdown-timeout", "30"])
    wait_for(lambda: listening(port), what="the store host")
    b = dyn_agent(reaper, tmp_path, "b", ep, "1:3", 1, script, conf=conf + ",is_host=0",
                  env=dict(env, NODE="b"), extra=["--shutdown-timeout", "30"])
    wait_for(lambda: len(read_envs(out)) == 2, what="a two-node round")
    late = dyn_agent(reaper, tmp_path, "late", ep, "1:3", 1, script, conf=conf + ",is_host=0",
                     env=dict(env, NODE="late"), extra=["--shutdown-timeout", "30"])
    wait_stderr(b, "every node rejoins in round 1")
    (out / "go").write_text("")  # round 1's workers end at once
    time.sleep(0.5)  # its beats on moving/1 have begun
    b.signal(signal.SIGKILL)
    for x in (a, late):
        assert x.wait(timeout=20) == 0, x.stderr()
        # One worker a node: "rank 1 of 2", not "ranks 1-1 of 2".
        assert re.search(r"round 1: node \d of 2 \(host [^)]*\), rank \d of 2, store ",
                         x.stderr()), x.stderr()


def test_two_nodes_lost_at_once_do_not_hold_up_the_restart(reaper, tmp_path):
    """Only the first of two nodes lost together is named by the round's
    end; the other never comes to round 1 (nor says so), and the survivors'
    last call waits for it only until heartbeat_timeout, not their
    --shutdown-timeout (60 s here: the agents' wait bound is 40 s)."""
    out, env = setup_out(tmp_path)
    port = free_port()
    ep = f"127.0.0.1:{port}"
    script = REC + '[ "$WORLD_SIZE" = 2 ] || exec sleep 60'
    # (3 s: the agents started one after another all count into round 0,
    # which a slow machine may not do within 0.3 s)
    conf = FAST + ",last_call_timeout=3"
    extra = ["--max-restarts", "1", "--shutdown-timeout", "60"]
    host = dyn_agent(reaper, tmp_path, "host", ep, "2:4", 1, script, conf=conf + ",is_host=1",
                     extra=extra, env=env)
    wait_for(lambda: listening(port), what="the store host")
    others = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "2:4", 1, script,
                        conf=conf + ",is_host=0", extra=extra, env=env) for i in range(3)]
    wait_for(lambda: len(read_envs(out)) == 4, what="a four-node round")
    # Stopped first, so that the second cannot learn of the first's loss
    # and count into round 1 before it dies (a loaded machine ran it there
    # between two kills: a node that dies right after counting in has a test
    # of its own, below).
    for a in others[1:]:
        a.signal(signal.SIGSTOP)
    for a in others[1:]:
        a.signal(signal.SIGKILL)
    for a in (host, others[0]):
        assert a.wait(timeout=40) == 0, a.stderr()
        assert "restarting every node (restart 1 of 1)" in a.stderr()
    envs = read_envs(out)
    assert sorted(k for k in envs if k[0] == 2) == [(2, 0, 1), (2, 1, 1)]


def test_a_node_that_dies_right_after_counting_in_is_not_waited_for(reaper, tmp_path):
    """A node that counts in and dies before anything else of it reaches the
    store (its gone/ mark, its descriptor): here a bare client that ADDs to
    the round's count and closes. The round closes with it; the others do
    not wait join_timeout (60 s here; the agents' wait bound is 30 s) for its
    descriptor and then fail, but redo the round without it after
    heartbeat_timeout, no restart counted (nor needed: --max-restarts 0)."""
    out, env = setup_out(tmp_path)
    store = serve_store(reaper)
    c = storeutil.connect(store)
    c.sendall(bytes([storeutil.V2["ADD"]]) + storeutil.s("/ddprun/job/r0/count")
              + storeutil.i64(1))
    assert storeutil.recv_i64(c) == 1
    c.close()
    # (The third node, MAX, closes the round at once; a last call of 0.3 s
    # was all the second agent had to count in after the first, under load.)
    conf = "keep_alive_interval=0.2,heartbeat_timeout=2,join_timeout=60,last_call_timeout=3"
    script = REC + '[ "$WORLD_SIZE" = 2 ] || exec sleep 60'
    agents = [dyn_agent(reaper, tmp_path, f"a{i}", f"127.0.0.1:{store}", "2:3", 1, script,
                        conf=conf + ",is_host=0", env=env) for i in range(2)]
    for a in agents:
        assert a.wait() == 0, a.stderr()
        assert ("node 0 lost before round 0 started (it counted in but sent no descriptor "
                "within 2 s): every node rejoins in round 1") in a.stderr(), a.stderr()
    assert sorted(read_envs(out)) == [(2, 0, 0), (2, 1, 0)]

def test_a_node_heard_from_too_late_after_counting_in_starts_no_worker_for_that_round(
        reaper, tmp_path):
    """As above, but the node was only held (here by a test hook, as SIGSTOP
    or a debugger would) and sends its descriptor once the others have
    ended the round without it: it started a worker for that round, ended
    already (WORLD_SIZE 3, restart 0), and then blamed itself as "node 0
    lost". Now it says what happened and joins the next round, as a late
    node does (the others make room for it)."""
    out, env = setup_out(tmp_path)
    store = serve_store(reaper)
    conf = "keep_alive_interval=0.2,heartbeat_timeout=2,join_timeout=60,last_call_timeout=0.3"
    script = ('echo "$WORLD_SIZE $GROUP_RANK $MASTER_PORT" >> "$OUT/log"; '
              '[ "$WORLD_SIZE" = 3 ] || exec sleep 60')
    ep = f"127.0.0.1:{store}"
    held = dyn_agent(reaper, tmp_path, "held", ep, "2:3", 1, script, conf=conf + ",is_host=0",
                     env={**env, "DDPRUN_TEST_COUNT_IN_DELAY_MS": "4000"})
    wait_for(lambda: storeutil_count(store) == 1, what="the held node's count-in")
    others = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "2:3", 1, script,
                        conf=conf + ",is_host=0", env=env) for i in range(2)]
    for a in (held, *others):
        assert a.wait(timeout=40) == 0, a.stderr()
    err = held.stderr()
    assert "round 0: node" not in err, err
    assert "this node (node 0) was taken for lost before round 0 started" in err, err
    runs = (out / "log").read_text().splitlines()
    # Round 1 with the two others, then all three together; none in round 0.
    assert sorted(r.split()[0] for r in runs) == ["2", "2", "3", "3", "3"], runs


def test_sigterm_to_the_store_host_while_a_descriptor_is_awaited_ends_the_others_by_it(
        reaper, tmp_path):
    """The round closed with a node that died right after counting in (a
    bare client), and the store's host gets SIGTERM while the others wait
    for that node's descriptor: the round's end says so, and the other
    node reads it at once. The host tried to say it where the round's
    closed value was already written, and closed its store at once: the
    other lost it, exit 75. Then the other read it only once its wait for
    the descriptor was over (heartbeat_timeout, 40 s here: the agents' wait
    bound is 30 s)."""
    out, env = setup_out(tmp_path)
    port = free_port()
    ep = f"127.0.0.1:{port}"
    # (The third node, MAX, closes the round at once; a last call of 0.3 s
    # was all the second agent had to count in after the first, under load.)
    conf = "keep_alive_interval=0.2,heartbeat_timeout=40,join_timeout=60,last_call_timeout=3"
    host = dyn_agent(reaper, tmp_path, "host", ep, "2:3", 1, REC, conf=conf + ",is_host=1",
                     env=env)
    wait_for(lambda: listening(port), what="the store host")
    c = storeutil.connect(port)
    c.sendall(bytes([storeutil.V2["ADD"]]) + storeutil.s("/ddprun/job/r0/count")
              + storeutil.i64(1))
    assert storeutil.recv_i64(c) >= 1
    c.close()
    other = dyn_agent(reaper, tmp_path, "other", ep, "2:3", 1, REC, conf=conf + ",is_host=0",
                      env=env)
    wait_for(lambda: store_get(port, "ddprun/job/r0/closed") is not None, what="the close")
    host.signal(signal.SIGTERM)
    for a in (host, other):
        assert a.wait() == 143, a.stderr()
    assert "received SIGTERM" in other.stderr(), other.stderr()
    assert not read_envs(out)


def test_a_member_that_reads_the_end_before_it_starts_still_gives_its_failure_list(
        reaper, tmp_path):
    """Node z sent its descriptor and was stopped before the round closed;
    node x came, ran, and its rank failed: x's report waits for z's
    failure list. z, going on, reads the end with the descriptors, starts
    nothing, and publishes its (empty) list: it published none, and x's
    report waited --shutdown-timeout for it, then said it came without."""
    out, env = setup_out(tmp_path)
    store = serve_store(reaper)
    ep = f"127.0.0.1:{store}"
    conf = FAST + ",is_host=0"
    extra = ["--shutdown-timeout", "20"]
    z = dyn_agent(reaper, tmp_path, "z", ep, "2", 1, REC + "exit 3", conf=conf, env=env,
                  extra=extra)
    wait_for(lambda: store_get(store, "ddprun/job/r0/node/0") is not None,
             what="z's descriptor")
    z.signal(signal.SIGSTOP)
    try:
        x = dyn_agent(reaper, tmp_path, "x", ep, "2", 1, REC + "exit 3", conf=conf, env=env,
                      extra=extra)
        wait_stderr(x, "failed with exit status 3")
    finally:
        z.signal(signal.SIGCONT)
    assert x.wait() == 3, x.stderr()
    assert z.wait() == 3, z.stderr()
    assert "round 0: node" not in z.stderr(), z.stderr()
    assert "no readable failure list" not in x.stderr(), x.stderr()
    assert len(read_envs(out)) == 1


def storeutil_count(port):
    """The round-0 count of job "job" in the store at port (0: none yet)."""
    v = store_get(port, "ddprun/job/r0/count")
    return int(v) if v else 0


def test_a_lost_node_leaves_the_others_to_go_on(reaper, tmp_path):
    out, env = setup_out(tmp_path)
    port = free_port()
    ep = f"127.0.0.1:{port}"
    script = REC + '[ "$WORLD_SIZE" = 2 ] || exec sleep 60'
    # (3 s: the agents started one after another all count into round 0,
    # which a slow machine may not do within 0.3 s)
    conf = FAST + ",last_call_timeout=3"
    host = dyn_agent(reaper, tmp_path, "host", ep, "2:3", 1, script, conf=conf + ",is_host=1",
                     extra=["--max-restarts", "1"], env=env)
    wait_for(lambda: listening(port), what="the store host")
    others = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "2:3", 1, script,
                        conf=conf + ",is_host=0", extra=["--max-restarts", "1"], env=env)
              for i in range(2)]
    wait_for(lambda: len(read_envs(out)) == 3, what="a three-node round")
    others[1].signal(signal.SIGKILL)
    for a in (host, others[0]):
        assert a.wait() == 0, a.stderr()
        assert "restarting every node (restart 1 of 1)" in a.stderr()
    envs = read_envs(out)
    assert sorted(k for k in envs if k[0] == 2) == [(2, 0, 1), (2, 1, 1)]


def sigterm_between_rounds(reaper, tmp_path, slow_node):
    """A two-node job restarts after rank 1 fails; the workers of slow_node
    ("host" or "other") take 8 s to stop. SIGTERM to the store's host while
    it moves (its own workers stopping) or waits in round 1 (the other's):
    both exit 143 once the slow workers stopped. Before, the host waited for
    round 0's nodes to count out of it, which the other, moved on to round 1,
    never did (a moving host: its linger and --shutdown-timeout, 40 s here;
    the agents' wait bound is 30 s), or (a host waiting in round 1) left it
    without a word, so the other waited for nodes and then found the store
    gone."""
    out, env = setup_out(tmp_path)
    port = free_port()
    ep = f"127.0.0.1:{port}"
    slow = '[ "$GROUP_RANK" = %d ] && trap "sleep 8; exit 1" TERM; ' % (
        0 if slow_node == "host" else 1)
    script = (REC + 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then '
              'sleep 1; exit 3; fi; ' + slow + 'sleep 60 & wait')
    conf = FAST + ",last_call_timeout=0.3"
    extra = ["--max-restarts", "2", "--shutdown-timeout", "30"]
    host = dyn_agent(reaper, tmp_path, "host", ep, "2:3", 1, script, conf=conf + ",is_host=1",
                     extra=extra, env=env)
    wait_for(lambda: listening(port), what="the store host")
    # The other node runs rank 1, which fails, and (slow) rank 2.
    other = dyn_agent(reaper, tmp_path, "other", ep, "2:3", 2, script,
                      conf=conf + ",is_host=0", extra=extra, env=env)
    wait_stderr(host, "restarting every node (restart 1 of 2)")
    if slow_node == "other":  # the host's worker stopped: it waits in round 1
        wait_stderr(host, "waiting for nodes: round 1")
    host.signal(signal.SIGTERM)
    for a in (host, other):
        assert a.wait() == 143, a.stderr()
    assert "received SIGTERM during the rendezvous" in other.stderr(), other.stderr()
    assert "for every node to leave" not in host.stderr(), host.stderr()


def test_sigterm_to_the_store_host_while_it_moves_ends_the_others_with_it(reaper, tmp_path):
    sigterm_between_rounds(reaper, tmp_path, "host")


def test_sigterm_to_the_store_host_waiting_in_the_next_round_ends_the_others(reaper, tmp_path):
    sigterm_between_rounds(reaper, tmp_path, "other")


def test_kill_9_of_the_store_host_stops_the_others(reaper, tmp_path):
    out, env = setup_out(tmp_path)
    port = free_port()
    ep = f"127.0.0.1:{port}"
    script = REC + "exec sleep 60"
    host = dyn_agent(reaper, tmp_path, "host", ep, "2", 1, script, conf=FAST + ",is_host=1",
                     env=env)
    wait_for(lambda: listening(port), what="the store host")
    other = dyn_agent(reaper, tmp_path, "other", ep, "2", 2, script, conf=FAST + ",is_host=0",
                      env=env)
    wait_for(lambda: len(read_envs(out)) == 3, what="the job running")
    host.signal(signal.SIGKILL)
    assert other.wait() == 75, other.stderr()
    assert f"lost the rendezvous store at 127.0.0.1:{port}" in other.stderr()
    assert_all_dead(worker_pids(out))


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_an_endpoint_port_held_by_no_store_is_hosted_once_it_is_free(reaper, tmp_path, family):
    # Both agents found the port taken (CI: a connection had taken it as its
    # own), took it for the other's store and waited out join_timeout, each
    # a client of nobody. Held by a bound socket that does not listen, in
    # either family (the store listens on both).
    if family == socket.AF_INET6 and not ipv6_loopback():
        pytest.skip("no IPv6 here")
    out, env = setup_out(tmp_path)
    port = free_port()
    holder = socket.socket(family)
    if family == socket.AF_INET6:  # IPv6 alone: the store's IPv4 listener binds
        holder.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    holder.bind(("127.0.0.1" if family == socket.AF_INET else "::", port))
    try:
        agents = [dyn_agent(reaper, tmp_path, f"a{i}", f"127.0.0.1:{port}", "2", 1, REC,
                            env=env) for i in (0, 1)]
        wait_for(lambda: all("taken on this host by something that does not answer" in
                             a.stderr() for a in agents),
                 what="both agents saying the port is held by something silent")
        assert not read_envs(out)
    finally:
        holder.close()
    for a in agents:
        assert a.wait() == 0, a.stderr()
    assert sum("this agent hosts the store" in a.stderr() for a in agents) == 1
    assert sorted(read_envs(out)) == [(2, 0, 0), (2, 1, 0)]


def test_an_endpoint_port_held_to_the_end_names_the_holder_in_the_error(reaper, tmp_path):
    out, env = setup_out(tmp_path)
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        a = dyn_agent(reaper, tmp_path, "a", f"127.0.0.1:{port}", "2", 1, REC,
                      conf=FAST.replace("join_timeout=30", "join_timeout=3"), env=env)
        assert a.wait() == 1, a.stderr()
    err = a.stderr()
    assert f"cannot reach the rendezvous store at 127.0.0.1:{port} within 3 s: connection " \
           "refused" in err
    assert err.rstrip().endswith("; yet the port is taken on this host, by something that "
                                 "does not answer as a store"), err
    assert err.count("cannot reach") == 1, err
    assert not read_envs(out)


def test_jobs_with_different_ids_share_a_store_without_meeting(reaper, tmp_path):
    store_port = free_port()
    reaper.popen([binary("ddpstore"), "serve", "--host", "127.0.0.1", "--port",
                  str(store_port), "--quiet"])
    wait_for(lambda: listening(store_port), what="ddpstore")
    ep = f"127.0.0.1:{store_port}"
    outs, agents = {}, []
    for job, nprocs in (("jobA", (1, 2)), ("jobB", (2, 2))):
        out = tmp_path / job
        out.mkdir()
        outs[job] = out
        env = clean_env(OUT=str(out))
        agents += [dyn_agent(reaper, tmp_path, f"{job}{i}", ep, "2", n, REC,
                             conf=FAST + ",is_host=0", env=env, rdzv_id=job)
                   for i, n in enumerate(nprocs)]
    for a in agents:
        assert a.wait() == 0, a.stderr()
    for job, world in (("jobA", 3), ("jobB", 4)):
        envs = read_envs(outs[job])
        assert sorted(envs) == [(world, r, 0) for r in range(world)]
        assert {e["TORCHELASTIC_RUN_ID"] for e in envs.values()} == {job}


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
@pytest.mark.parametrize("bracket", [True, False])
def test_an_ipv6_endpoint_in_brackets(reaper, tmp_path, bracket):
    """[::1]:PORT, or ::1:PORT as torchrun takes it too (split at the last
    colon): that said "cannot resolve the rendezvous store's host ::1:PORT"."""
    out, env = setup_out(tmp_path)
    port = free_port(socket.AF_INET6, '::1')
    ep = f"[::1]:{port}" if bracket else f"::1:{port}"
    agents = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "2", 1, REC, env=env) for i in (0, 1)]
    for a in agents:
        assert a.wait() == 0, a.stderr()
    envs = read_envs(out)
    assert sorted(envs) == [(2, 0, 0), (2, 1, 0)]
    assert {e["MASTER_ADDR"] for e in envs.values()} == {"::1"}


def test_a_different_ddprun_version_is_refused_naming_it(reaper, tmp_path):
    store_port = free_port()
    reaper.popen([binary("ddpstore"), "serve", "--host", "127.0.0.1", "--port",
                  str(store_port), "--quiet"])
    wait_for(lambda: listening(store_port), what="ddpstore")
    # The first node of this job was another ddprun version.
    theirs = ('{"backend":"c10d","nnodes":"2:2","max_restarts":0,"version":"9.9.9",'
              '"node_rank":-1,"host":"elsewhere"}')
    r = subprocess.run([binary("ddpstore"), "--addr", f"127.0.0.1:{store_port}", "set",
                        "ddprun/vjob/config", theirs], timeout=30)
    assert r.returncode == 0
    a = dyn_agent(reaper, tmp_path, "a", f"127.0.0.1:{store_port}", "2", 1, "exit 0",
                  conf=FAST + ",is_host=0", rdzv_id="vjob")
    assert a.wait() == 2, a.stderr()
    assert "ddprun version differs" in a.stderr() and "9.9.9 on host elsewhere" in a.stderr()


def test_a_closed_count_outside_nnodes_is_refused_before_it_sizes_anything(reaper, tmp_path):
    # The store is anyone's to write: a round's closed value naming 2^31 - 1
    # nodes took 8 GB and 26 s before 'out of memory'.
    store_port = free_port()
    reaper.popen([binary("ddpstore"), "serve", "--host", "127.0.0.1", "--port",
                  str(store_port), "--quiet"])
    wait_for(lambda: listening(store_port), what="ddpstore")
    r = subprocess.run([binary("ddpstore"), "--addr", f"127.0.0.1:{store_port}", "set",
                        "ddprun/cjob/r0/closed", "2147483647"], timeout=30)
    assert r.returncode == 0
    a = dyn_agent(reaper, tmp_path, "a", f"127.0.0.1:{store_port}", "1:2", 1, "exit 0",
                  conf=FAST + ",is_host=0", rdzv_id="cjob")
    assert a.wait() == 1, a.stderr()
    assert ("round 0 closed with 2147483647 nodes, outside --nnodes 1:2: the store's value "
            "is not this job's") in a.stderr()


def test_a_node_that_cannot_start_its_program_leaves_an_elastic_job_running(reaper, tmp_path):
    """--nnodes 1:2: a node whose program is missing exits 127 alone, as one
    that never came; the job runs on without it (a fixed number of nodes
    would all end with 127: test_multinode_static.py)."""
    out = tmp_path / "out"
    out.mkdir()
    env = clean_env(OUT=str(out))
    ep = f"127.0.0.1:{free_port()}"
    conf = FAST + ",last_call_timeout=1"
    a = dyn_agent(reaper, tmp_path, "a", ep, "1:2", 1, REC, conf=conf, env=env)
    bad = Agent(reaper, tmp_path, "bad",
                ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", ep,
                 "--rdzv-id", "job", "--rdzv-conf", conf, "--nproc-per-node", "1",
                 "/nonexistent/prog"], env=env)
    assert bad.wait() == 127, bad.stderr()
    assert "(telling the other nodes)" not in bad.stderr()
    assert a.wait() == 0, a.stderr()
    assert sorted(read_envs(out)) == [(1, 0, 0)]
