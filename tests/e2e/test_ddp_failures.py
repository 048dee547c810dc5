"""Collectives never hang: a rank that crashes mid-collective makes the others
fail at once (it is seen gone), a rank that stops responding makes them fail
with a timeout error after DDP_TIMEOUT, and the node's shared-memory segment
is gone either way."""
import os
import re
import signal
import uuid

import pytest

from conftest import prog, free_port, wait_for
from ddp_launch import launch, start_store, wait_all


@pytest.fixture
def store(reaper, tmp_path):
    return start_store(reaper, tmp_path)


def segments(run_id):
    return [n for n in os.listdir("/dev/shm") if run_id in n]


def test_crash_mid_collective_fails_the_others_not_hangs(reaper, store):
    rid = "crash" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "crash", "1"], 4, store, rid,
                   extra={"DDP_TIMEOUT": "600"})  # only detection can beat the deadline
    results = wait_all(procs, timeout=60)
    assert results[1][0] == 7, results[1]
    for rank in (0, 2, 3):
        rc, out, err = results[rank]
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert "all_reduce failed" in err
        assert "rank 1" in err and "exited" in err, err
        # and the communicator stays broken: no second hang
        assert "then barrier: communicator broken" in err
    assert segments(rid) == []


def test_a_leader_that_lives_on_after_a_failure_still_frees_the_other_node(reaper, store):
    """Rank 3 crashes; rank 2, node 1's leader, sees it, fails, and lives on
    (a program that handles the error, a slow exit). Node 0's ranks, waiting
    on the ring in the same all_reduce, fail at once: the leader shut its ring
    down when its communicator broke. Only that can beat DDP_TIMEOUT. It said
    why first: node 0's ranks name rank 3, not just node 1's leader."""
    rid = "linger" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "crash", "3", "--linger", "2"], 2, store, rid,
                   nnodes=2, extra={"DDP_TIMEOUT": "600"})
    results = wait_all(procs[:2], timeout=60)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert "all_reduce failed" in err and "on node 1 (ranks 2-3): rank 3" in err, err
        assert "exited" in err and "gone" not in err, err
    assert procs[2].poll() is None  # still lingering: its exit did not free node 0
    procs[2].kill()
    procs[2].wait(timeout=10)
    assert procs[3].wait(timeout=10) == 7


def test_a_leader_that_dies_leaves_leader_is_gone_on_the_other_node(reaper, store):
    """Rank 2, node 1's leader, exits in the middle of the all_reduces: it
    sends no reason, and node 0's ranks fail at once with "the previous (or
    next) node's leader is gone", naming it; rank 3, its node's other rank,
    sees it exit."""
    rid = "ldie" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "crash", "2"], 2, store, rid,
                   nnodes=2, extra={"DDP_TIMEOUT": "600"})
    results = wait_all(procs, timeout=60)
    assert results[2][0] == 7, results[2]
    for rank in (0, 1):
        rc, out, err = results[rank]
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert "all_reduce failed" in err and "node's leader is gone" in err, err
    rc, out, err = results[3]
    assert rc == 3 and "rank 2" in err and "exited" in err, err


@pytest.mark.parametrize("nproc,nnodes", [(2, 2), (3, 2), (2, 3)])
def test_a_rank_that_dies_in_a_broadcast_is_named_on_the_other_nodes(reaper, store, nproc,
                                                                     nnodes):
    """Rank 1 (beside the root's leader, or a node of its own) exits while
    large broadcasts from rank 0 run. Where the root node's leader failed
    after the call was agreed, in its node's part (which comes before the
    ring's), it could not put a record on the ring's data, and node 1 said
    only "the previous node's leader is gone", blaming a leader that was
    alive. Now its record goes back to the left, round the ring: a leader
    that waits in the call reads it on its right socket at once, and node 1
    waits for it there once node 0 closed: every rank names rank 1. (Where
    it dies matters not for the outcome, only for which path is taken:
    mostly inside a broadcast.)"""
    rid = "bcast" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "bcastcrash", "1", "64", "300"], nproc, store,
                   rid, nnodes=nnodes, extra={"DDP_TIMEOUT": "600", "DDP_SHM_CMA": "0",
                                              "DDP_SHM_DIRECT": "0"})
    results = wait_all(procs, timeout=120)
    assert results[1][0] == 7, results[1]
    for rank, (rc, out, err) in enumerate(results):
        if rank == 1:
            continue
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert "broadcast failed" in err and "rank 1" in err and "exited" in err, err
        assert "gone" not in err, err


