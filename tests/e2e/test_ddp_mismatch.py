"""Mismatched collectives never mix unrelated buffers (issue 11, item 1): when
some ranks make another call than the rest (another op, dtype, element count
or broadcast root, or a call skipped), every rank's call fails, the message
names the ranks of each side, and ddprun exits with the failing worker's
status; on one node (shared memory) and across two nodes (the leaders' TCP
ring). Before this, across nodes every rank returned 0 with wrong data, and
on one node a rank that wrongly believed it was the broadcast root kept its
own data while the others succeeded.

The worker is tests/progs/ddp_coll.c `diverge CASE RANKS`: one agreeing
all_reduce, then the ranks in RANKS call differently. It holds SIGTERM until
its own call has ended, so every rank reports how it ended. Every wait is
bounded; no timing is asserted."""
import re

import pytest

from conftest import free_port, prog
from mnutil import Agent, clean_env

# Calls count from 1, as ddprun's hang verdict counts them (its "all_reduce
# #4" after three: test_launch_hang.py): the diverging call is the second.
CASES = {  # case: (what the odd ranks call, what the others call)
    "op": ("all_reduce(1000 x float32, max) #2", "all_reduce(1000 x float32, sum) #2"),
    "avg": ("all_reduce(1000 x float32, avg) #2", "all_reduce(1000 x float32, sum) #2"),
    "dtype": ("all_reduce(500 x float64, sum) #2", "all_reduce(1000 x float32, sum) #2"),
    "count": ("all_reduce(2000 x float32, sum) #2", "all_reduce(1000 x float32, sum) #2"),
    "skip": ("barrier() #2", "all_reduce(1000 x float32, sum) #2"),
    # all_gather of 1 MiB takes the single copy (where it is on), of 1000 bytes
    # the staged path: a rank on either path is caught by the other
    "gather": ("all_gather(1000 bytes each) #2", "all_gather(1048576 bytes each) #2"),
}


def ends(text):
    """rank outcomes in a node's output: ([failure messages], returned count)."""
    failed = re.findall(r"^diverge failed: (.*)$", text, re.M)
    return failed, len(re.findall(r"^diverge returned$", text, re.M))


def codes(outs):
    """Every failed rank's return code, from every node's output."""
    return [int(c) for out in outs for c in re.findall(r"^diverge rc: (-?\d+)$", out, re.M)]


def run_nodes(reaper, tmp_path, nprocs, case, odd, **extra):
    port = free_port()
    env = clean_env(DDP_BACKEND="cpu", DDP_QUIET="1", DDP_TIMEOUT="120", **extra)
    agents = []
    for i, n in enumerate(nprocs):
        args = ["--nnodes", str(len(nprocs)), "--node-rank", str(i), "--master-addr",
                "127.0.0.1", "--master-port", str(port), "--nproc-per-node", str(n),
                prog("ddp_coll"), "diverge", case, odd]
        agents.append(Agent(reaper, tmp_path, f"node{i}", args, env=env))
    # DDP_TIMEOUT far beyond this bound: only detection ends the calls in time.
    rcs = [a.wait(timeout=90) for a in agents]
    return agents, rcs


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_node_every_rank_fails_naming_both_sides(reaper, tmp_path, case):
    agents, rcs = run_nodes(reaper, tmp_path, [3], case, "1")
    out = agents[0].stdout() + agents[0].stderr()
    failed, returned = ends(out)
    assert rcs == [3], out
    assert returned == 0 and len(failed) == 3, out
    odd, even = CASES[case]
    assert any(f"rank 1 called {odd}" in m for m in failed), out
    assert all("mismatched collectives" in m for m in failed), out
    # The program's calls disagree: every rank's error (-EINVAL), not only
    # the first to see it; the others said DDP_EPEER ("rank 0 failed").
    assert codes([out]) == [-22] * 3, out


