"""A MoCo-style PyTorch script (python3-torch 1.13, CPU, gloo) as a 3-node
Slurm job of 6 ranks: a DDP query encoder, a momentum key encoder, keys
gathered from every rank into a shared queue (MoCo's concat_all_gather) and
the batch shuffle across ranks by a broadcast permutation. Every rank ends
with the same parameters and the same queue."""
import importlib.util
import textwrap

import pytest

from conftest import job_script, read

MOCO = textwrap.dedent("""
    import os
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    def gather(t):
        every = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(every, t)
        return torch.cat(every)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    def encoder():
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                   torch.nn.Linear(32, 8))
    q_enc = DDP(encoder())
    k_enc = encoder()
    k_enc.load_state_dict(q_enc.module.state_dict())
    queue = F.normalize(torch.randn(8, 48), dim=0)
    opt = torch.optim.SGD(q_enc.parameters(), lr=0.03)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(5):
        x = torch.randn(4, 16, generator=g)
        q = F.normalize(q_enc(x + 0.1 * torch.randn(4, 16, generator=g)), dim=1)
        with torch.no_grad():
            for pq, pk in zip(q_enc.module.parameters(), k_enc.parameters()):
                pk.mul_(0.99).add_(pq.detach(), alpha=0.01)
            # Shuffle the global batch across ranks (MoCo's shuffle BN).
            allx = gather(x)
            perm = torch.randperm(allx.shape[0]) if rank == 0 else torch.zeros(
                allx.shape[0], dtype=torch.long)
            dist.broadcast(perm, 0)
            mine = perm.view(world, -1)[rank]
            k = F.normalize(k_enc(allx[mine]), dim=1)
            k = gather(k)[torch.argsort(perm)].view(world, -1, 8)[rank]
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ queue], dim=1) / 0.07
        loss = F.cross_entropy(logits, torch.zeros(4, dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            keys = gather(k)
            queue = torch.cat([keys.T, queue], dim=1)[:, :48]
    flat = torch.cat([p.detach().flatten() for p in q_enc.parameters()] + [queue.flatten()])
    every = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    agree = all(torch.equal(every[0], t) for t in every)
    print(f"moco rank {rank}/{world} node {os.environ['GROUP_RANK']} agree={agree}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no python3-torch")
def test_moco_style_gloo_across_three_nodes(cluster, tmp_path):
    (tmp_path / "moco.py").write_text(MOCO)
    script = job_script(tmp_path / "job.sh",
                        "srun ddprun --nproc-per-node=2 --master-port=29500 "
                        f"{tmp_path / 'moco.py'}", extra="--ntasks-per-node=1")
    jobid = cluster.sbatch(script, env=cluster.env(PYTHON_EXEC="/usr/bin/python3"))
    j = cluster.wait_job(jobid, timeout=240)
    log = read(tmp_path / "job.out")
    assert j["JobState"] == "COMPLETED" and j["ExitCode"] == "0:0", log
    for rank in range(6):
        assert f"moco rank {rank}/6 node {rank // 2} agree=True" in log, log
