"""Several nodes with the static rendezvous (the default), each node an agent
on this machine on loopback: ranks in node-rank order with each node's own
--nproc-per-node; settings that differ between nodes fail everywhere naming
the node; a failure anywhere stops (or, with restarts left, restarts) every
node, whose workers find the last attempt's keys gone from the store; a lost
agent or store stops the others; the exit barrier."""
import contextlib
import json
import os
import re
import signal
import socket
import sys
import time

import pytest

from conftest import binary, free_port, pid_alive, run, wait_for
from mnutil import (FAST, RECORD, Agent, all_recorded, assert_all_dead, clean_env, ipv6_loopback,
                    node_args, read_envs, static_job, stop_process, wait_stderr, wait_workers,
                    worker_pids)


def check_world(envs, nprocs, port, restart=0):
    """Every worker's identity, as torchrun computes it."""
    world = sum(nprocs)
    rank = 0
    for node, n in enumerate(nprocs):
        for lr in range(n):
            e = envs[(rank, restart)]
            assert e["RANK"] == e["ROLE_RANK"] == str(rank)
            assert e["LOCAL_RANK"] == str(lr)
            assert e["WORLD_SIZE"] == e["ROLE_WORLD_SIZE"] == str(world)
            assert e["LOCAL_WORLD_SIZE"] == str(n)
            assert e["GROUP_RANK"] == str(node)
            assert e["GROUP_WORLD_SIZE"] == str(len(nprocs))
            assert e["MASTER_ADDR"] == "127.0.0.1"
            assert e["MASTER_PORT"] == str(port)
            assert e["TORCHELASTIC_USE_AGENT_STORE"] == "True"
            assert e["TORCHELASTIC_RESTART_COUNT"] == str(restart)
            rank += 1
    assert len([k for k in envs if k[1] == restart]) == world


def test_two_nodes_with_different_worker_counts(reaper, tmp_path):
    agents, out, port = static_job(reaper, tmp_path, [2, 3], RECORD)
    for a in agents:
        assert a.wait() == 0, a.stderr()
    check_world(read_envs(out), [2, 3], port)


