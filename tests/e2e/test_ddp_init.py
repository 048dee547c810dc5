"""ddp_init from a launcher's environment: identity, clear errors on
inconsistent values, backend selection (and saying so once on rank 0), print
control (quiet ranks, DDP_PRINT_RANKS, forced prints with a [rankN] prefix,
stderr untouched), and fatal errors written as torchelastic error files."""
import json
import os
import time
import uuid

import pytest

from conftest import prog, run
from ddp_launch import launch, start_store, wait_all


def base_env(**kw):
    e = {k: v for k, v in os.environ.items()
         if not (k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                       "MASTER_PORT", "GROUP_RANK", "GROUP_WORLD_SIZE") or k.startswith("DDP_")
                 or k.startswith("TORCHELASTIC_"))}
    e.update(kw)
    return e


def test_no_environment_is_a_world_of_one():
    r = run([prog("ddp_hello"), "info"], timeout=20, env=base_env())
    assert r.returncode == 0, r.stderr
    assert "[rank0] info rank=0 world=1 local=0/1 node=0/1 backend=cpu device=-1" in r.stdout


@pytest.mark.parametrize("env,needle", [
    ({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
     "RANK=4 is not below WORLD_SIZE=4"),
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29500"},
     "WORLD_SIZE=2 but MASTER_ADDR is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "h",
      "MASTER_PORT": "1"}, "LOCAL_WORLD_SIZE=3 is above WORLD_SIZE=2"),
    ({"DDP_BACKEND": "gloo"}, "DDP_BACKEND='gloo' is not auto, cpu or nccl"),
    ({"DDP_PRINT_RANKS": "0,x"}, "DDP_PRINT_RANKS='0,x'"),
])
def test_inconsistent_environment_is_one_clear_error(env, needle):
    r = run([prog("ddp_hello")], timeout=20, env=base_env(**env))
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def built_with_cuda():
    # make.vars follows the last make invocation, not necessarily this build:
    # ask the build itself (ddp_gpu_check exits 77 without CUDA).
    return run([prog("ddp_gpu_check")], timeout=30, env=base_env()).returncode != 77


def test_nccl_without_a_gpu_is_a_clear_error():
    r = run([prog("ddp_hello")], timeout=30, env=base_env(DDP_BACKEND="nccl"))
    assert r.returncode == 1
    if built_with_cuda():
        assert "backend nccl requested but no GPU is visible" in r.stderr, r.stderr
    else:
        assert "backend nccl requested but libddp was built without CUDA" in r.stderr, r.stderr


def test_backend_is_announced_once_on_rank_0(reaper):
    procs = launch(reaper, [prog("ddp_hello")], 3, start_store(reaper), "a" + uuid.uuid4().hex[:8],
                   extra={"DDP_QUIET": "0"})
    results = wait_all(procs, timeout=30)
    lines = [l for _, _, err in results for l in err.splitlines() if l.startswith("libddp:")]
    assert len(lines) == 1, lines
    # (a CUDA build without a GPU says why first: "libddp: no GPU (...): backend cpu, ...")
    assert "backend cpu, world size 3, 1 node(s)" in lines[0]
    assert "libddp:" in results[0][2]


def _hello(reaper, nproc, extra=None):
    procs = launch(reaper, [prog("ddp_hello")], nproc, start_store(reaper), "p" + uuid.uuid4().hex[:8],
                   extra=extra)
    results = wait_all(procs, timeout=30)
    assert all(rc == 0 for rc, _, _ in results), results
    return results


def test_only_rank_0_prints_by_default(reaper):
    results = _hello(reaper, 3)
    for rank, (_, out, err) in enumerate(results):
        plain = [l for l in out.splitlines() if not l.startswith("[rank")]
        assert plain == (["hello from rank 0 of 3"] if rank == 0 else [])
        # forced prints come through everywhere, prefixed
        assert f"[rank{rank}] forced from rank {rank}" in out.splitlines()
        # stderr is never silenced
        assert f"stderr from rank {rank}" in err


@pytest.mark.parametrize("spec,shown", [("all", {0, 1, 2}), ("1", {1}), ("0,2", {0, 2}),
                                        ("1-2", {1, 2}), ("none", set())])
def test_print_ranks_selects_who_prints(reaper, spec, shown):
    results = _hello(reaper, 3, {"DDP_PRINT_RANKS": spec})
    printed = {r for r, (_, out, _) in enumerate(results) if "hello from rank" in out}
    assert printed == shown


def test_fatal_error_writes_a_torchelastic_error_file_and_the_peer_a_marked_one(reaper, tmp_path):
    files = {r: tmp_path / f"error-{r}.json" for r in range(2)}
    procs = launch(reaper, [prog("ddp_hello"), "fatal", "loss is NaN at step 3"], 2,
                   start_store(reaper, tmp_path),
                   "f" + uuid.uuid4().hex[:8], extra={"DDP_TIMEOUT": "5"},
                   per_rank=lambda r: {"TORCHELASTIC_ERROR_FILE": str(files[r])})
    before = int(time.time())
    results = wait_all(procs, timeout=30)
    assert results[1][0] == 1
    assert "[rank1] fatal: loss is NaN at step 3" in results[1][2]
    doc = json.loads(files[1].read_text())
    msg = doc["message"]
    assert msg["message"] == "loss is NaN at step 3"
    assert "#0" in msg["extraInfo"]["py_callstack"]  # a backtrace, one frame per line
    assert abs(int(msg["extraInfo"]["timestamp"]) - before) < 60
    assert "ddp_caused_by" not in msg["extraInfo"]  # rank 1 failed on its own
    # Rank 0 did not call ddp_fatal: it just returned 3 once its barrier
    # failed. libddp wrote its error file when it saw rank 1 go, marked as
    # caused by rank 1, so that a launcher reports rank 1 as the root cause.
    assert results[0][0] == 3
    doc0 = json.loads(files[0].read_text())
    extra0 = doc0["message"]["extraInfo"]
    assert extra0["ddp_caused_by"] == f"rank 1 (pid {procs[1].pid}) exited"
    assert doc0["message"]["message"].endswith(f"rank 1 (pid {procs[1].pid}) exited")
    assert "C backtrace" in extra0["py_callstack"]