def test_a_timeout_in_the_calls_gather_is_named_by_the_next_node(reaper, store):
    """Three nodes of one rank; rank 2 comes 4 s late to an all_reduce, rank 1
    0.5 s late, DDP_TIMEOUT=2: rank 0 times out first, waiting on node 2,
    its frame of the gather already sent to node 1. Node 1 said "the
    previous node's leader is gone (connection closed)", blaming rank 0,
    which had only timed out; now rank 0's record follows its frame, and
    node 1 names the timeout (its own, where its deadline came first)."""
    rid = "late" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "late", "2:4,1:0.5"], 1, store, rid, nnodes=3,
                   extra={"DDP_TIMEOUT": "2"})
    results = wait_all(procs, timeout=60)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert f"rank {rank}: late all_reduce: -" in err, err
    err = results[1][2]
    assert "timed out" in err and "gone" not in err, err


def test_a_rank_late_to_a_call_the_others_gave_up_on_fails_too(reaper, store):
    """Rank 1 comes 3.5 s late to an all_reduce with DDP_TIMEOUT=2: rank 0
    times out, its part of the call published. Rank 1 then finished the
    call on it and returned 0, the full sum, where rank 0 had failed (its
    next call failed). Now it fails at once with rank 0's reason."""
    rid = "late" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "late", "1:3.5"], 2, store, rid,
                   extra={"DDP_TIMEOUT": "2"})
    results = wait_all(procs, timeout=60)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert "timed out waiting for rank 1" in err, err
    assert "rank 1: late all_reduce: -4007: all_reduce: rank 0 failed: all_reduce: timed out" \
        in results[1][2], results[1][2]


def with_a_stopped_rank(reaper, store, rid, nproc, nnodes=1):
    """ddp_coll stop: the last rank stops itself (SIGSTOP) in an all_reduce
    with DDP_TIMEOUT=2; the others' results, once it is stopped. It is
    killed afterwards whatever they were."""
    last = nproc * nnodes - 1
    procs = launch(reaper, [prog("ddp_coll"), "stop", str(last)], nproc, store, rid,
                   nnodes=nnodes, extra={"DDP_TIMEOUT": "2"})
    victim = procs[last]
    try:
        wait_for(lambda: _state(victim.pid) == "T", timeout=30,
                 what=f"rank {last} to stop itself")
        return wait_all(procs[:last], timeout=40)
    finally:
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)


def test_stopped_rank_gives_a_timeout_error(reaper, store):
    rid = "stop" + uuid.uuid4().hex[:8]
    results = with_a_stopped_rank(reaper, store, rid, 3)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert "timed out" in err, err
    # the waiting rank names whom it waited for
    assert any("timed out waiting for rank 2" in err for _, _, err in results)
    assert segments(rid) == []


def test_mismatched_collectives_fail_at_once_naming_both_sides(reaper, store):
    """Rank 1 all_reduces 2000 elements, the others 1000: instead of garbage or
    a hang, every rank fails at once and says who called what."""
    # DDP_TIMEOUT far beyond the test's own deadline: only detection can pass
    procs = launch(reaper, [prog("ddp_coll"), "mismatch"], 3, store,
                   "mm" + uuid.uuid4().hex[:8], extra={"DDP_TIMEOUT": "600"})
    results = wait_all(procs, timeout=60)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert "mismatched collectives" in err or "failed: all_reduce: mismatched" in err, err
    assert any("rank 1 called all_reduce(2000 x float32, sum) while rank" in err or
               "called all_reduce(2000 x float32, sum)" in err for _, _, err in results)


def test_segment_is_removed_when_a_rank_never_joins(reaper):
    """Rank 1 of 3 never starts: the segment local rank 0 created exists while
    the others wait for it, they time out joining, and it is unlinked anyway.
    (Shared memory alone, DDP_STORE=0: with a store the join at the store
    catches the missing rank before any segment exists, test_ddp_join.py.)"""
    rid = "init" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "check"], 3, free_port(), rid,
                   extra={"DDP_TIMEOUT": "3", "DDP_STORE": "0"}, only=[0, 2])
    wait_for(lambda: segments(rid), timeout=10, what="the node's segment to appear")
    for rc, out, err in wait_all(procs, timeout=30):
        assert rc == 1, err
        assert "ddp_init" in err and "only 2 of 3 local ranks joined" in err, err
    assert segments(rid) == []


