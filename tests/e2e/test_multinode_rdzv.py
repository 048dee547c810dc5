"""The rendezvous's promises at its edges: a run id that is taken is refused
(never a success without a worker), a node that leaves before its round
closes is not counted, and a waiting node says whom it waits for (and that
another run id waits on the same store)."""
import os
import signal
import subprocess

import pytest

from conftest import binary, free_port
from mnutil import (FAST, Agent, clean_env, dyn_agent, listening, node_args, read_envs, record,
                    serve_store, store_get, wait_for, wait_stderr)

REC = record("$WORLD_SIZE.$RANK.$TORCHELASTIC_RESTART_COUNT")


def out_env(tmp_path, name):
    out = tmp_path / name
    out.mkdir()
    return out, clean_env(OUT=str(out))


# ---- a run id that is taken ---------------------------------------------------------


@pytest.mark.parametrize("rdzv_id", ["job", None], ids=["same-id", "no-id"])
def test_a_run_id_reused_after_its_job_finished_is_refused(reaper, tmp_path, rdzv_id):
    ep = f"127.0.0.1:{serve_store(reaper)}"
    conf = FAST + ",is_host=0"
    out1, env1 = out_env(tmp_path, "first")
    first = [dyn_agent(reaper, tmp_path, f"first{i}", ep, "2", 1, REC, conf=conf, env=env1,
                       rdzv_id=rdzv_id) for i in (0, 1)]
    for a in first:
        assert a.wait() == 0, a.stderr()
    assert len(read_envs(out1)) == 2
    out2, env2 = out_env(tmp_path, "second")
    second = [dyn_agent(reaper, tmp_path, f"second{i}", ep, "2", 1, REC, conf=conf, env=env2,
                        rdzv_id=rdzv_id) for i in (0, 1)]
    for a in second:
        assert a.wait() == 1, a.stderr()
        assert f"--rdzv-id {rdzv_id or 'none'} is taken" in a.stderr(), a.stderr()
        assert "another --rdzv-id" in a.stderr()
    assert read_envs(out2) == {}  # no worker of the second job ever ran


def test_a_job_started_on_a_full_running_run_id_does_not_succeed(reaper, tmp_path):
    ep = f"127.0.0.1:{serve_store(reaper)}"
    conf = FAST + ",is_host=0"
    out1, env1 = out_env(tmp_path, "first")
    first = dyn_agent(reaper, tmp_path, "first", ep, "1", 1,
                      REC + 'while [ ! -e "$OUT/release" ]; do sleep 0.05; done', conf=conf,
                      env=env1)
    wait_for(lambda: len(read_envs(out1)) == 1, what="the first job running")
    out2, env2 = out_env(tmp_path, "second")
    second = dyn_agent(reaper, tmp_path, "second", ep, "1", 1, REC, conf=conf, env=env2)
    # It waits as a spare, and says that the run id may be taken.
    wait_stderr(second, "--rdzv-id job is taken: stop it and choose another")
    (out1 / "release").touch()
    assert first.wait() == 0, first.stderr()
    assert second.wait() == 1, second.stderr()
    assert ("the job with --rdzv-id job ran round 0 with 1 node without this one and "
            "finished: this node waited as a spare and was not needed (if it belongs to a new "
            "job, --rdzv-id job is taken: give that job another)") in second.stderr()
    assert read_envs(out2) == {}