def test_one_node_a_rank_that_wrongly_believes_it_is_the_root_is_caught(reaper, tmp_path):
    """Ranks 0 and 2 broadcast from rank 0, rank 1 from itself: before, rank 1
    (a 'root' waits for nobody) kept its own data and every rank succeeded."""
    agents, rcs = run_nodes(reaper, tmp_path, [3], "root", "1")
    out = agents[0].stdout() + agents[0].stderr()
    failed, returned = ends(out)
    assert rcs == [3], out
    assert returned == 0 and len(failed) == 3, out
    assert any("rank 1 called broadcast(1000 bytes from rank 1) #2" in m for m in failed), out
    assert any("broadcast(1000 bytes from rank 0) #2" in m for m in failed), out


def test_one_node_a_wrong_root_of_a_large_broadcast_is_caught(reaper, tmp_path):
    """The same, 1 MiB: the single copy (where it is on) compares calls too."""
    agents, rcs = run_nodes(reaper, tmp_path, [3], "bigroot", "1")
    out = agents[0].stdout() + agents[0].stderr()
    failed, returned = ends(out)
    assert rcs == [3], out
    assert returned == 0 and len(failed) == 3, out
    assert any("rank 1 called broadcast(1048576 bytes from rank 1) #2" in m for m in failed), out


BIG = {  # case: (what the odd ranks call, what the others call)
    "bigcount": ("all_reduce(300000 x float32, sum) #2", "all_reduce(200000 x float32, sum) #2"),
    "bigsmall": ("all_reduce(8000 x float32, sum) #2", "all_reduce(9000 x float32, sum) #2"),
}


@pytest.mark.parametrize("nproc", [2, 3])
@pytest.mark.parametrize("case", sorted(BIG))
def test_one_node_large_all_reduces_that_differ_fail_before_any_transfer(
        reaper, tmp_path, case, nproc):
    """With the single copy on (DDP_SHM_CMA=1), where a rank would write its
    sums into the peers' buffers: a peer's smaller buffer, or a peer on the
    small path, is caught by the calls' comparison first, on every rank."""
    agents, rcs = run_nodes(reaper, tmp_path, [nproc], case, "1", DDP_SHM_CMA="1")
    out = agents[0].stdout() + agents[0].stderr()
    failed, returned = ends(out)
    assert rcs == [3], out
    assert returned == 0 and len(failed) == nproc, out
    odd, even = BIG[case]
    assert any(f"rank 1 called {odd}" in m for m in failed), out
    assert any(f"called {even}" in m for m in failed), out
    assert all("mismatched collectives" in m for m in failed), out
    assert "process_vm" not in out, out


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_nodes_every_rank_fails_naming_the_nodes(reaper, tmp_path, case):
    """Node 1's ranks (2, 3) call differently from node 0's (0, 1)."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2], case, "2,3")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3], "\n".join(outs)
    odd, even = CASES[case]
    for out in outs:
        failed, returned = ends(out)
        assert returned == 0 and len(failed) == 2, out
        assert any(f"node 0 (ranks 0-1) called {even}" in m and
                   f"node 1 (ranks 2-3) called {odd}" in m for m in failed), out


@pytest.mark.parametrize("case", ["skip", "count", "dtype"])
def test_three_nodes_the_odd_middle_node_is_named_everywhere(reaper, tmp_path, case):
    """Node 1 of three (one rank each) calls differently. A small all_reduce's
    data travels with the calls around the ring; the odd node drops what it
    cannot use and passes the call on without it, and node 2 (whose left is
    node 1) and node 0 still see every call and fail alike."""
    agents, rcs = run_nodes(reaper, tmp_path, [1, 1, 1], case, "1")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3, 3], "\n".join(outs)
    odd, even = CASES[case]
    for out in outs:
        failed, returned = ends(out)
        assert returned == 0 and len(failed) == 1, out
        assert f"node 1 (rank 1) called {odd}" in failed[0], out
        assert re.search(r"nodes (0,2|2,0) called " + re.escape(even), failed[0]), out


@pytest.mark.parametrize("odd", ["2,3", "3", "1"], ids=["node1", "rank3", "rank1"])
def test_two_nodes_broadcast_roots_that_differ_fail_everywhere(reaper, tmp_path, odd):
    """Broadcast from rank 0 against one from rank 3 (a whole node, or one rank
    of either node): no rank returns, the root's node's ranks included."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2], "root", odd)
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3], "\n".join(outs)
    root = odd.split(",")[-1]
    for out in outs:  # each node's own log names both roots
        failed, returned = ends(out)
        assert returned == 0 and len(failed) == 2, out
        assert f"broadcast(1000 bytes from rank {root}) #2" in out, out
        assert "broadcast(1000 bytes from rank 0) #2" in out, out