def test_role_ranks_count_the_workers_of_each_role_as_torchrun_does(reaper, tmp_path):
    """Nodes of different --role: ROLE_RANK and ROLE_WORLD_SIZE count each
    role's workers apart, in group rank order (torchrun's
    _assign_worker_ranks); they were the global rank and world size, so no
    ps worker was its role's rank 0."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    env = clean_env(OUT=str(out))
    roles, nprocs = ["trainer", "ps", "trainer"], [2, 1, 1]
    agents = [Agent(reaper, tmp_path, f"node{r}",
                    node_args(3, r, port, nprocs[r], RECORD, ["--role", roles[r]]), env=env)
              for r in range(3)]
    for a in agents:
        assert a.wait() == 0, a.stderr()
    got = {rank: (e["ROLE_NAME"], e["ROLE_RANK"], e["ROLE_WORLD_SIZE"])
           for (rank, _), e in read_envs(out).items()}
    assert got == {0: ("trainer", "0", "3"), 1: ("trainer", "1", "3"), 2: ("ps", "0", "1"),
                   3: ("trainer", "2", "3")}, got


def test_rdzv_endpoint_is_the_store_of_a_static_job(reaper, tmp_path):
    """torchrun's get_rdzv_endpoint: with the static backend, --rdzv-endpoint
    HOST:PORT replaces --master-addr and --master-port (it was passed over:
    each node looked for node 0 at 127.0.0.1:29500)."""
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    env = clean_env(OUT=str(out))
    agents = [Agent(reaper, tmp_path, f"node{r}",
                    ["--nnodes", "2", "--node-rank", str(r), "--rdzv-endpoint",
                     f"localhost:{port}", "--nproc-per-node", str(n), "sh", "-c", RECORD],
                    env=env)
              for r, n in enumerate([1, 2])]
    for a in agents:
        assert a.wait() == 0, a.stderr()
    check_world(read_envs(out), [1, 2], port)


def test_four_nodes_started_in_any_order(reaper, tmp_path):
    nprocs = [1, 3, 2, 1]
    agents, out, port = static_job(reaper, tmp_path, nprocs, RECORD, order=[3, 1, 0, 2])
    for a in agents:
        assert a.wait() == 0, a.stderr()
    check_world(read_envs(out), nprocs, port)


def test_two_nodes_claiming_one_rank_fail_everywhere(reaper, tmp_path):
    port = free_port()
    env = clean_env()
    agents = [Agent(reaper, tmp_path, name, node_args(3, r, port, 1, "exit 0"), env=env)
              for name, r in (("node0", 0), ("first1", 1), ("second1", 1))]
    for a in agents:
        assert a.wait() == 2, a.stderr()
        assert "node rank 1 is claimed twice" in a.stderr()


@pytest.mark.parametrize("flag, n0, n1, says", [
    ("--nnodes", "2", "3", "--nnodes differs"),
    ("--max-restarts", "0", "1", "--max-restarts differs"),
    # one node's hang check declared a job that computed elsewhere hung
    ("--hang-timeout", "3", "0", "--hang-timeout differs"),
    # the waits for the others' failure lists and leaving count on every node's
    ("--shutdown-timeout", "5", "30", "--shutdown-timeout differs"),
    # the store's host judges every node's heartbeats by its own timeout: a
    # node beating every 4 s was lost to a host that waits 2 s
    ("--rdzv-conf", "heartbeat_timeout=2", "keep_alive_interval=4",
     "--rdzv-conf keep_alive_interval differs"),
    ("--rdzv-conf", "heartbeat_timeout=8", "heartbeat_timeout=12",
     "--rdzv-conf heartbeat_timeout differs"),
])
def test_settings_that_differ_fail_every_node_naming_both(reaper, tmp_path, flag, n0, n1, says):
    port = free_port()
    env = clean_env()
    args = [node_args(2, r, port, 1, "exit 0") for r in (0, 1)]
    args[0][:0] = [flag, n0]
    args[1][:0] = [flag, n1]
    if flag in ("--nnodes", "--shutdown-timeout"):  # node_args' own comes later and would win
        args[0][args[0].index(flag, 2) + 1] = n0
        args[1][args[1].index(flag, 2) + 1] = n1
    a0 = Agent(reaper, tmp_path, "node0", args[0], env=env)
    a1 = Agent(reaper, tmp_path, "node1", args[1], env=env)
    for a in (a0, a1):
        assert a.wait() == 2, a.stderr()
        err = a.stderr()
        assert says in err and "node 0 (host" in err and "node 1 (host" in err, err
        if flag == "--hang-timeout":
            assert "3 on node 0 (host" in err and "off on node 1 (host" in err, err
        if flag == "--shutdown-timeout":
            assert "5 on node 0 (host" in err and "the default on node 1 (host" in err, err


def test_a_node_rank_out_of_range_fails_the_others_too(reaper, tmp_path):
    port = free_port()
    env = clean_env()
    a0 = Agent(reaper, tmp_path, "node0", node_args(2, 0, port, 1, "exit 0"), env=env)
    bad = Agent(reaper, tmp_path, "bad", node_args(2, 5, port, 1, "exit 0"), env=env)
    for a in (bad, a0):
        assert a.wait() == 2, a.stderr()
        assert "node rank 5" in a.stderr() and "out of range" in a.stderr()


def test_a_node_rank_out_of_range_with_no_store_is_still_a_usage_error():
    # Nobody to tell: the error is said at once, the status stays 2.
    r = run([binary("ddprun"), "--nnodes", "2", "--node-rank", "5", "--master-addr",
             "127.0.0.1", "--master-port", str(free_port()), "--rdzv-conf", "join_timeout=1",
             "true"], env=clean_env(), timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert "--node-rank 5 is not below --nnodes 2" in lines[0]
    assert "could not tell the other nodes" in r.stderr
    # From PET_ variables (a Kubeflow pod's), they are said to be.
    r = run([binary("ddprun"), "--master-port", str(free_port()), "--rdzv-conf", "join_timeout=1",
             "true"], env=clean_env(PET_NNODES="2", PET_NODE_RANK="5"), timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("ddprun: error: --node-rank 5 (from PET_NODE_RANK) is not below "
                               "--nnodes 2 (from PET_NNODES) (telling the other nodes)\n"), r.stderr


def test_a_bad_node_waiting_only_to_tell_the_others_says_so(reaper, tmp_path):
    """Its wait is 30 s, not join_timeout's 600: the lines said
    "(join_timeout)" all the same."""
    a = Agent(reaper, tmp_path, "bad", ["--nnodes", "2", "--node-rank", "5", "--master-addr",
                                        "127.0.0.1", "--master-port", str(free_port()), "true"])
    wait_for(lambda: "nothing answers there yet" in a.stderr(), timeout=30, what="the wait said")
    assert ("retrying for up to" in a.stderr() and
            "s more (only to tell the other nodes of this node's error)" in a.stderr()), a.stderr()
    a.signal(signal.SIGTERM)
    a.wait()


# Until the test makes $OUT/go (bounded: a minute).
UNTIL_GO = ('echo "hi $RANK"; i=0; while [ ! -e "$OUT/go" ] && [ $i -lt 1200 ]; do sleep 0.05; '
            'i=$((i+1)); done; echo "bye $RANK"')


@pytest.mark.parametrize("nnodes, rank, nproc, prog, status, says", [
    (2, 1, 1, None, 2, "node rank 1 is claimed twice: by host {host} (pid {pid1})"),
    (2, 1, 3, None, 2, "node rank 1 is claimed twice: by host {host} (pid {pid1})"),
    (2, 0, 1, None, 2, "node rank 0 is claimed twice: by host {host} (pid {pid0}), whose store"),
    (3, 2, 1, None, 2, "--nnodes differs: 3 on node 2 (host {host}), 2 on node "),
    (3, 1, 1, None, 2, "--nnodes differs: 3 on node 1 (host {host}), 2 on node "),
    (2, 5, 1, None, 2, "--node-rank 5 is not below --nnodes 2"),
    (2, 1, 1, "/nonexistent/prog", 127, "/nonexistent/prog: no such file or directory"),
], ids=["rank-taken", "rank-taken-other-nproc", "rank-0-taken", "rank-beyond-the-jobs-nnodes",
        "other-nnodes", "rank-out-of-range", "no-program"])
def test_a_node_that_comes_after_the_round_closed_ends_alone_and_the_job_runs_on(
        reaper, tmp_path, nnodes, rank, nproc, prog, status, says):
    """A node that cannot join a job that already runs (its rank taken, its
    settings not the job's, its program missing) says so in one error line,
    naming the problem and the job's nodes, and ends at once with the status
    it would have given the open round (not after join_timeout); the job's
    nodes never hear of it."""
    agents, out, port = static_job(reaper, tmp_path, [1, 1], RECORD + UNTIL_GO)
    wait_workers(out, 2)
    args = node_args(nnodes, rank, port, nproc, "echo NEWCOMER",
                     extra=("--rdzv-conf", "join_timeout=600"))
    if prog is not None:
        args[-3:] = [prog]
    late = Agent(reaper, tmp_path, "late", args, env=clean_env(OUT=str(out)))
    assert late.wait(timeout=60) == status, late.stderr()
    err = late.stderr()
    assert [ln for ln in err.splitlines() if "error:" in ln] == [err.splitlines()[0]], err
    assert says.format(host=socket.gethostname(), pid0=agents[0].p.pid,
                       pid1=agents[1].p.pid) in err.splitlines()[0], err
    assert (f"the job at 127.0.0.1:{port} already runs with its 2 nodes (--nnodes 2) and goes "
            "on without this one") in err, err
    assert late.stdout() == ""
    assert all(a.p.poll() is None for a in agents)  # the job runs on
    (out / "go").touch()
    for r, a in enumerate(agents):
        assert a.wait() == 0, a.stderr()
        assert a.stdout().split() == ["hi", str(r), "bye", str(r)]
        assert "error" not in a.stderr() and str(late.p.pid) not in a.stderr(), a.stderr()
        assert "round 1" not in a.stderr(), a.stderr()


def test_a_worker_failure_on_node_1_stops_node_0_with_its_status(reaper, tmp_path):
    script = RECORD + '[ "$RANK" = 3 ] && { ' + all_recorded(4) + 'exit 7; }; exec sleep 60'
    agents, out, _ = static_job(reaper, tmp_path, [2, 2], script)
    for a in agents:
        assert a.wait() == 7, a.stderr()
    assert_all_dead(worker_pids(out))
    err0 = agents[0].stderr()
    assert "rank 3 (local rank 1) on node 1" in err0 and "exit status 7" in err0
    # Node 0 prints the whole job's report: node 1's failure, root cause first.
    root = err0.split("Root Cause (first observed failure):", 1)[1]
    assert "rank      : 3 (local_rank: 1)" in root and "exitcode  : 7" in root
    # Node 1 prints its own.
    assert "exitcode  : 7" in agents[1].stderr()


def late_trap(tmp_path, message):
    """Shell that makes the worker write an error file with message, and
    exit 2, on SIGTERM (a checkpoint on SIGTERM that fails, say)."""
    late = tmp_path / "late.json"
    late.write_text(json.dumps({"message": {"message": message, "extraInfo": {
        "py_callstack": message, "timestamp": str(int(time.time()))}}}))
    return f'trap \'cp "{late}" "$TORCHELASTIC_ERROR_FILE"; exit 2\' TERM; '


def test_a_failure_that_comes_after_the_other_nodes_word_is_reported(reaper, tmp_path):
    # Rank 1's failure came after its node had stopped for rank 0's: it was
    # not recorded (node 1 printed no report, node 0's listed no other
    # failure). It is one now, after the first (the job's status is rank 0's).
    # Rank 1 writes its error file on SIGTERM (as a rank that saw what went
    # wrong, and is slower to exit than the other node's word, does).
    script = ('[ "$RANK" = 0 ] && { i=0; while [ ! -e "$OUT/ready" ] && [ $i -lt 1500 ]; do '
              'sleep 0.02; i=$((i+1)); done; exit 1; }; '
              + late_trap(tmp_path, "RuntimeError: seen too late") +
              'touch "$OUT/ready"; sleep 60 & wait')
    out, port = tmp_path / "out", free_port()
    out.mkdir()
    parents = [tmp_path / f"parent{r}.json" for r in range(2)]
    agents = [Agent(reaper, tmp_path, f"node{r}", node_args(2, r, port, 1, script),
                    env=clean_env(OUT=str(out), TORCHELASTIC_ERROR_FILE=str(parents[r])))
              for r in range(2)]
    for a in agents:
        assert a.wait() == 1, a.stderr()
    err0, err1 = agents[0].stderr(), agents[1].stderr()
    # An outer launcher's error file on node 1 gets nothing: its failure may
    # be the stop's doing.
    assert not parents[1].exists(), parents[1].read_text()
    others, root = err0[err0.index("FAILED\n"):].split("Root Cause (first observed failure):")
    assert "rank      : 0 (local_rank: 0)" in root and "exitcode  : 1" in root, err0
    assert "rank      : 1 (local_rank: 0)" in others and "exitcode  : 2" in others, err0
    assert "RuntimeError: seen too late" in others, err0
    # It came from node 1's list marked as after the stop.
    assert "note      : failed after the stop began" in others, err0
    assert "exitcode  : 2" in err1 and "RuntimeError: seen too late" in err1, err1
    # Node 1's report is its own; its first failure is not the job's.
    assert ("  note      : this node's first failure only: the job's root cause\n"
            "              is rank 0 (local rank 0) on node 0 (host ") in err1, err1


@pytest.mark.parametrize("how", ["lost", "signal"])
def test_an_error_file_written_on_sigterm_after_a_lost_node_or_a_signal_is_no_failure(
        reaper, tmp_path, how):
    # Workers that fail in their SIGTERM handler (a checkpoint against peers
    # already gone) after the round ended for a lost node or another node's
    # signal: the stop is what they failed of. The status stays 75 or 143,
    # and no report names them (a hostile review's case: node 0 exited 2).
    agents, out, _ = static_job(reaper, tmp_path, [1, 1],
                                RECORD + late_trap(tmp_path, "RuntimeError: checkpoint failed")
                                + "sleep 60 & wait", extra=["--rdzv-conf", FAST])
    wait_workers(out, 2)
    agents[1].signal(signal.SIGKILL if how == "lost" else signal.SIGTERM)
    assert agents[0].wait() == (75 if how == "lost" else 143), agents[0].stderr()
    assert "Root Cause" not in agents[0].stderr(), agents[0].stderr()


TERM_WORKER = os.path.join(os.path.dirname(__file__), "term_worker.py")


def test_a_worker_failure_stops_every_other_worker_with_one_sigterm(reaper, tmp_path):
    # Node 0 stops its other worker for rank 0's failure, then hears the
    # job's end (its own) from the store: that halt used to send SIGTERM
    # again, so rank 1 got two (unless the kernel merged them: not always).
    script = (RECORD + '[ "$RANK" = 0 ] && { for r in 1 2 3; do '
              'while [ ! -e "$OUT/ready.$r" ]; do sleep 0.02; done; done; exit 7; }; '
              f'exec "{sys.executable}" "{TERM_WORKER}" "$OUT"')
    agents, out, _ = static_job(reaper, tmp_path, [2, 2], script)
    for a in agents:
        assert a.wait() == 7, a.stderr()
    assert_all_dead(worker_pids(out))
    for r in (1, 2, 3):
        assert (out / f"term.{r}").read_text() == "SIGTERM ddprun\n", (r, agents[0].stderr())


def test_kill_9_of_an_agent_stops_the_other_node(reaper, tmp_path):
    agents, out, _ = static_job(reaper, tmp_path, [1, 2], RECORD + "exec sleep 60",
                                extra=["--rdzv-conf", FAST])
    wait_workers(out, 3)
    agents[1].signal(signal.SIGKILL)
    assert agents[0].wait() == 75, agents[0].stderr()
    assert "node 1 lost (the agent on host" in agents[0].stderr()
    assert_all_dead(worker_pids(out))


def test_kill_9_of_the_store_host_stops_the_other_node(reaper, tmp_path):
    agents, out, port = static_job(reaper, tmp_path, [2, 1], RECORD + "exec sleep 60",
                                   extra=["--rdzv-conf", FAST])
    wait_workers(out, 3)
    agents[0].signal(signal.SIGKILL)
    assert agents[1].wait() == 75, agents[1].stderr()
    assert f"lost the rendezvous store at 127.0.0.1:{port}" in agents[1].stderr()
    assert_all_dead(worker_pids(out))


def test_a_silent_node_is_lost_after_the_heartbeat_timeout(reaper, tmp_path):
    agents, out, _ = static_job(reaper, tmp_path, [1, 1, 1], RECORD + "exec sleep 60",
                                extra=["--rdzv-conf", FAST])
    wait_workers(out, 3)
    try:
        agents[2].signal(signal.SIGSTOP)  # its connection stays open: no FIN
        for a in agents[:2]:
            assert a.wait() == 75, a.stderr()
            assert "node 2 lost (no heartbeat from host" in a.stderr()
    finally:
        stop_process(agents[2].p)
    pids = [int((out / f"pid.{r}.0").read_text()) for r in (0, 1)]
    assert_all_dead(pids)


def test_the_store_host_does_not_wait_to_see_leave_a_node_whose_list_never_came(reaper,
                                                                                 tmp_path):
    """Two nodes go silent at once (SIGSTOP: their connections stay open, as
    under a cut cable). The round's end names one lost; node 0 waits the
    report's time for the other's failure list (--shutdown-timeout plus 5
    s), which never comes, and then it waited its linger and
    --shutdown-timeout again for that node to leave the store (81 s in all
    at the defaults, found by a Slurm user's review)."""
    agents, out, _ = static_job(reaper, tmp_path, [1, 1, 1], RECORD + "exec sleep 60",
                                extra=["--rdzv-conf", FAST, "--shutdown-timeout", "3"])
    wait_workers(out, 3)
    try:
        agents[1].signal(signal.SIGSTOP)
        agents[2].signal(signal.SIGSTOP)
        assert agents[0].wait() == 75, agents[0].stderr()
        err = agents[0].stderr()
        assert "lost (no heartbeat from host" in err, err
        assert "no readable failure list from node" in err, err
        assert "for every node to leave the rendezvous store" not in err, err
    finally:
        stop_process(agents[1].p)
        stop_process(agents[2].p)


def test_the_store_host_says_it_waits_for_a_node_to_leave_and_a_second_signal_ends_it(
        reaper, tmp_path):
    """Node 1's agent is stopped (SIGSTOP: its connection stays open) and
    node 0, the store's host, gets SIGTERM: it waits, bounded, for node 1 to
    read the end and leave the store. It waited 40 s (its linger and
    --shutdown-timeout) without a word, so the user at its terminal saw a
    Ctrl-C do nothing; now it says what it waits for, and for how long, and
    a second SIGTERM ends the wait at once."""
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], RECORD + "exec sleep 60",
                                extra=["--shutdown-timeout", "30"])
    wait_workers(out, 2)
    try:
        agents[1].signal(signal.SIGSTOP)
        agents[0].signal(signal.SIGTERM)
        wait_stderr(agents[0], "1 node has not left the rendezvous store yet")
        err = agents[0].stderr()
        m = re.search(r"waiting up to (\d+) s more for it; a signal \(Ctrl-C\) closes the store "
                      r"now", err)
        assert m and 0 < int(m.group(1)) < 40, err  # of its linger and --shutdown-timeout
        assert agents[0].p.poll() is None, err
        agents[0].signal(signal.SIGTERM)
        assert agents[0].wait() == 143, agents[0].stderr()
        assert "for every node to leave the rendezvous store" not in agents[0].stderr()
    finally:
        stop_process(agents[1].p)
    assert_all_dead([int((out / "pid.0.0").read_text())])


