"""libddp's DistributedSampler, randperm and DDP bucket assignment against real
PyTorch (Debian python3-torch 1.13): the same indices for many (len, replicas,
rank, shuffle, seed, epoch, drop_last) combinations, the same permutations, and
the same buckets as torch.distributed._compute_bucket_assignment_by_size."""
import os
import random
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e"))
from conftest import prog  # noqa: E402

import torch  # noqa: E402  (Debian python3-torch: required, never skipped)
from torch.utils.data.distributed import DistributedSampler  # noqa: E402


def ask(lines):
    """One answer line per request line from the ddp_compat program."""
    r = subprocess.run([prog("ddp_compat")], input="".join(l + "\n" for l in lines),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert len(out) == len(lines)
    return out


def as_list(line):
    assert line != "error"
    return [int(x) for x in line.split()] if line else []


def sampler_cases():
    rnd = random.Random(1234)
    cases = []
    # Every small shape exhaustively-ish, edge cases included.
    for length in [0, 1, 2, 3, 5, 7, 8, 10, 16, 17, 31, 100]:
        for replicas in [1, 2, 3, 4, 8]:
            for drop_last in [False, True]:
                for shuffle in [False, True]:
                    rank = rnd.randrange(replicas)
                    cases.append((length, replicas, rank, shuffle, rnd.choice([0, 1, 42]),
                                  rnd.randrange(4), drop_last))
    # Larger random ones, including seeds beyond 32 bits and negative seeds.
    for _ in range(150):
        replicas = rnd.randint(1, 16)
        cases.append((rnd.randint(0, 5000), replicas, rnd.randrange(replicas),
                      rnd.random() < 0.8,
                      rnd.choice([0, 1, 7, 2**31 - 1, 2**32 + 3, -5, rnd.randrange(10**6)]),
                      rnd.randrange(50), rnd.random() < 0.5))
    return cases


def test_sampler_gives_torchs_indices():
    cases = sampler_cases()
    ours = ask(["sampler %d %d %d %d %d %d %d" % (n, r, k, s, seed, e, d)
                for (n, r, k, s, seed, e, d) in cases])
    for case, line in zip(cases, ours):
        n, r, k, s, seed, e, d = case
        sampler = DistributedSampler(range(n), num_replicas=r, rank=k, shuffle=s, seed=seed,
                                     drop_last=d)
        sampler.set_epoch(e)
        assert as_list(line) == list(sampler), case


def test_sampler_ranks_together_cover_the_epoch_like_torch():
    n, r, seed = 1003, 7, 11
    ours = ask(["sampler %d %d %d 1 %d 5 0" % (n, r, k, seed) for k in range(r)])
    for k, line in enumerate(ours):
        s = DistributedSampler(range(n), num_replicas=r, rank=k, seed=seed)
        s.set_epoch(5)
        assert as_list(line) == list(s)


@pytest.mark.parametrize("n", [1, 2, 10, 1000, 100000])
def test_randperm_matches_torch(n):
    seeds = [0, 1, 12345, 2**32 - 1, 2**40 + 9, -1]
    ours = ask(["randperm %d %d" % (n, s) for s in seeds])
    for s, line in zip(seeds, ours):
        g = torch.Generator()
        g.manual_seed(s)
        assert as_list(line) == torch.randperm(n, generator=g).tolist(), s


DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
          "bf16": torch.bfloat16, "i32": torch.int32, "i64": torch.int64}


def test_bucket_assignment_matches_torch():
    import torch.distributed as dist
    rnd = random.Random(7)
    cases = []
    for _ in range(60):
        params = []
        for _ in range(rnd.randint(1, 40)):
            count = rnd.choice([1, 10, 1000, 50_000, 262_144, 300_000, 2_000_000, 7_000_000])
            dt = rnd.choice(["f32"] * 6 + ["f64", "f16", "bf16"])
            params.append((count, dt))
        caps = rnd.choice([(1 << 20, 25 << 20), (256 << 10, 4 << 20), (1 << 20, 1 << 20)])
        cases.append((caps, params))
    ours = ask(["buckets %d %d %s" % (c[0], c[1], " ".join("%d:%s" % p for p in ps))
                for c, ps in cases])
    for (caps, params), line in zip(cases, ours):
        # meta tensors: torch only needs numel and dtype
        ts = [torch.empty(n, dtype=DTYPES[dt], device="meta") for n, dt in params]
        want, _ = dist._compute_bucket_assignment_by_size(ts, list(caps))
        got = [[int(i) for i in b.split(",")] for b in line.split()]
        assert got == [list(b) for b in want], (caps, params)