def test_agreeing_calls_still_exact_across_nodes(reaper, tmp_path):
    """The same program with no odd rank: every call returns on every rank."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2], "op", "")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [0, 0], "\n".join(outs)
    for out in outs:
        assert ends(out) == ([], 2), out


def odd_and_even(case, odd):
    """(what rank odd calls, what the others call) in diverge CASE odd."""
    if case == "root":
        return (f"broadcast(1000 bytes from rank {odd}) #2", "broadcast(1000 bytes from rank 0) #2")
    return {**CASES, **BIG}[case]


def assert_named_on_every_node(outs, nranks, odd, case):
    """Every rank of every node failed, none returned, and each message names
    the odd rank's call and the others' (not just "the leader is gone")."""
    odd_call, even_call = odd_and_even(case, odd)
    for out, n in zip(outs, nranks):
        failed, returned = ends(out)
        assert returned == 0 and len(failed) == n, out
        for m in failed:
            assert "mismatched collectives" in m and "gone" not in m, out
            assert f"rank {odd} called {odd_call}" in m and f"called {even_call}" in m, out


@pytest.mark.parametrize("odd", ["3", "1"], ids=["node1", "node0"])
@pytest.mark.parametrize("case", ["count", "skip", "root", "gather", "bigcount"])
def test_two_nodes_a_mismatch_inside_one_node_is_named_on_the_other(reaper, tmp_path, case, odd):
    """One rank of one node calls differently from the rest of its node: that
    node's shared memory catches it, and its leader sends the reason around
    the ring before it shuts it down, so the other node's ranks (whose log
    may be the only one read) name it too; before, they only said "the
    previous node's leader is gone"."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2], case, odd, DDP_SHM_CMA="1")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3], "\n".join(outs)
    assert_named_on_every_node(outs, [2, 2], odd, case)
    other = 0 if odd == "3" else 1
    node = 1 - other
    assert f"on node {node} (ranks {2 * node}-{2 * node + 1}): mismatched" in outs[other], outs[other]


@pytest.mark.parametrize("odd", ["3", "1", "5"], ids=["node1", "node0", "node2"])
@pytest.mark.parametrize("case", ["count", "skip", "root", "bigcount", "gather"])
def test_three_nodes_a_mismatch_inside_one_node_goes_round_the_ring(reaper, tmp_path, case, odd):
    """The same with three nodes of two ranks: the reason is passed on from
    leader to leader, so every node names it, whichever node it is. A small
    all_reduce (count, skip) and the calls that agree before their data
    (a broadcast, a large all_reduce, an all_gather) read the record at
    different places: the latter stopped it at the first leader, and the
    next said "the previous node's leader is gone", naming a healthy node."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2, 2], case, odd)
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3, 3], "\n".join(outs)
    assert_named_on_every_node(outs, [2, 2, 2], odd, case)
    assert codes(outs) == [-22] * 6, "\n".join(outs)


@pytest.mark.parametrize("case", ["count", "bigcount", "gather"])
def test_four_nodes_a_mismatch_inside_one_node_goes_round_the_ring(reaper, tmp_path, case):
    """Four nodes: the record goes through two leaders after the failed
    node's right one before it comes back to its left."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2, 2, 2], case, "3")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3, 3, 3], "\n".join(outs)
    assert_named_on_every_node(outs, [2, 2, 2, 2], "3", case)