# Round 0: rank 0 fails once all three run; the other workers ignore
# SIGTERM, so their nodes take --shutdown-timeout (5 s) to stop them before
# round 1 (which never comes: a node is lost meanwhile).
BETWEEN = (RECORD + 'trap "" TERM; if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
           '[ "$RANK" = 0 ] && { ' + all_recorded(3) + 'exit 3; }; sleep 60; fi')


def test_a_node_killed_between_attempts_stops_the_others_at_once(reaper, tmp_path):
    """Node 2's agent dies while its workers stop for a restart: the next
    round cannot close without it, so every node ends with 75 saying so.
    Its on-close registration was still on the last round's end (already
    written): the others waited join_timeout (600 s), then ended with 1."""
    agents, out, _ = static_job(reaper, tmp_path, [1, 1, 1], BETWEEN,
                                extra=["--max-restarts", "2"])
    wait_stderr(agents[2], "restarting every node")
    agents[2].signal(signal.SIGKILL)
    for a in agents[:2]:
        assert a.wait() == 75, a.stderr()
        assert "node 2 lost (the agent on host" in a.stderr()
        assert "during the rendezvous of round 1" in a.stderr()
    assert_all_dead(worker_pids(out))


def test_the_store_host_stopping_slow_workers_ends_once_they_are_gone(reaper, tmp_path):
    """Node 1's rank fails; node 0's worker ignores SIGTERM (it takes
    --shutdown-timeout to stop); node 1's agent dies while they stop. Node
    0 learned it at once, still counted in round 0, and then waited for
    every node to count out of round 0 (none would: node 1 is gone, and a
    node in round 1 no longer counts), its linger plus --shutdown-timeout,
    and said "waited N s for every node to leave". Now it ends once its
    worker is gone."""
    script = (RECORD + 'trap "" TERM; if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
              '[ "$RANK" = 1 ] && { ' + all_recorded(2) + 'exit 3; }; sleep 60; fi')
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], script,
                                extra=["--max-restarts", "2"])
    wait_stderr(agents[0], "restarting every node")
    agents[1].signal(signal.SIGKILL)
    assert agents[0].wait() == 75, agents[0].stderr()
    err = agents[0].stderr()
    assert "node 1 lost (the agent on host" in err, err
    assert "for every node to leave the rendezvous store" not in err, err
    assert_all_dead(worker_pids(out))


