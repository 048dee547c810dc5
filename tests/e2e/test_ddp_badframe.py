"""A node leader that breaks the TCP ring's protocol (issue 15's leftover):
it sends a frame with a length no call has, or an abort record that names no
node. The next leader fails naming it ("sent a bad frame"); before, only that
leader said why, and the nodes after it failed later with "the previous
node's leader is gone". Now that leader still sends its own frame of the
step, so that its abort record follows and every rank on every node fails
with the reason.

The worker is tests/progs/ddp_badframe.c: its own sendmsg corrupts the bad
node leader's first frame. It holds SIGTERM until its calls have ended, so
every rank reports how they ended. Every wait is bounded; no timing is
asserted."""
import re

import pytest

from conftest import free_port, prog
from mnutil import Agent, clean_env

WHAT = {"len": "a call with 1073741824 bytes of data",
        "record": "a bad abort record (from node 1000, 0 bytes)"}


def run_nodes(reaper, tmp_path, nprocs, mode, bad, last):
    port = free_port()
    env = clean_env(DDP_BACKEND="cpu", DDP_QUIET="1", DDP_TIMEOUT="120")
    agents = [Agent(reaper, tmp_path, f"node{i}",
                    ["--nnodes", str(len(nprocs)), "--node-rank", str(i), "--master-addr",
                     "127.0.0.1", "--master-port", str(port), "--nproc-per-node", str(n),
                     prog("ddp_badframe"), mode, str(bad), *(["last"] if last else [])],
                    env=env)
              for i, n in enumerate(nprocs)]
    # DDP_TIMEOUT far beyond this bound: only the abort record ends the calls in time.
    return agents, [a.wait(timeout=90) for a in agents]


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("mode", sorted(WHAT))
@pytest.mark.parametrize("nprocs,bad", [([1, 1], 0), ([1, 1, 1], 0), ([2, 1, 2], 1),
                                        ([1, 1, 1, 1], 2)])
def test_every_rank_fails_naming_the_bad_frame(reaper, tmp_path, nprocs, bad, mode, last):
    """last: the bad frame is the last of a broadcast's gather, after which
    the next leader reads the broadcast's data, not a frame: the record must
    not go there (a rank returned 0 with the record's bytes as its data)."""
    agents, rcs = run_nodes(reaper, tmp_path, nprocs, mode, bad, last)
    nxt = (bad + 1) % len(nprocs)
    for i, a in enumerate(agents):
        err = a.stderr()
        failed = re.findall(r"^badframe failed: (.*)$", err, re.M)
        assert len(failed) == nprocs[i], err
        for msg in failed:
            assert msg.endswith(WHAT[mode]), err
            if i != nxt:  # the reason came round the ring from the leader that read it
                assert f"{'broadcast' if last else 'all_reduce'}: on node {nxt} " in msg, err
        # The leader read the frame or the record (-EPROTO); a rank beside it
        # learns it from the leader (DDP_EPEER, "rank R failed").
        rcs_ = sorted(int(c) for c in re.findall(r"^badframe rc: (-?\d+)$", err, re.M))
        assert rcs_ == [-4007] * (nprocs[i] - 1) + [-71], err
        assert rcs[i] == 1, err
    coll = "broadcast" if last else "all_reduce"
    assert f"badframe failed: {coll}: {WHAT[mode]}\n" in agents[nxt].stderr()
    # The error file's reason names the leader that sent it.
    assert f"caused_by : rank {sum(nprocs[:bad])} (the leader of node {bad}) sent a bad frame" \
        in agents[nxt].stderr()