# ---- a node that leaves an open round ------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_node_that_leaves_before_the_round_closes_is_not_counted(reaper, tmp_path, sig):
    port = serve_store(reaper)
    ep = f"127.0.0.1:{port}"
    out, env = out_env(tmp_path, "out")
    # The last call is far: the round closes when MAX nodes that stayed came.
    conf = FAST + ",is_host=0,last_call_timeout=120,join_timeout=120"

    def node(i):
        return dyn_agent(reaper, tmp_path, f"a{i}", ep, "2:4", 1, REC, conf=conf, env=env)

    agents = [node(i) for i in range(3)]
    wait_for(lambda: store_get(port, "ddprun/job/r0/count") == "3", what="three arrivals")
    # Which one arrived when does not matter. Its connection closes as it dies,
    # before the next node is even started.
    victim = agents.pop(1)
    victim.signal(sig)
    assert victim.wait() in (-signal.SIGKILL, 128 + signal.SIGTERM), victim.stderr()
    agents += [node(3), node(4)]  # arrivals 4 and 5: four that stayed
    for a in agents:
        assert a.wait() == 0, a.stderr()
    envs = read_envs(out)
    assert sorted(envs) == [(4, r, 0) for r in range(4)], sorted(envs)
    assert sorted(e["GROUP_RANK"] for e in envs.values()) == ["0", "1", "2", "3"]


# ---- a rendezvous you can watch ----------------------------------------------------------


def test_a_waiting_static_node_names_the_missing_node_rank(reaper, tmp_path):
    out, env = out_env(tmp_path, "out")
    port = free_port()
    host = os.uname().nodename
    agents = {r: Agent(reaper, tmp_path, f"node{r}", node_args(3, r, port, 1, REC), env=env)
              for r in (0, 2)}
    wait_stderr(agents[0], f"waiting for nodes: 2 of 3 joined (0@{host}, 2@{host}), "
                           "missing node rank 1")
    agents[1] = Agent(reaper, tmp_path, "node1", node_args(3, 1, port, 1, REC), env=env)
    for a in agents.values():
        assert a.wait() == 0, a.stderr()
    assert len(read_envs(out)) == 3


def test_a_static_timeout_names_the_missing_node_ranks(reaper, tmp_path):
    host = os.uname().nodename
    b = Agent(reaper, tmp_path, "node0",
              node_args(3, 0, free_port(), 1, "exit 0", ["--rdzv-conf", "join_timeout=2"]))
    assert b.wait() == 1, b.stderr()
    assert (f"the rendezvous timed out after 2 s in round 0: 1 of 3 joined (0@{host}), "
            "missing node ranks 1, 2") in b.stderr()


def test_a_node_whose_store_does_not_answer_says_so_then_fails(reaper, tmp_path):
    # Node 1 of a static job whose node 0 never comes: the connection is
    # refused for all of join_timeout; the wait is said, then the failure.
    port = free_port()
    b = Agent(reaper, tmp_path, "node1",
              node_args(2, 1, port, 1, "exit 0", ["--rdzv-conf", "join_timeout=5"]))
    assert b.wait() == 1, b.stderr()
    assert (f"waiting for the rendezvous store at 127.0.0.1:{port} (--master-addr): nothing "
            "answers there yet; retrying for up to") in b.stderr()
    assert f"cannot reach the rendezvous store at 127.0.0.1:{port} within 5 s" in b.stderr()


def test_sigterm_in_the_rendezvous_stops_without_claiming_workers(reaper, tmp_path):
    b = Agent(reaper, tmp_path, "node1", node_args(2, 1, free_port(), 1, "exit 0"))
    wait_stderr(b, "waiting for the rendezvous store at")
    b.p.send_signal(signal.SIGTERM)
    assert b.wait() == 143, b.stderr()
    assert "received SIGTERM: stopping (no worker is running)" in b.stderr()
    assert "stopping the workers" not in b.stderr()


def test_a_lone_dynamic_node_says_it_waits_for_the_last_call(reaper, tmp_path):
    out, env = out_env(tmp_path, "out")
    host = os.uname().nodename
    ep = f"127.0.0.1:{free_port()}"
    a = dyn_agent(reaper, tmp_path, "a", ep, "1:2", 1, REC, conf=FAST + ",last_call_timeout=4",
                  env=env)
    assert a.wait() == 0, a.stderr()
    assert (f"waiting for nodes: round 0, 1 joined (0@{host}), --nnodes 1:2: the round closes "
            "at 2 nodes, or when the last call ends in") in a.stderr()
    assert sorted(read_envs(out)) == [(1, 0, 0)]


