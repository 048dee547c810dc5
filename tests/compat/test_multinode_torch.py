"""Real PyTorch (CPU, gloo; every version torchroot.py finds: host 1.13,
trixie 2.6, sid's newest) across two ddprun agents, each a node on loopback or
in its own network namespace: DDP training agrees on every rank of both nodes
(static and dynamic rendezvous, the workers on the agents' store); a restart
forms a new group across both nodes; and a worker that raises on node 1 while
node 0's workers wait in a collective stops node 0 at once (under torchrun
they would hang until gloo's timeout), with node 1's @record traceback in
node 0's report. 2.x runs with the use_libuv default fix (nolibuv/)."""
import json
import os
import re
import subprocess
import textwrap

import pytest

from conftest import free_port
from mnutil import enter
import test_multinode_netns

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DDP_BUILD", os.path.join(REPO, "build"))
DDPRUN = os.path.join(BUILD, "bin", "ddprun")
# The network namespaces of the e2e suite, a fixture here too.
two_hosts = test_multinode_netns.two_hosts

TRAIN = textwrap.dedent("""
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) < int(os.environ.get("FAIL_ATTEMPTS", 0)):
        dist.barrier()
        if dist.get_rank() == 2:
            raise SystemExit(5)  # after the group formed: the next try must not see its keys
        import time
        time.sleep(60)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(10):
        x = torch.randn(16, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)).backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    agree = all(torch.equal(every[0], t) for t in every)
    print(f"rank {rank}/{world} node {os.environ['GROUP_RANK']} agree={agree} "
          f"sum={flat.sum().item():.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")

FAILS = textwrap.dedent("""
    import os
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        dist.init_process_group("gloo")
        if os.environ["RANK"] == "2":
            raise RuntimeError("rank 2 on node 1 gave up")
        dist.barrier()  # never completes: rank 2 is gone

    if __name__ == "__main__":
        main()
""")


def ends(text, head=1500, tail=2500):
    """Both ends of a long output: how an agent started (who hosts the
    store) and where it stood."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


def two_nodes(pt, tmp_path, script, node_args, nprocs=(2, 1), timeout=None, extra=(), ns=None,
              envs=({}, {})):
    """Start both agents (in namespaces ns when given), wait for both
    (bounded: DDP_TEST_MN_TIMEOUT, 240 s); [(rc, stdout, stderr)]."""
    timeout = timeout or int(os.environ.get("DDP_TEST_MN_TIMEOUT", 240))
    env = pt.env(PYTHON_EXEC=pt.python, TMPDIR=str(tmp_path))
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE"):
        env.pop(k, None)
    procs = [subprocess.Popen([*enter(ns[i] if ns else None), DDPRUN, *node_args(i),
                               "--nproc-per-node", str(nprocs[i]), "--shutdown-timeout", "10",
                               *extra, script], cwd=tmp_path, env=dict(env, **envs[i]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (0, 1)]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
        return [(p.returncode, *o) for p, o in zip(procs, outs)]
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                p.kill()
        # What each agent had said: a hang must show where it stood.
        said = [p.communicate() for p in procs]
        raise AssertionError(f"no end in {timeout} s:\n" + "\n".join(
            f"--- node {i} stdout:\n{o[-2000:]}\n--- node {i} stderr:\n{ends(e)}"
            for i, (o, e) in enumerate(said))) from None

    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def static(port, addr="127.0.0.1"):
    return lambda i: ["--nnodes", "2", "--node-rank", str(i), "--master-addr", addr,
                      "--master-port", str(port)]


def dynamic(port):
    return lambda i: ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                      f"127.0.0.1:{port}", "--rdzv-id", "torchjob"]


def check_training(results):
    lines = []
    for rc, out, err in results:
        assert rc == 0, err[-3000:]
        lines += [l for l in out.splitlines() if l.startswith("rank ")]
    lines.sort()
    assert [l.split()[1] for l in lines] == ["0/3", "1/3", "2/3"]
    assert {l.split()[3] for l in lines} == {"0", "1"}  # both nodes took part
    assert all("agree=True" in l for l in lines), lines
    assert len({l.split("sum=")[1] for l in lines}) == 1, lines


def test_ddp_across_two_static_nodes_agrees(pt, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    check_training(two_nodes(pt, tmp_path, "train.py", static(free_port())))


def test_ddp_across_two_dynamic_nodes_agrees(pt, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    check_training(two_nodes(pt, tmp_path, "train.py", dynamic(free_port())))


def test_restart_forms_a_new_group_across_both_nodes(pt, tmp_path):
    # PyTorch 2.x's env:// (agent store) has no /worker/attempt_N prefix
    # (1.13 had one): without an empty store per attempt, the new group's
    # gloo reads the dead attempt's addresses and fails to connect.
    (tmp_path / "train.py").write_text(TRAIN)
    # Dynamic: its workers' store is group rank 0's own, emptied per round.
    results = two_nodes(pt, tmp_path, "train.py", dynamic(free_port()),
                        extra=["--max-restarts", "1"], envs=({"FAIL_ATTEMPTS": "1"},) * 2)
    check_training(results)
    assert "restart 1 of 1" in results[0][2] + results[1][2]


def test_static_restart_forms_a_new_group_across_both_nodes(pt, tmp_path):
    # Static workers use the rendezvous store itself (node 0's, at
    # --master-port): node 0 empties it (all but ddprun/'s keys) when every
    # node has counted into the new round, before it closes the round.
    (tmp_path / "train.py").write_text(TRAIN)
    results = two_nodes(pt, tmp_path, "train.py", static(free_port()),
                        extra=["--max-restarts", "1"], envs=({"FAIL_ATTEMPTS": "1"},) * 2)
    check_training(results)
    assert "restart 1 of 1" in results[0][2] + results[1][2]


def test_ddp_across_two_network_namespaces_agrees(pt, tmp_path, two_hosts):
    ns, addrs = two_hosts
    (tmp_path / "train.py").write_text(TRAIN)
    # gloo binds the address its host name resolves to (127.0.0.1 by
    # /etc/hosts): name each namespace's own veth instead.
    veths = [{"GLOO_SOCKET_IFNAME": "vd" + n[len("ddpmn"):]} for n in ns]
    check_training(two_nodes(pt, tmp_path, "train.py", static(free_port(), addrs[0]), ns=ns,
                             envs=veths))


def test_a_failure_on_node_1_stops_node_0_out_of_its_collective(pt, tmp_path):
    (tmp_path / "fails.py").write_text(FAILS)
    (rc0, _, err0), (rc1, _, err1) = two_nodes(pt, tmp_path, "fails.py", static(free_port()),
                                               timeout=120)
    assert rc0 == rc1 == 1, err0[-3000:] + err1[-3000:]
    root = err0.split("Root Cause (first observed failure):")[1]
    assert "rank      : 2 (local_rank: 0)" in root
    assert "RuntimeError: rank 2 on node 1 gave up" in root


SLEEPS = textwrap.dedent("""
    import os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    if dist.get_rank() == int(os.environ["SLEEPER"]):
        time.sleep(600)  # in its own code, the group formed
    dist.all_reduce(torch.ones(1))
""")
SLEEPS_ON_NODE_1 = SLEEPS.replace('int(os.environ["SLEEPER"])', "2")  # node 1's rank


@pytest.mark.torch_ends
def test_a_hang_names_the_rank_in_its_own_code_on_the_other_node(pt, tmp_path):
    """Rank 2 (node 1) sleeps in its own code while ranks 0-1 (node 0) wait
    in an all_reduce. Each node places its PyTorch ranks from their native
    stacks and sends the places with its positions: the job's verdict,
    printed by the node that gathers, names rank 2 as the one the others wait
    for. Before, it said only that no rank reports its collectives. Node 1's
    outer launcher (TORCHELASTIC_ERROR_FILE) gets the rank's error as the
    root cause, with no "caused by the hang" either: it kept the rank's
    file's marker, written before the verdict."""
    (tmp_path / "sleeps.py").write_text(SLEEPS_ON_NODE_1)
    parent = tmp_path / "node1-error.json"
    results = two_nodes(pt, tmp_path, "sleeps.py", static(free_port()), timeout=150,
                        extra=["--hang-timeout", "4"],
                        envs=({}, {"TORCHELASTIC_ERROR_FILE": str(parent)}))
    assert [rc for rc, _, _ in results] == [124, 124], "\n".join(ends(e) for _, _, e in results)
    verdicts = [e.split("ddprun: the job hung: ", 1)[1].split("\n=====", 1)[0]
                for _, _, e in results if "ddprun: the job hung: " in e]
    assert len(verdicts) == 1, "\n".join(ends(e) for _, _, e in results)
    v = verdicts[0]
    assert "\n  rank 2 is in its own code, in no torch.distributed collective (see its stack): " \
        "the others wait for it\n" in v + "\n", v
    assert "\n  ranks 0-1 wait in a torch.distributed collective or send/recv " \
        "(a wait of c10d's in their stacks)\n" in v + "\n", v
    # The rank named is the root cause of both nodes' summaries (its node's
    # own, and node 0's, of every node's failures), not a victim that the
    # clock saw first: the round's end carries it to every node.
    for _, _, e in results:
        root = e.split("Root Cause (first observed failure):", 1)[1].split("\n=====", 1)[0]
        assert "rank      : 2 (local_rank: 0)" in root, root
        assert "caused_by" not in root and "first only by" not in root, root
    doc = json.loads(parent.read_text())
    assert doc["message"]["message"].startswith("Hang: ddprun sent SIGABRT"), doc
    assert "ddp_caused_by" not in doc["message"]["extraInfo"], doc


@pytest.mark.torch_ends
def test_a_hang_names_the_rank_on_rank_0s_node_in_every_nodes_summary(pt, tmp_path):
    """Rank 1 (node 0, with rank 0) sleeps. Node 1, which holds no part of
    it, named only its own rank 2 as root cause, stopped for the hang and
    first only by the clock, and nothing of rank 1 (found by a hostile
    review): it now says the job's root cause is rank 1 on node 0."""
    (tmp_path / "sleeps.py").write_text(SLEEPS)
    results = two_nodes(pt, tmp_path, "sleeps.py", static(free_port()), timeout=150,
                        extra=["--hang-timeout", "4"], envs=({"SLEEPER": "1"}, {"SLEEPER": "1"}))
    assert [rc for rc, _, _ in results] == [124, 124], "\n".join(ends(e) for _, _, e in results)
    for i, (_, _, e) in enumerate(results):
        assert re.search(r"root cause: rank 1 \(local rank 1\) on node 0 \(host [^)]*\), the rank "
                         r"the hang's verdict found the others waited for, exit status 124", e), \
            ends(e)
        root = e.split("Root Cause (first observed failure):", 1)[1].split("\n=====", 1)[0]
        if i == 0:  # every node's failures, the root cause among them
            assert "rank      : 1 (local_rank: 1)" in root and "caused_by" not in root, root
        else:  # its own, and where the job's root cause is
            assert "rank      : 2 (local_rank: 0)" in root, root
            assert "this node's first failure only: the job's root cause\n" \
                "              is rank 1 (local rank 1) on node 0" in root, root
