"""libddp's collectives on the cpu backend, run as real processes: every dtype
and op of all_reduce, broadcast from every root, all_gather and barrier at
world sizes 1, 2, 3 and 4 on one node (shared memory), through ddp_spawn, and
across two or three "nodes" on loopback (and large all_reduces, exact and
bit-identical on every rank) (shared memory inside, TCP between the
node leaders, peers found through a ddpstore server)."""
import os
import shutil
import uuid

import pytest

from conftest import prog, run
from ddp_launch import launch, start_store, wait_all


def run_id():
    return "t" + uuid.uuid4().hex[:10]


def assert_all_ok(results, world):
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank}: rc={rc}\n{out}\n{err}"
    seen = sorted(line for _, out, _ in results for line in out.splitlines()
                  if line.startswith("[rank"))
    assert seen == sorted(f"[rank{r}] ok rank {r}" for r in range(world))


@pytest.fixture
def store(reaper, tmp_path):
    return start_store(reaper, tmp_path)


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_every_collective_on_one_node(reaper, store, nproc):
    procs = launch(reaper, [prog("ddp_coll"), "check"], nproc, store, run_id())
    assert_all_ok(wait_all(procs, timeout=90), nproc)


def test_ddp_spawn_gives_a_working_world():
    r = run([prog("ddp_coll"), "--spawn", "3", "check"], timeout=90, env=dict(os.environ, DDP_QUIET="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(r.stdout.splitlines()) == [f"[rank{i}] ok rank {i}" for i in range(3)]


@pytest.mark.parametrize("nnodes,nproc", [(2, 2), (3, 1)])
def test_collectives_across_nodes_over_tcp(reaper, store, nnodes, nproc):
    procs = launch(reaper, [prog("ddp_coll"), "check"], nproc, store, run_id(), nnodes=nnodes)
    assert_all_ok(wait_all(procs, timeout=120), nnodes * nproc)


@pytest.mark.parametrize("nnodes,nproc", [(1, 3), (2, 1), (3, 1), (2, 2)])
def test_large_all_reduce_exact_and_the_same_bits_on_every_rank(reaper, store, nnodes, nproc):
    """Sizes past the TCP ring's scratch (its blocks wrap it) and odd ones
    (uneven blocks), float32/16 and bfloat16: sums exact, averages (which
    round) bit-identical on every rank."""
    procs = launch(reaper, [prog("ddp_coll"), "same"], nproc, store, run_id(), nnodes=nnodes)
    assert_all_ok(wait_all(procs, timeout=300), nnodes * nproc)


def shared_results(results, world, nproc, direct=True, nnodes=1):
    """Every rank ok; {rank: the libddp memfd mappings it had}. direct: the
    direct paths were on all along (else off from the first call: what came
    later was private)."""
    maps = {}
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank}: rc={rc}\n{out}\n{err}"
        assert f"[rank{rank}] ok rank {rank}" in out.splitlines(), f"{out}\n{err}"

        def counts(what):
            n = [int(l.split()[-1]) for l in out.splitlines()
                 if l.startswith(f"[rank{rank}] shared {what} ")]
            assert len(n) == 2, out
            return n
        (before, after), (own, own_after) = counts("maps"), counts("own")
        maps[rank] = before
        if not (own and direct):
            assert after == before, (rank, before, after)
            continue
        # Then its ddp_alloc buffer and big's are freed: once a direct call
        # (of one bucket) followed, no rank maps them any more; it keeps its
        # own live buckets, and of each peer's the one that call read.
        assert own_after == own - 1, (rank, own, own_after)
        assert after == own_after + nproc - 1, (rank, before, after, own_after)
        peers = before - own
        if nnodes == 1:  # every peer's region read in place
            assert peers == own * (nproc - 1), (rank, before, own)
        else:  # across nodes 16-bit floats go through a float32 copy: not read in place
            assert 0 < peers < own * (nproc - 1), (rank, before, own)
    assert sorted(maps) == list(range(world))
    return maps


@pytest.mark.parametrize("nnodes,nproc", [(1, 2), (1, 3), (2, 2)])
def test_all_reduce_of_shared_buckets_reads_the_peers_directly(reaper, store, nnodes, nproc):
    """A reducer's buckets are memory the node's ranks share (cpu backend):
    an all_reduce of gradients inside them, at odd sizes, float32/16 and
    bfloat16, sum, max and avg, reads every peer's bucket directly (across
    nodes the float32 ones: 16-bit floats go through a float32 copy there):
    exact, and the same bits on every rank; so does one of memory from ddp_alloc,
    and of a range inside it. Each rank then has its own buckets and
    buffer, and those of each peer of its node, mapped. Then all_gathers
    (also in place) and broadcasts from every root of ddp_alloc memory,
    which read the peers' buffers in place too, exact."""
    procs = launch(reaper, [prog("ddp_coll"), "shared"], nproc, store, run_id(), nnodes=nnodes)
    maps = shared_results(wait_all(procs, timeout=300), nnodes * nproc, nproc, nnodes=nnodes)
    assert maps[0] > 0 and len(set(maps.values())) == 1, maps


@pytest.mark.parametrize("nproc", [2, 3])
def test_every_dtype_and_op_of_shared_memory_is_exact(reaper, store, nproc):
    """`check` on memory from ddp_alloc: every dtype (2, 4 and 8 bytes an
    element) and op, 300000 elements of it through the direct path, which
    sums a slice through a block of 8 KiB: each dtype's block count leaves
    another remainder, and every sum, minimum, maximum and average is exact
    (the worker checks)."""
    procs = launch(reaper, [prog("ddp_coll"), "check", "shared"], nproc, store, run_id())
    for rank, (rc, out, err) in enumerate(wait_all(procs, timeout=300)):
        assert rc == 0, f"rank {rank}: rc={rc}\n{out}\n{err}"
        assert f"ok rank {rank}" in out, f"{out}\n{err}"


def test_shared_buckets_through_ddp_spawn():
    r = run([prog("ddp_coll"), "--spawn", "4", "shared"], timeout=300,
            env=dict(os.environ, DDP_QUIET="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    maps = shared_results([(0, r.stdout, r.stderr)] * 4, 4, 4)
    assert maps[0] > 0 and len(set(maps.values())) == 1, maps


def test_with_the_direct_path_off_the_buckets_are_private_and_staged(reaper, store):
    procs = launch(reaper, [prog("ddp_coll"), "shared"], 2, store, run_id(),
                   extra={"DDP_SHM_DIRECT": "0"})
    assert shared_results(wait_all(procs, timeout=300), 2, 2) == {0: 0, 1: 0}


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")
def test_a_bucket_the_peers_cannot_map_makes_every_rank_stage(reaper, store):
    """Undumpable ranks' descriptors (/proc/<pid>/fd) are closed to peers
    without CAP_SYS_PTRACE (dropped here when root): the first all_reduce
    of shared buckets says why and is staged, like every later one, with
    the same exact results; nobody mapped a peer's bucket."""
    wrap = ["setpriv", "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace"]
    procs = launch(reaper, [*(wrap if os.geteuid() == 0 else []), prog("ddp_coll"), "shared"],
                   2, store, run_id(), extra={"DDP_COLL_UNDUMPABLE": "1", "DDP_QUIET": "0"})
    results = wait_all(procs, timeout=300)
    maps = shared_results(results, 2, 1, direct=False)  # its own buckets only
    assert maps[0] == maps[1] > 0, maps
    errs = [err for _, _, err in results]
    said = [e for e in errs if "cannot map the shared buffer of rank" in e]
    assert said, errs
    assert all(e.count("cannot map") == 1 and
               "no collective reads the peers' buffers in place from now on" in e
               for e in said), errs


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")
@pytest.mark.parametrize("nproc", [2, 3])
def test_a_broadcast_that_cannot_map_the_peers_buffers_stages_exactly(reaper, store, nproc):
    """The first collective of buffers the ranks share is a broadcast
    (ddp_coll zcrace's third round), and the ranks are undumpable without
    CAP_SYS_PTRACE: mapping a peer's buffer fails in the agreement that the
    staged broadcast's first step carries, while the root holds its first
    chunk back. Every rank says so once, the broadcast and every later one
    are staged, exact, and nobody maps a peer's buffer."""
    wrap = ["setpriv", "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace"]
    procs = launch(reaper, [*(wrap if os.geteuid() == 0 else []), prog("ddp_coll"), "zcrace"],
                   nproc, store, run_id(),
                   extra={"DDP_COLL_UNDUMPABLE": "1", "DDP_QUIET": "0", "DDP_TIMEOUT": "30"})
    results = wait_all(procs, timeout=120)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank}: rc={rc}\n{out}\n{err}"
        assert f"[rank{rank}] ok rank {rank}" in out, out
        assert f"[rank{rank}] zc maps 0" in out, out
        assert err.count("cannot map") == 1, err
        assert f"[rank{rank}] libddp: broadcast: cannot map the shared buffer of rank " in err, err


@pytest.mark.parametrize("cma", ["0", "auto"])
def test_a_rank_late_to_read_the_agreement_changes_nothing(reaper, store, cma):
    """Rank 1 pauses after the agreement's first step, before reading what
    the others declared, in broadcasts whose root's buffer is private (so
    not read in place: staged, or the single copy), then whose root's is
    shared but the last rank's private (the staged path's first step
    carries the agreement: the root holds its chunk back until it knows),
    and then all shared: the
    others wait for it, the data is exact, and the direct path stays on
    (a last all_reduce of ddp_alloc memory maps every peer's buffer)."""
    procs = launch(reaper, [prog("ddp_coll"), "zcrace"], 3, store, run_id(),
                   extra={"DDP_SHM_CMA": cma, "DDP_TEST_ZC_PAUSE": "1:300", "DDP_TIMEOUT": "30"})
    results = wait_all(procs, timeout=120)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank}: rc={rc}\n{out}\n{err}"
        assert f"[rank{rank}] ok rank {rank}" in out, out
        assert f"[rank{rank}] zc maps 3" in out, out


def test_large_all_gather_and_broadcast_across_nodes(reaper, store):
    """ddp_coll big on 2 nodes of 2 ranks: each node's part of a large
    all_gather (the single copy or, above 32 MiB, staged and streamed), also
    in place, where a rank's part lies past its node's in recv, and
    broadcasts from every root, exact on every rank."""
    procs = launch(reaper, [prog("ddp_coll"), "big"], 2, store, run_id(), nnodes=2)
    assert_all_ok(wait_all(procs, timeout=300), 4)


def test_node_leader_dying_fails_the_other_node_fast(reaper, store):
    """Rank 2 (leader of node 1) exits mid-run: node 0 sees the TCP connection
    close, and every rank fails with an error instead of hanging."""
    procs = launch(reaper, [prog("ddp_coll"), "crash", "2"], 2, store, run_id(), nnodes=2,
                   extra={"DDP_TIMEOUT": "20"})
    results = wait_all(procs, timeout=60)
    assert results[2][0] == 7
    for rank in (0, 1, 3):
        rc, out, err = results[rank]
        assert rc == 3, f"rank {rank}: rc={rc}\n{err}"
        assert "all_reduce failed" in err