def test_three_nodes_a_mismatch_against_a_barrier_goes_round_the_ring(reaper, tmp_path):
    """Every rank calls a barrier but rank 2 (node 1's leader), which
    all_reduces: the other nodes agree on a barrier, and only node 1's
    shared segment sees the mismatch."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2, 2], "skip", "0,1,3,4,5")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3, 3], "\n".join(outs)
    for i, out in enumerate(outs):
        failed, returned = ends(out)
        assert returned == 0 and len(failed) == 2, out
        for m in failed:
            assert "mismatched collectives" in m and "gone" not in m, out
            assert "barrier() #2" in m and "all_reduce(1000 x float32, sum) #2" in m, out
            assert i == 1 or "on node 1 (ranks 2-3)" in m, out


def test_single_rank_nodes_name_a_mismatch_inside_a_larger_node(reaper, tmp_path):
    """Nodes of 1, 2 and 1 ranks; rank 2 (node 1's second) is the odd one."""
    agents, rcs = run_nodes(reaper, tmp_path, [1, 2, 1], "count", "2")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3, 3], "\n".join(outs)
    assert_named_on_every_node(outs, [1, 2, 1], "2", "count")
    for out in (outs[0], outs[2]):
        assert "on node 1 (ranks 1-2): mismatched" in out, out


FINISHED = "finished (ddp_finalize) after 1 collective call"


def test_one_node_a_rank_that_finalized_is_named_by_the_others(reaper, tmp_path):
    """Rank 1 calls ddp_finalize after one all_reduce and lives on; ranks 0
    and 2 make a second (an uneven last batch): they waited for DDP_TIMEOUT
    (or for ever), or said "rank 1 exited" once it had. Now every one fails
    at once naming it and its call count."""
    agents, rcs = run_nodes(reaper, tmp_path, [3], "finish", "1")
    out = agents[0].stdout() + agents[0].stderr()
    failed, returned = ends(out)
    assert rcs == [3], out
    assert "diverge finalized: 0" in out
    assert returned == 0 and len(failed) == 2, out
    for m in failed:
        assert re.search(f"rank 1 {re.escape(FINISHED)}, while rank [02] called "
                         r"all_reduce\(1000 x float32, sum\) #2: the ranks made different "
                         "numbers of calls", m), out
    assert codes([out]) == [-22, -22], out


@pytest.mark.parametrize("nprocs,odd,node", [
    ([2, 2], "2,3", 1), ([2, 2], "0,1", 0), ([2, 2, 1], "2,3", 1), ([2, 2, 1], "4", 2),
    ([2, 2, 1], "0,1,4", 0)])
def test_nodes_that_finalized_are_named_by_the_others(reaper, tmp_path, nprocs, odd, node):
    """Whole nodes call ddp_finalize after one all_reduce while the others
    make a second: the others said "the previous node's leader is gone";
    now the finished node's leader leaves a record on the ring and every
    rank still calling names it."""
    agents, rcs = run_nodes(reaper, tmp_path, nprocs, "finish", odd)
    outs = [a.stdout() + a.stderr() for a in agents]
    oddset = {int(r) for r in odd.split(",")}
    first = 0
    for out, n in zip(outs, nprocs):
        mine = set(range(first, first + n))
        first += n
        failed, returned = ends(out)
        if mine <= oddset:
            assert out.count("diverge finalized: 0") == n, out
            continue
        assert returned == 0 and len(failed) == n, out
        for m in failed:
            assert f"on node {node} (" in m and f"its leader {FINISHED}: the nodes made " \
                "different numbers of calls" in m and "gone" not in m, out
    assert all(rc != 0 for rc in rcs), "\n".join(outs)
    assert set(codes(outs)) == {-22}, "\n".join(outs)


