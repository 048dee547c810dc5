"""ddp_init's join at the launcher's store: every rank of a launched job meets
the others at MASTER_ADDR:MASTER_PORT before anything else waits on a peer, so
a wrong launch fails at once on every rank with the culprit named (a rank that
disagrees on WORLD_SIZE, a rank started twice, the leftovers of an earlier job
under the same run id), a rank that never comes is named when the init
timeout runs out, and an unreachable store is named with its address. Under
ddprun every rank joins through the agent's store. The ranks are started by
hand around a standalone `ddpstore serve`, with deliberately wrong
environments."""
import os
import re
import subprocess
import uuid

import pytest

from conftest import binary, prog, free_port, run, wait_for
from ddp_launch import launch, start_store, wait_all


def run_id():
    return "j" + uuid.uuid4().hex[:10]


def segments(rid):
    return [n for n in os.listdir("/dev/shm") if rid in n]


def joined(port, rid):
    """How many ranks have counted themselves in (join/count's low bits)."""
    r = subprocess.run([binary("ddpstore"), "--addr", f"127.0.0.1:{port}", "--prefix",
                        f"ddp/{rid}/r0", "add", "join/count", "0"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return int(r.stdout) & ((1 << 21) - 1)


def errors(results):
    """Every rank failed in ddp_init: its one message line each."""
    out = []
    for rank, (rc, so, se) in enumerate(results):
        assert rc == 1, f"rank {rank}: rc={rc}\n{so}\n{se}"
        lines = [l for l in se.splitlines() if "ddp_init" in l]
        assert len(lines) == 1, se
        assert lines[0].count("ddp_init:") == 1, lines[0]  # said once, by libddp
        out.append(lines[0])
    return out


def believes_eight(rank):
    # locally consistent (one node of eight), globally wrong
    return {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"} if rank == 3 else {}


@pytest.mark.parametrize("odd_arrives", ["first", "last"])
def test_a_rank_that_disagrees_fails_every_rank_naming_it(reaper, tmp_path, odd_arrives):
    """Rank 3 believes WORLD_SIZE=8, the others 4. Whether it comes first (the
    next rank to arrive sees it) or completes the count of four (while it
    waits for eight), every rank fails at once with the same sentence, naming
    it against the ranks present; nothing is left in /dev/shm."""
    store, rid = start_store(reaper, tmp_path), run_id()
    cmd = [prog("ddp_hello")]
    # DDP_TIMEOUT far beyond the test's own deadline: only detection passes
    extra = {"DDP_TIMEOUT": "600"}
    first, then = ([3], [0, 1, 2]) if odd_arrives == "first" else ([0, 1, 2], [3])
    procs = launch(reaper, cmd, 4, store, rid, extra=extra, per_rank=believes_eight,
                   only=first)
    wait_for(lambda: joined(store, rid) == len(first), timeout=20, what="the first ranks")
    procs += launch(reaper, cmd, 4, store, rid, extra=extra, per_rank=believes_eight,
                    only=then)
    lines = errors(wait_all(procs, timeout=60))
    assert len(set(lines)) == 1, lines
    if odd_arrives == "last":
        assert lines[0].endswith("ddp_init: rank 3 says WORLD_SIZE=8, ranks 0-2 say 4")
    else:
        assert re.search(r"ddp_init: rank 3 says WORLD_SIZE=8, "
                         r"(rank [012] says|ranks [0-2][-, 0-2]* say) 4$", lines[0]), lines[0]
    assert segments(rid) == []


def test_a_rank_started_twice_is_named(reaper, tmp_path):
    """Four processes for a world of four, but the third also says RANK=1."""
    store, rid = start_store(reaper, tmp_path), run_id()
    procs = launch(reaper, [prog("ddp_hello")], 4, store, rid, extra={"DDP_TIMEOUT": "600"},
                   per_rank=lambda r: {"RANK": "1", "LOCAL_RANK": "1"} if r == 2 else {})
    pids = {p.pid for p in procs}
    for line in errors(wait_all(procs, timeout=60)):
        assert "rank 1 was started twice (pid " in line, line
        named = {int(w) for w in line.replace(",", " ").split() if w.isdigit()}
        assert len(named & pids) == 2, (line, pids)


def test_an_earlier_job_with_the_same_run_id_is_not_taken_for_this_one(reaper, tmp_path):
    store, rid = start_store(reaper, tmp_path), run_id()
    first = wait_all(launch(reaper, [prog("ddp_hello")], 2, store, rid), timeout=60)
    assert all(rc == 0 for rc, _, _ in first), first
    again = launch(reaper, [prog("ddp_hello")], 2, store, rid, extra={"DDP_TIMEOUT": "600"})
    for line in errors(wait_all(again, timeout=60)):
        assert "processes joined for WORLD_SIZE=2" in line, line
        assert f"an earlier job with TORCHELASTIC_RUN_ID={rid} used this store" in line, line


def test_ranks_that_never_come_are_named_when_the_timeout_runs_out(reaper, tmp_path):
    store, rid = start_store(reaper, tmp_path), run_id()
    procs = launch(reaper, [prog("ddp_hello")], 6, store, rid, extra={"DDP_TIMEOUT": "2"},
                   only=[0, 1, 3, 4])
    for line in errors(wait_all(procs, timeout=60)):
        assert line.endswith("ddp_init: ranks 2, 5 did not join within 1.8 s (4 of 6 did)"), line
    # the join comes first: no segment was ever made for the ranks present
    assert segments(rid) == []


def test_an_unreachable_store_is_named_with_its_address(reaper):
    port = free_port()  # nothing listens there
    procs = launch(reaper, [prog("ddp_hello")], 2, port, run_id(), extra={"DDP_TIMEOUT": "1"})
    for line in errors(wait_all(procs, timeout=60)):
        assert line.endswith(f"ddp_init: cannot reach the store at 127.0.0.1:{port} "
                             "(MASTER_ADDR:MASTER_PORT) within 1 s: connection refused "
                             "(nothing listens at that address)"), line


def test_a_world_of_one_under_a_launcher_joins_too(reaper):
    port = free_port()
    procs = launch(reaper, [prog("ddp_hello")], 1, port, run_id(), extra={"DDP_TIMEOUT": "1"})
    assert "cannot reach the store at 127.0.0.1" in errors(wait_all(procs, timeout=60))[0]


def test_store_0_keeps_one_node_in_shared_memory(reaper):
    """DDP_STORE=0: no store is asked (nothing listens at MASTER_PORT), the
    ranks still form their world through shared memory."""
    procs = launch(reaper, [prog("ddp_coll"), "check"], 3, free_port(), run_id(),
                   extra={"DDP_STORE": "0"})
    for rank, (rc, so, se) in enumerate(wait_all(procs, timeout=90)):
        assert rc == 0, f"rank {rank}: {se}"
        assert f"[rank{rank}] ok rank {rank}" in so


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_under_ddprun_every_rank_joins_through_the_agents_store(nproc):
    r = run([binary("ddprun"), f"--nproc-per-node={nproc}", prog("ddp_hello"), "members"],
            timeout=120, env=dict(os.environ, DDP_QUIET="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("joined:")]
    assert len(lines) == 1, r.stdout
    assert sorted(int(x) for x in lines[0].split()[1:]) == list(range(nproc))