def test_sigterm_to_the_store_host_between_attempts_ends_the_job_once_its_workers_stop(
        reaper, tmp_path):
    """Node 1's rank fails; node 0's worker takes 8 s to stop; node 0 (the
    store's host) gets SIGTERM meanwhile. Node 1, waiting in round 1, reads
    why at once; node 0 ends once its worker is gone. It waited for the
    nodes to count out of round 0, which none did any more: its linger and
    --shutdown-timeout (40 s here; the agents' wait bound is 30 s)."""
    script = (RECORD + 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then [ "$RANK" = 1 ] && { '
              + all_recorded(2) + 'exit 3; }; trap "sleep 8; exit 1" TERM; sleep 60 & wait; fi')
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], script,
                                extra=["--max-restarts", "2", "--shutdown-timeout", "30"])
    wait_stderr(agents[0], "restarting every node")
    agents[0].signal(signal.SIGTERM)
    for a in agents:
        assert a.wait() == 143, a.stderr()
    assert "node 0 (host" in agents[1].stderr(), agents[1].stderr()
    assert "received SIGTERM during the rendezvous" in agents[1].stderr(), agents[1].stderr()
    assert "for every node to leave" not in agents[0].stderr(), agents[0].stderr()
    assert_all_dead(worker_pids(out))