def test_two_nodes_a_rank_that_finalized_inside_a_node_is_named_on_the_other(reaper, tmp_path):
    """Rank 3 alone finalizes: node 1's shared segment names it, and the
    reason goes round the ring to node 0."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2], "finish", "3")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [3, 3], "\n".join(outs)
    for out, n in zip(outs, [2, 1]):
        failed, returned = ends(out)
        assert returned == 0 and len(failed) == n, out
        assert all(f"rank 3 {FINISHED}" in m and "gone" not in m for m in failed), out
    assert "on node 1 (ranks 2-3): rank 3 finished" in outs[0], outs[0]
    assert codes(outs) == [-22] * 3, "\n".join(outs)


def test_ranks_that_all_finalize_alike_end_cleanly(reaper, tmp_path):
    """Every rank finalizes after the same calls (the records go unread)."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2, 1], "op", "")
    outs = [a.stdout() + a.stderr() for a in agents]
    assert rcs == [0, 0, 0], "\n".join(outs)
    for out, n in zip(outs, [2, 2, 1]):
        assert ends(out) == ([], n), out


REFUSED = "finished (ddp_finalize) after its call was refused (all_reduce: bad buffer or count)"


def test_one_node_a_rank_whose_call_was_refused_then_finalized_is_named(reaper, tmp_path):
    """Rank 1's second all_reduce is refused (a NULL buffer) and it calls
    ddp_finalize, as a program that stops at an error does: ranks 0 and 2
    said "the ranks made different numbers of calls", which they had not
    (rank 1 made the call; it was refused). Now they name the refusal."""
    agents, rcs = run_nodes(reaper, tmp_path, [3], "refused", "1")
    out = agents[0].stdout() + agents[0].stderr()
    failed, returned = ends(out)
    assert rcs == [3], out
    assert "diverge refused: -22" in out and "diverge finalized: 0" in out, out
    assert returned == 0 and len(failed) == 2, out
    for m in failed:
        assert re.search(f"rank 1 {re.escape(REFUSED)}, while rank [02] called "
                         r"all_reduce\(1000 x float32, sum\) #2$", m), out
    assert codes([out]) == [-22, -22], out


@pytest.mark.parametrize("odd,who", [("3", "rank 3"), ("2", "its leader"),
                                     ("2,3", "its leader")])
def test_two_nodes_a_refused_call_then_finalize_is_named_on_both(reaper, tmp_path, odd, who):
    """The same on node 1 of two: a rank beside the leader (its shared
    segment's note goes round the ring in the leader's failure), the leader
    (the ring's finish record carries it), or both."""
    agents, rcs = run_nodes(reaper, tmp_path, [2, 2], "refused", odd)
    outs = [a.stdout() + a.stderr() for a in agents]
    nodd = len(odd.split(","))
    failed0, _ = ends(outs[0])
    failed1, _ = ends(outs[1])
    assert len(failed0) == 2 and len(failed1) == 2 - nodd, "\n".join(outs)
    for m in failed0:
        assert f"on node 1 (ranks 2-3): {who} {REFUSED}" in m, outs[0]
    for m in failed1:
        assert m.startswith(f"all_reduce: rank {odd} {REFUSED}, while rank "), outs[1]
    assert set(codes(outs)) == {-22}, "\n".join(outs)


@pytest.mark.parametrize("nprocs,odd", [([3], "1"), ([2, 2], "3")])
def test_a_refusal_that_calls_came_after_is_not_named(reaper, tmp_path, nprocs, odd):
    """Every rank's all_reduce is refused, then a gradient bucket is reduced
    (a call that ran, outside the collectives' entry), then rank 1 (3)
    finalizes while the others make another call: the refusal was named
    ("after its call was refused"), which calls had come after; now it is
    "different numbers of calls" again (found by review)."""
    agents, rcs = run_nodes(reaper, tmp_path, nprocs, "refusedlater", odd)
    outs = [a.stdout() + a.stderr() for a in agents]
    failed = [m for out in outs for m in ends(out)[0]]
    assert len(failed) == sum(nprocs) - 1, "\n".join(outs)
    for m in failed:
        assert "made different numbers of calls" in m and "refused" not in m, "\n".join(outs)
    assert set(codes(outs)) == {-22}, "\n".join(outs)
