"""examples/train.c, the README's main job, and the DDP property: N ranks with
global batch B end with the same parameters as one rank with batch B (within
1e-5 relative after 100 steps), every rank holds identical parameters after
every step, and the same command line prints the same checksum at any world
size; gradient accumulation (no_sync) keeps the equivalence."""
import struct
import uuid

import pytest

from conftest import binary
from ddp_launch import launch, start_store, wait_all

# One worker runs the whole module (tests/run.sh: --dist loadgroup): its
# module-scoped fixture, once.
pytestmark = pytest.mark.xdist_group("test_ddp_train")


def train(reaper, nproc, args, tmp_path, nnodes=1, port=None, extra=None):
    dump = tmp_path / f"params-{nnodes}x{nproc}-{uuid.uuid4().hex[:6]}.bin"
    procs = launch(reaper, [binary("train")] + args + ["--dump", str(dump)], nproc,
                   port or start_store(reaper), "train" + uuid.uuid4().hex[:8], nnodes=nnodes,
                   extra=extra)
    results = wait_all(procs, timeout=120)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank}: {rc}\n{out}\n{err}"
    out0 = results[0][1]
    # print control: only rank 0 talks on stdout
    assert all(out == "" for _, out, _ in results[1:])
    data = dump.read_bytes()
    return out0, struct.unpack(f"{len(data) // 8}d", data)


def checksum(out):
    return [l for l in out.splitlines() if l.startswith("checksum ")]


def assert_close(a, b, rel=1e-5):
    assert len(a) == len(b)
    num = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
    den = sum(x * x for x in a) ** 0.5
    assert num <= rel * den, f"relative difference {num / den:.3g}"
    worst = max(abs(x - y) / max(abs(x), 1e-3) for x, y in zip(a, b))
    assert worst <= 1e-4, f"worst element differs by {worst:.3g}"


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    from conftest import Reaper
    r = Reaper()
    try:
        return train(r, 1, ["--steps", "100"], tmp_path_factory.mktemp("one"))
    finally:
        r.cleanup()


@pytest.mark.parametrize("nproc", [2, 4])
def test_n_ranks_match_one_rank(reaper, tmp_path, one_rank, nproc):
    out1, p1 = one_rank
    out, p = train(reaper, nproc, ["--steps", "100", "--check-sync"], tmp_path)
    assert_close(p1, p)
    assert f"check-sync: parameters identical on all {nproc} rank(s) after every step" in out
    assert checksum(out) == checksum(out1)
    # the loss curve is the same job's
    assert [l for l in out.splitlines() if l.startswith("epoch")] == \
        [l for l in out1.splitlines() if l.startswith("epoch")]


@pytest.mark.parametrize("async_", ["1", "0"], ids=["comm-thread", "in-finish"])
def test_many_buckets_and_gradient_accumulation(reaper, tmp_path, async_):
    """Small buckets (several per step, launched while backward runs, or run
    by finish() with DDP_ASYNC=0) and no_sync for 3 of every 4 steps: 4 ranks
    still match 1 rank."""
    args = ["--steps", "40", "--bucket-cap-kb", "16", "--no-sync-every", "4", "--lr", "0.05"]
    out1, p1 = train(reaper, 1, args, tmp_path)
    out4, p4 = train(reaper, 4, args + ["--check-sync"], tmp_path, extra={"DDP_ASYNC": async_})
    assert "bucket(s)" in out4 and " 1 bucket(s)" not in out4
    assert_close(p1, p4)


def test_bad_options_are_one_clear_line(reaper, tmp_path):
    from conftest import run
    r = run([binary("train"), "--steps", "ten"], timeout=10)
    assert r.returncode == 2
    assert r.stderr.strip() == "train: bad value 'ten' for --steps"
    procs = launch(reaper, [binary("train"), "--batch", "5"], 2, start_store(reaper),
                   "bad" + uuid.uuid4().hex[:8])
    for rc, out, err in wait_all(procs, timeout=30):
        assert rc == 1
        assert "fatal: the global batch (5) must be a multiple of the world size (2)" in err


def test_two_nodes_match_one_rank(reaper, tmp_path, one_rank):
    """2 nodes x 2 ranks by hand on loopback (shared memory inside each node, TCP
    between the node leaders, peers found through a ddpstore): same model."""
    out1, p1 = one_rank
    out, p = train(reaper, 2, ["--steps", "100", "--check-sync"], tmp_path, nnodes=2,
                   port=start_store(reaper, tmp_path))
    assert_close(p1, p)
    assert checksum(out) == checksum(out1)