def test_a_node_silent_between_attempts_is_lost_after_the_heartbeat_timeout(reaper, tmp_path):
    """Node 2's agent stops (SIGSTOP: its connection stays open) while the
    workers stop for a restart: the store's host, which watched heartbeats
    only while workers ran, now watches the next round's, and every node
    ends with 75 naming it. They waited join_timeout, then ended with 1."""
    agents, out, _ = static_job(reaper, tmp_path, [1, 1, 1], BETWEEN,
                                extra=["--max-restarts", "2", "--rdzv-conf", FAST])
    wait_stderr(agents[2], "restarting every node")
    try:
        agents[2].signal(signal.SIGSTOP)
        for a in agents[:2]:
            assert a.wait() == 75, a.stderr()
            assert "node 2 lost (no heartbeat from host" in a.stderr()
            assert "during the rendezvous of round 1" in a.stderr()
    finally:
        stop_process(agents[2].p)
    assert_all_dead(worker_pids(out))


def test_torchruns_keep_alive_interval_keeps_healthy_nodes(reaper, tmp_path):
    """keep_alive_interval=5, torchrun's default: a node is lost after 15 s
    without a heartbeat (keep_alive_max_attempt 3), as in torchrun. ddprun
    took healthy nodes for lost after its 5 s heartbeat_timeout, sampled
    every 5 s, and ended the job with 75."""
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], RECORD + "sleep 12",
                                extra=["--rdzv-conf", "keep_alive_interval=5"])
    for a in agents:
        assert a.wait() == 0, a.stderr()
        assert "lost" not in a.stderr()


def test_a_signal_to_one_node_ends_every_node_with_its_status(reaper, tmp_path):
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], RECORD + "exec sleep 60")
    wait_workers(out, 2)
    agents[1].signal(signal.SIGTERM)
    for a in agents:
        assert a.wait() == 143, a.stderr()
    assert "node 1 (host" in agents[0].stderr() and "received SIGTERM" in agents[0].stderr()
    assert_all_dead(worker_pids(out))


def children(pid):
    """The pids of pid's children (those it has not reaped; ddprun's own
    watchdog among them)."""
    kids = []
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/children") as f:
            kids += [int(k) for k in f.read().split()]
    return kids


@contextlib.contextmanager
def store_host_stopped(reaper, tmp_path, script="exec sleep 60", extra=()):
    """A job of 2 nodes, one worker each (script), whose node 0 (the store's
    host) is stopped (SIGSTOP) as node 1 takes SIGTERM; node 0 goes on
    (SIGCONT) on the way out. Yields the agents and the workers' record
    directory."""
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], RECORD + script, extra=extra)
    wait_workers(out, 2)
    try:
        agents[0].signal(signal.SIGSTOP)
        agents[1].signal(signal.SIGTERM)
        yield agents, out
    finally:
        agents[0].signal(signal.SIGCONT)


def test_a_node_hurried_by_a_second_signal_still_tells_what_the_others_wait_for(reaper,
                                                                              tmp_path):
    # Node 0, the store's host, is stopped while node 1 takes SIGTERM: node 1
    # stops its worker and waits for the store to take its end when a second
    # SIGTERM hurries it out. On the way it must still publish its failures
    # and count itself as left: node 0 otherwise waited out its bounds for
    # them (--shutdown-timeout + 5 s for the list, then 10 s + the timeout
    # for the count) and said so.
    with store_host_stopped(reaper, tmp_path) as (agents, out):
        worker = int((out / "pid.1.0").read_text())
        wait_for(lambda: worker not in children(agents[1].p.pid), timeout=30,
                 what="node 1's worker reaped")
        agents[1].signal(signal.SIGTERM)
        assert agents[1].wait() == 143, agents[1].stderr()
    assert agents[0].wait() == 143, agents[0].stderr()
    err = agents[0].stderr()
    assert "node 1 (host" in err and "received SIGTERM" in err, err
    assert "no readable failure list" not in err and "waited" not in err, err
    assert_all_dead(worker_pids(out))


@pytest.mark.parametrize("script", ["exec sleep 60",
                                    "trap 'sleep 8; exit 0' TERM; sleep 60 & wait $!"])