def test_a_node_before_the_min_th_says_another_node_runs_the_last_call(reaper, tmp_path):
    """--nnodes 2:3: the first node has no last call of its own (the second
    arrival runs it), so its waiting line cannot count one down; it read "or
    at the last call", as if the call were past. A third node closes the
    round at MAX."""
    out, env = out_env(tmp_path, "out")
    ep = f"127.0.0.1:{free_port()}"
    conf = FAST + ",last_call_timeout=300"
    a = dyn_agent(reaper, tmp_path, "a", ep, "2:3", 1, REC, conf=conf, env=env)
    wait_stderr(a, "1 more needed")
    b = dyn_agent(reaper, tmp_path, "b", ep, "2:3", 1, REC, conf=conf, env=env)
    wait_stderr(a, ": the round closes at 3 nodes, or when another node's last call ends")
    wait_stderr(b, ": the round closes at 3 nodes, or when the last call ends in")
    c = dyn_agent(reaper, tmp_path, "c", ep, "2:3", 1, REC, conf=conf, env=env)
    for n in (a, b, c):
        assert n.wait() == 0, n.stderr()
    assert "at the last call" not in a.stderr() + b.stderr()
    assert sorted(read_envs(out)) == [(3, 0, 0), (3, 1, 0), (3, 2, 0)]


def test_a_node_whose_last_call_ended_short_says_a_later_one_closes(reaper, tmp_path):
    """--nnodes 2:3: b arrives second but a has left, so b's last call ends
    with one node and the round stays open. When c comes (its own last call
    far off), b cannot count down a call of its own: it says that a later
    node's last call, or MAX nodes, closes the round, and how long ago its own
    ended. d makes three: the round closes with b, c and d."""
    out, env = out_env(tmp_path, "out")
    port = serve_store(reaper)
    ep = f"127.0.0.1:{port}"

    def node(name, last_call):
        return dyn_agent(reaper, tmp_path, name, ep, "2:3", 1, REC, env=env,
                         conf=FAST + f",is_host=0,last_call_timeout={last_call}")

    a = node("a", 300)
    wait_stderr(a, "1 more needed")
    a.signal(signal.SIGTERM)
    assert a.wait() == 128 + signal.SIGTERM, a.stderr()
    # b is the second arrival: its last call (0.5 s) runs, and ends before
    # its first waiting line (1 s, the same event loop), with b alone.
    b = node("b", 0.5)
    wait_stderr(b, "waiting for nodes: round 0, 1 joined")
    c = node("c", 300)
    wait_stderr(c, ": the round closes at 3 nodes, or when the last call ends in")
    wait_stderr(b, ": the round closes at 3 nodes, or at a later node's last call (this "
                   "node's ended ")
    d = node("d", 300)
    for n in (b, c, d):
        assert n.wait() == 0, n.stderr()
    assert sorted(read_envs(out)) == [(3, 0, 0), (3, 1, 0), (3, 2, 0)]
    assert "round 0, 2 joined" in b.stderr()


def test_a_dynamic_timeout_names_who_joined(reaper, tmp_path):
    host = os.uname().nodename
    a = dyn_agent(reaper, tmp_path, "a", f"127.0.0.1:{free_port()}", "2:3", 1, "exit 0",
                  conf="join_timeout=2")
    assert a.wait() == 1, a.stderr()
    assert (f"the rendezvous timed out after 2 s: round 0, 1 joined (0@{host}), --nnodes 2:3, "
            "needs at least 2") in a.stderr()