def test_segment_is_unlinked_as_soon_as_everyone_attached(reaper, store):
    """While a healthy job runs, its segment is already gone from /dev/shm: a
    crash from now on cannot leak it."""
    rid = "live" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "hold"], 2, store, rid)
    line = procs[0].stdout.readline()
    assert line.strip() == "[rank0] ready"  # ddp_init done on every rank
    assert segments(rid) == []
    for rc, out, err in wait_all(procs, timeout=60):
        assert rc == 0, err


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_buckets_that_together_outlast_the_timeout_are_not_a_failure(reaper, store):
    """Four gradient buckets, the last rank marking them ready 0.8 s apart
    (DDP_TIMEOUT=2): each bucket's all_reduce ends well inside the timeout,
    all four take 3.2 s. finish waits for progress, not for the sum: it once
    failed rank 0 at 2 s ("timed out waiting for gradient buckets") while
    every bucket was moving."""
    rid = "slowbkt" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "slowbkt", "4", "800"], 2, store, rid,
                   extra={"DDP_TIMEOUT": "2"})
    for rank, (rc, out, err) in enumerate(wait_all(procs, timeout=60)):
        assert rc == 0, f"rank {rank}: {rc}\n{err}"
        assert f"ok rank {rank}" in out


def test_a_bucket_that_stops_fails_with_its_own_error(reaper, store):
    """The last rank never marks the buckets in time: the first bucket's own
    all_reduce times out, naming the rank it waited for."""
    rid = "stopbkt" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "slowbkt", "4", "3000"], 2, store, rid,
                   extra={"DDP_TIMEOUT": "1"})
    rc, out, err = wait_all(procs, timeout=60)[0]
    assert rc == 1, err
    assert "finish: reducer: gradient bucket all_reduce: all_reduce: timed out waiting " \
           "for rank 1" in err, err


def test_a_bucket_wait_that_gives_up_frees_nothing_in_flight(reaper, store):
    """A communication thread that is not run (test hook: each bucket stalls
    6 s in flight) outlasts finish's wait (DDP_TIMEOUT=1 plus the 2 s grace):
    finish fails, naming the stall, and the program then destroys the reducer
    and finalizes. The bucket, still in flight, must not be freed under it:
    its memory goes only after the thread is joined (this once ended in
    "free(): corrupted unsorted chunks"). The ranks exit 1, not by a signal."""
    rid = "stallbkt" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "slowbkt", "1", "0"], 2, store, rid,
                   extra={"DDP_TIMEOUT": "1", "DDP_TEST_BUCKET_STALL_MS": "6000"})
    for rank, (rc, out, err) in enumerate(wait_all(procs, timeout=60)):
        assert rc == 1, f"rank {rank}: {rc}\n{err}"
        assert "finish: reducer: timed out waiting for gradient buckets: the " \
               "communication thread finished none of the last 1 in 3.0 s" in err, err
        assert "corrupted" not in err and "ERROR: AddressSanitizer" not in err, err
    assert segments(rid) == []


def test_a_rank_late_to_a_failed_bucket_blames_no_buffer(reaper, store):
    """Three ranks share 1 MiB buckets; the last marks its gradient after the
    others' all_reduce timed out and they left. What it then reads of their
    abandoned call (their declarations, their freed buckets) made it say
    "cannot map the shared buffer of rank 0 (No such file or directory)",
    which is not what went wrong: it fails naming the others' failure."""
    rid = "latebkt" + uuid.uuid4().hex[:8]
    procs = launch(reaper, [prog("ddp_coll"), "slowbkt", "1", "3000", "262144"], 3, store,
                   rid, extra={"DDP_TIMEOUT": "1", "DDP_QUIET": "0"})
    results = wait_all(procs, timeout=60)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 1, f"rank {rank}: {rc}\n{err}"
        assert "cannot map" not in err, f"rank {rank}: {err}"
    assert "finish: reducer: gradient bucket all_reduce" in results[2][2], results[2][2]


def test_a_failure_in_the_hand_down_names_the_programs_call(reaper, store):
    """2 nodes of 2 ranks; rank 3 stops in an all_reduce. Rank 1, on the other
    node, waits in the step that hands the leaders' sum down to the node's
    ranks, a broadcast inside libddp, and its error read "broadcast: rank 0
    failed: ..." for the all_reduce the program called."""
    rid = "handdown" + uuid.uuid4().hex[:8]
    results = with_a_stopped_rank(reaper, store, rid, 2, nnodes=2)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank}: {rc}\n{err}"
        assert "all_reduce failed" in err, err
        assert "broadcast" not in err, f"rank {rank}: {err}"
    # (rank 0 failed, or rank 1's own wait for it ran out first)
    assert re.search(r"all_reduce: (rank 0 failed: |timed out waiting for rank 0)",
                     results[1][2]), results[1][2]