def test_a_node_stopped_by_a_signal_keeps_its_status_when_the_store_goes_silent(
        reaper, tmp_path, script):
    # Node 0, the store's host, is stopped while node 1 takes SIGTERM: node 1
    # stops its worker, and hears nothing from the store for the heartbeat
    # timeout (5 s), after its worker ended or (trap) while it still takes 8
    # s to (within --shutdown-timeout). It was told to stop, so it exits 143 as it would with a store
    # that answered, not 75 (a lost store): the signal is why it ended.
    with store_host_stopped(reaper, tmp_path, script,
                            extra=["--shutdown-timeout", "20"]) as (agents, out):
        assert agents[1].wait() == 143, agents[1].stderr()
    err = agents[1].stderr()
    assert "received SIGTERM: stopping the workers" in err, err
    assert re.search(r"no reply from the rendezvous store at \S+ for [\d.]+ s: leaving "
                     r"without it\n", err), err
    assert agents[0].wait() == 143, agents[0].stderr()
    assert "node 1 (host" in agents[0].stderr(), agents[0].stderr()
    assert_all_dead(worker_pids(out))


def test_restarts_are_coordinated_with_one_restart_count(reaper, tmp_path):
    # Attempt 0: rank 2 fails, the others wait. Attempt 1: every worker succeeds.
    script = (RECORD + '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0; '
              '[ "$RANK" = 2 ] && { ' + all_recorded(3) + 'exit 3; }; exec sleep 60')
    agents, out, port = static_job(reaper, tmp_path, [2, 1], script,
                                   extra=["--max-restarts", "2"])
    for a in agents:
        assert a.wait() == 0, a.stderr()
        assert "restarting every node (restart 1 of 2)" in a.stderr()
    envs = read_envs(out)
    check_world(envs, [2, 1], port, restart=0)
    check_world(envs, [2, 1], port, restart=1)
    assert {e["TORCHELASTIC_RESTART_COUNT"] for e in envs.values()} == {"0", "1"}


def test_a_restart_finds_the_store_empty_but_for_ddpruns_keys(reaper, tmp_path):
    # Static workers use node 0's rendezvous store, and PyTorch 2.x's env://
    # puts no per-attempt prefix on its keys: the last attempt's (gloo's peer
    # addresses) must be gone, ddprun's own must stay (the job needs them).
    script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
              '"$DDPSTORE" set "addr/$RANK" old || exit 9; ' + RECORD +
              '[ "$RANK" = 2 ] && { ' + all_recorded(3) + 'exit 3; }; exec sleep 60; fi; ' +
              RECORD + '"$DDPSTORE" get "addr/$RANK"; echo $? > "$OUT/get.$RANK"; '
              '"$DDPSTORE" keys > "$OUT/keys.$RANK"')
    agents, out, _ = static_job(reaper, tmp_path, [2, 1], script, extra=["--max-restarts", "1"],
                                env={"DDPSTORE": binary("ddpstore")})
    for a in agents:
        assert a.wait() == 0, a.stderr()
        assert "restarting every node (restart 1 of 1)" in a.stderr()
    for rank in range(3):
        assert (out / f"get.{rank}").read_text().strip() == "3"  # not found
        keys = (out / f"keys.{rank}").read_text().split()
        assert not [k for k in keys if k.startswith("addr/")], keys
        assert "ddprun/none/config" in keys, keys


def test_no_restarts_left_ends_the_job_with_the_failure(reaper, tmp_path):
    script = RECORD + '[ "$RANK" = 0 ] && { ' + all_recorded(2) + 'exit 4; }; exec sleep 60'
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], script, extra=["--max-restarts", "1"])
    for a in agents:
        assert a.wait() == 4, a.stderr()
    assert set(read_envs(out)) == {(0, 0), (1, 0), (0, 1), (1, 1)}


def test_a_finished_node_waits_at_the_exit_barrier(reaper, tmp_path):
    # Node 1's worker ends at once; node 0's only once released. Node 1's
    # ddprun must still be there (the store's host may need it) until then.
    script = (RECORD + '[ "$GROUP_RANK" = 1 ] && exit 0; '
              'while [ ! -e "$OUT/release" ]; do sleep 0.05; done; touch "$OUT/node0-done"')
    agents, out, _ = static_job(reaper, tmp_path, [1, 1], script)
    wait_for(lambda: (out / "pid.1.0").exists(), what="node 1's worker")
    pid1 = int((out / "pid.1.0").read_text())
    wait_for(lambda: not pid_alive(pid1), what="node 1's worker to end")
    assert agents[1].p.poll() is None  # its worker is done: it waits for node 0
    (out / "release").touch()
    for a in agents:
        assert a.wait() == 0, a.stderr()
    assert (out / "node0-done").exists()