def test_nodes_with_different_run_ids_on_one_store_are_told(reaper, tmp_path):
    ep = f"127.0.0.1:{serve_store(reaper)}"
    conf = "is_host=0,join_timeout=3"
    a = dyn_agent(reaper, tmp_path, "a", ep, "2", 1, "exit 0", conf=conf, rdzv_id="jobA")
    b = dyn_agent(reaper, tmp_path, "b", ep, "2", 1, "exit 0", conf=conf, rdzv_id="jobB")
    for me, other in ((a, "jobB"), (b, "jobA")):
        assert me.wait() == 1, me.stderr()
        err = me.stderr()
        assert "the rendezvous timed out" in err
        assert f"this store also holds nodes of --rdzv-id {other}" in err, err


# ---- ddpstore status ------------------------------------------------------------------


def status(port, *args):
    r = subprocess.run([binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "status", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


def test_ddpstore_status_shows_a_job_from_its_rendezvous_to_its_end(reaper, tmp_path):
    port = serve_store(reaper)
    ep = f"127.0.0.1:{port}"
    out, env = out_env(tmp_path, "out")
    host = os.uname().nodename
    script = REC + 'while [ ! -e "$OUT/release" ]; do sleep 0.05; done'
    conf = FAST + ",is_host=0"
    assert status(port) == (3, "no ddprun rendezvous on this store\n")
    first = dyn_agent(reaper, tmp_path, "a0", ep, "2", 1, script, conf=conf, env=env)
    wait_for(lambda: "arrival 1: host" in status(port, "--rdzv-id", "job")[1],
             what="the first arrival in ddpstore status")
    rc, text = status(port)
    assert rc == 0, text
    assert "run id job: --rdzv-backend c10d, --nnodes 2:2" in text
    assert "round 0: open, waiting for nodes" in text and "1 joined" in text
    second = dyn_agent(reaper, tmp_path, "a1", ep, "2", 2, script, conf=conf, env=env)
    wait_for(lambda: len(read_envs(out)) == 3, what="the job running")
    wait_for(lambda: "heartbeat" in status(port, "--rdzv-id", "job")[1] and
             "s ago" in status(port, "--rdzv-id", "job")[1], what="heartbeats in the status")
    rc, text = status(port, "--rdzv-id", "job")
    assert rc == 0, text
    assert "round 0: closed with 2 nodes" in text
    assert f"node rank 0: host {host}, addr 127.0.0.1, 1 process" in text
    assert f"node rank 1: host {host}, addr 127.0.0.1, 2 processes" in text
    assert "attempt: 0" in text and "none yet (running)" in text and "job: not ended" in text
    (out / "release").touch()
    for a in (first, second):
        assert a.wait() == 0, a.stderr()
    rc, text = status(port, "--rdzv-id", "job")
    assert "round 0's end: ok" in text and "job: ended in round 0" in text, text
    assert status(port, "--rdzv-id", "other")[0] == 3


# ---- a lost node, as README and ddprun(1) tell it ---------------------------------------


def test_a_lost_node_ends_a_dynamic_job_with_75_without_restarts_left(reaper, tmp_path):
    port = free_port()
    ep = f"127.0.0.1:{port}"
    out, env = out_env(tmp_path, "out")
    script = REC + "exec sleep 60"
    # (3 s: the agents started one after another all count into round 0,
    # which a slow machine may not do within 0.3 s)
    conf = FAST + ",last_call_timeout=3"
    host = dyn_agent(reaper, tmp_path, "host", ep, "2:3", 1, script, conf=conf + ",is_host=1",
                     env=env)
    wait_for(lambda: listening(port), what="the store host")
    others = [dyn_agent(reaper, tmp_path, f"a{i}", ep, "2:3", 1, script,
                        conf=conf + ",is_host=0", env=env) for i in range(2)]
    wait_for(lambda: len(read_envs(out)) == 3, what="a three-node round")
    others[1].signal(signal.SIGKILL)
    # --max-restarts 0 (the default): two nodes would meet MIN, but no restart is left.
    for a in (host, others[0]):
        assert a.wait() == 75, a.stderr()
        assert "lost (the agent on host" in a.stderr()