def test_a_node_alone_gives_up_after_the_join_timeout(reaper, tmp_path):
    a = Agent(reaper, tmp_path, "node0",
              node_args(2, 0, free_port(), 1, "exit 0", ["--rdzv-conf", "join_timeout=1"]))
    assert a.wait() == 1, a.stderr()
    assert "the rendezvous timed out after 1 s in round 0: 1 of 2 joined" in a.stderr()


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_an_ipv6_master_address(reaper, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port(socket.AF_INET6, "::1")
    env = clean_env(OUT=str(out))
    agents = [Agent(reaper, tmp_path, f"node{r}",
                    ["--nnodes", "2", "--node-rank", str(r), "--master-addr", "::1",
                     "--master-port", str(port), "sh", "-c", RECORD], env=env) for r in (0, 1)]
    for a in agents:
        assert a.wait() == 0, a.stderr()
    envs = read_envs(out)
    assert sorted(envs) == [(0, 0), (1, 0)]
    assert {e["MASTER_ADDR"] for e in envs.values()} == {"::1"}


def test_a_node_killed_during_the_rendezvous_ends_the_others_at_once(reaper, tmp_path):
    port = free_port()
    env = clean_env()
    a0 = Agent(reaper, tmp_path, "node0", node_args(3, 0, port, 1, "exit 0"), env=env)
    a1 = Agent(reaper, tmp_path, "node1", node_args(3, 1, port, 1, "exit 0"), env=env)

    def joined():  # both counted in round 0 (node 2 never comes)
        r = run([binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "--timeout", "5",
                 "get", "ddprun/none/r0/count"])
        return r.returncode == 0 and r.stdout.strip() == "2"

    wait_for(joined, what="two nodes in the rendezvous")
    a1.signal(signal.SIGKILL)
    assert a0.wait() == 75, a0.stderr()
    assert "node 1 lost (the agent on host" in a0.stderr()
    assert "during the rendezvous of round 0" in a0.stderr()


def test_a_silent_store_host_is_noticed_by_the_others(reaper, tmp_path):
    agents, out, port = static_job(reaper, tmp_path, [1, 1], RECORD + "exec sleep 60",
                                   extra=["--rdzv-conf", FAST])
    wait_workers(out, 2)
    try:
        agents[0].signal(signal.SIGSTOP)  # no FIN: only a heartbeat's missing reply tells
        assert agents[1].wait() == 75, agents[1].stderr()
        assert f"no reply from the rendezvous store at 127.0.0.1:{port}" in agents[1].stderr()
    finally:
        stop_process(agents[0].p)
    assert_all_dead([int((out / "pid.1.0").read_text())])


@pytest.mark.parametrize("prog, status, says", [
    ("/nonexistent/prog", 127, "/nonexistent/prog: no such file or directory"),
    ("/usr/share", 126, "/usr/share"),
])
def test_a_program_missing_on_one_node_ends_every_node_with_its_status(reaper, tmp_path, prog, status,
                                                                says):
    """One node cannot start its program (not there, or not executable: a
    venv missing on that node): it says so and joins the rendezvous only to
    end it, so every node exits with its status at once. The others used to
    wait join_timeout (600 s) for it, then end with 1."""
    port = free_port()
    env = clean_env()
    a0 = Agent(reaper, tmp_path, "node0", node_args(2, 0, port, 1, "sleep 20"), env=env)
    bad = Agent(reaper, tmp_path, "bad",
                [*node_args(2, 1, port, 1, "true")[:-3], prog], env=env)
    for a in (bad, a0):
        assert a.wait() == status, a.stderr()
        assert says in a.stderr()
    assert "(telling the other nodes)" in bad.stderr()
    assert "(on host " in a0.stderr()


def test_a_node_without_a_gpu_for_nproc_gpu_ends_every_node(reaper, tmp_path):
    """--nproc-per-node=gpu on a node that has none (no CUDA driver here, and
    no device visible anywhere with CUDA_VISIBLE_DEVICES empty): that node
    says so and ends the round, so every node exits 1 at once instead of
    waiting join_timeout for it."""
    port = free_port()
    env = clean_env()
    a0 = Agent(reaper, tmp_path, "node0", node_args(2, 0, port, 1, "sleep 20"), env=env)
    args = node_args(2, 1, port, 1, "true")
    i = args.index("--nproc-per-node")
    bad = Agent(reaper, tmp_path, "bad", [*args[:i], "--nproc-per-node=gpu", *args[i + 2:]],
                env=clean_env(CUDA_VISIBLE_DEVICES=""))
    for a in (bad, a0):
        assert a.wait() == 1, a.stderr()
        assert "--nproc-per-node=gpu: no visible GPU" in a.stderr(), a.stderr()
    assert "(telling the other nodes)" in bad.stderr()
    assert "(on host " in a0.stderr()


def test_a_program_missing_with_no_store_keeps_its_status():
    r = run([binary("ddprun"), "--nnodes", "2", "--node-rank", "1", "--master-addr",
             "127.0.0.1", "--master-port", str(free_port()), "--rdzv-conf", "join_timeout=1",
             "/nonexistent/prog"], env=clean_env(), timeout=60)
    assert r.returncode == 127, r.stderr
    assert "could not tell the other nodes" in r.stderr


def test_a_program_missing_on_the_store_host_still_tells_a_late_node(reaper, tmp_path):
    """Node 0 (the store's host) cannot start its program and node 1 comes
    a moment later: node 0 keeps its store up a while, so node 1 still reads
    why the job ends (127) rather than waiting join_timeout for a store that
    closed."""
    port = free_port()
    env = clean_env()
    bad = Agent(reaper, tmp_path, "bad", [*node_args(2, 0, port, 1, "true")[:-3],
                                          "/nonexistent/prog"], env=env)
    wait_for(lambda: "(telling the other nodes)" in bad.stderr(), timeout=10,
             what="node 0 to say it cannot run its program")
    time.sleep(1)
    a1 = Agent(reaper, tmp_path, "node1", node_args(2, 1, port, 1, "sleep 20"), env=env)
    for a in (a1, bad):
        assert a.wait() == 127, a.stderr()
    assert "/nonexistent/prog: no such file or directory (on host " in a1.stderr()


@pytest.mark.parametrize("failing_node", [0, 1])
def test_each_nodes_error_file_gets_only_a_root_cause_that_ran_there(reaper, tmp_path,
                                                                       failing_node):
    """Each agent's own TORCHELASTIC_ERROR_FILE (an outer launcher's, per
    node) gets the root cause's error report with errorCode when that rank ran
    on its node. Node 0 reports for the whole job, and copied the path of node
    1's error file from its own host: another node's file raw (a shared /tmp),
    without errorCode, or a warning blaming its own file (separate hosts)."""
    port = free_port()
    script = (f'if [ "$GROUP_RANK" = {failing_node} ]; then printf \'{{"message": '
              '{"message": "boom", "extraInfo": {"py_callstack": "", "timestamp": "1"}}}\' '
              '> "$TORCHELASTIC_ERROR_FILE"; exit 5; fi; exec sleep 60')
    parents = [tmp_path / f"parent{r}.json" for r in range(2)]
    agents = [Agent(reaper, tmp_path, f"node{r}", node_args(2, r, port, 1, script),
                    env=clean_env(TORCHELASTIC_ERROR_FILE=str(parents[r])))
              for r in range(2)]
    for a in agents:
        assert a.wait(60) == 5, a.stderr()
        assert "warning" not in a.stderr()
    data = json.loads(parents[failing_node].read_text())
    assert data["message"]["message"] == "boom" and data["message"]["errorCode"] == 5
    assert not parents[1 - failing_node].exists()


def test_node_0_writes_its_own_failure_when_the_root_cause_ran_elsewhere(reaper, tmp_path):
    """Both nodes' workers fail, node 1's first (the job's root cause): node
    0's error file got nothing, though one of its workers failed with an
    error file of its own (torchrun's agent there writes its own)."""
    port = free_port()
    report = ('printf \'{"message": {"message": "boom%s", "extraInfo": {"py_callstack": "", '
              '"timestamp": "1"}}}\' "$GROUP_RANK" > "$TORCHELASTIC_ERROR_FILE"; ')
    script = (f'if [ "$GROUP_RANK" = 0 ]; then {report} trap "exit 5" TERM; '
              'while :; do sleep 0.05; done; fi; '
              f'while [ ! -e "{tmp_path}/go" ]; do sleep 0.02; done; {report} exit 3')
    parents = [tmp_path / f"parent{r}.json" for r in range(2)]
    agents = [Agent(reaper, tmp_path, f"node{r}", node_args(2, r, port, 1, script),
                    env=clean_env(TORCHELASTIC_ERROR_FILE=str(parents[r])))
              for r in range(2)]
    # node 0's worker has written its error file before node 1's fails
    wait_for(lambda: len(list((tmp_path / "tmpdir").rglob("*error.json"))) >= 1, timeout=30,
             what="node 0's error file")
    (tmp_path / "go").write_text("")
    for a in agents:
        assert a.wait(60) == 3, a.stderr()
    assert "root cause (first observed failure): rank 1" in agents[0].stderr() or \
        "rank      : 1 (local_rank: 0)" in agents[0].stderr(), agents[0].stderr()
    mine = [json.loads(p.read_text())["message"] for p in parents]
    assert mine[1]["message"] == "boom1" and mine[1]["errorCode"] == 3
    assert mine[0]["message"] == "boom0", mine[0]


def test_a_malformed_end_value_in_the_store_ends_every_node(reaper, tmp_path):
    """A store client writes what no ddprun writes as the running round's
    end: every node says so and ends with status 1, its workers stopped;
    none waits for an end it can read, and the store's host does not wait
    for ever for the others to leave."""
    agents, out, port = static_job(reaper, tmp_path, [1, 2], RECORD + "exec sleep 60")
    wait_workers(out, 3)
    r = run([binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "--timeout", "5",
             "set", "ddprun/none/r0/end", "{not an end"])
    assert r.returncode == 0, r.stderr
    for a in agents:
        assert a.wait(timeout=60) == 1, a.stderr()
        assert "error: round 0's end value in the store is malformed" in a.stderr(), a.stderr()
    assert_all_dead(worker_pids(out))


def test_a_signal_while_the_workers_stop_after_a_failure_keeps_the_report(reaper, tmp_path):
    """Rank 1 fails; node 0's worker takes its time to stop, and node 0's
    ddprun gets SIGTERM meanwhile (an impatient Ctrl-C, a scancel): its
    status stayed the failure's, but the job's failure summary, which node 0
    prints, was gone."""
    port = free_port()
    a0 = Agent(reaper, tmp_path, "node0", node_args(2, 0, port, 1, 'trap "" TERM; sleep 30'))
    a1 = Agent(reaper, tmp_path, "node1",
               node_args(2, 1, port, 1, "sleep 1; echo boom >&2; exit 5"))
    wait_stderr(a0, "failed with exit status 5: stopping the workers")
    a0.signal(signal.SIGTERM)
    assert a0.wait(timeout=60) == 5, a0.stderr()
    assert a1.wait(timeout=60) == 5, a1.stderr()
    err = a0.stderr()
    assert "received SIGTERM: passing it on to the workers, which are stopping already" in err, err
    assert "Root Cause (first observed failure):" in err and "    boom\n" in err, err


def test_the_failing_nodes_own_line_does_not_say_its_workers_were_stopping_already(reaper,
                                                                                    tmp_path):
    """Local rank 1 of node 1 fails while its local rank 0 runs: node 1's
    line about it said "the workers are stopping already", as if something
    else had stopped them; its own failure is what stops them."""
    port = free_port()
    a0 = Agent(reaper, tmp_path, "node0", node_args(2, 0, port, 1, "sleep 30"))
    a1 = Agent(reaper, tmp_path, "node1", node_args(
        2, 1, port, 2, 'if [ "$LOCAL_RANK" = 1 ]; then sleep 1; exit 5; fi; sleep 30'))
    assert a1.wait(timeout=60) == 5, a1.stderr()
    assert a0.wait(timeout=60) == 5, a0.stderr()
    err = a1.stderr()
    # (or "the job ends": its local rank 0, stopped by then, is gone too)
    assert re.search(r"rank 2 \(local rank 1\) on node 1 \(host [^)]*\) failed with exit "
                     r"status 5: (stopping the workers|the workers are stopping|the job "
                     r"ends)\n", err), err
    assert "stopping already" not in err, err


def test_the_store_lost_between_attempts_ends_the_job_with_75(reaper, tmp_path):
    """Rank 1 fails and every node restarts; node 0, the store's host, dies
    while its worker still stops: node 1, waiting for the next round, ended
    with the restarted attempt's worker status (5), which a wrapper that
    retries on 75 takes for the program's own failure, and said it stopped
    workers it did not have."""
    port = free_port()
    extra = ["--max-restarts", "2"]
    a0 = Agent(reaper, tmp_path, "node0",
               node_args(2, 0, port, 1, 'trap "sleep 3; exit 0" TERM; sleep 100 & wait', extra))
    a1 = Agent(reaper, tmp_path, "node1",
               node_args(2, 1, port, 1, 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 1; '
                         "exit 5; fi; sleep 100", extra))
    wait_stderr(a1, "restarting every node (restart 1 of 2)")
    a0.signal(signal.SIGKILL)
    assert a1.wait(timeout=60) == 75, a1.stderr()
    assert re.search(r"lost the rendezvous store at \S+ \([^)]*\): the job ends\n",
                     a1.stderr()), a1.stderr()
