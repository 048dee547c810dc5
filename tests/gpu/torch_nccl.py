"""A torchrun-style PyTorch script on the GPU, run under ddprun by
tests/gpu/run.sh: init_process_group("nccl") from ddprun's environment on
ddprun's agent store (an upstream wheel's client, libuv and all), the rank's
GPU from LOCAL_RANK, NCCL collectives on CUDA tensors checked against values
computed here, and a few DDP steps whose parameters must agree on every rank.
Prints one line, "torch-nccl ok ...", from rank 0; any mismatch raises."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

    # all_reduce: every rank adds (rank + 1) * x; the sum is known here (and
    # exact in float32: x < 1024 keeps it under 2^24 up to 180 ranks).
    x = torch.arange(1 << 20, dtype=torch.float32, device=dev) % 1024
    y = x * (rank + 1)
    dist.all_reduce(y)
    assert torch.equal(y, x * (world * (world + 1) // 2)), "all_reduce"
    # broadcast from the last rank, all_gather of each rank's number.
    b = torch.full((4096,), float(rank), device=dev)
    dist.broadcast(b, src=world - 1)
    assert torch.all(b == world - 1), "broadcast"
    parts = [torch.empty(3, device=dev) for _ in range(world)]
    dist.all_gather(parts, torch.full((3,), float(rank), device=dev))
    assert all(torch.all(p == r) for r, p in enumerate(parts)), "all_gather"

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 1)).to(dev), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator(device=dev).manual_seed(100 + rank)
    first = last = None
    for _ in range(30):
        xb = torch.randn(128, 64, device=dev, generator=g)
        loss = torch.nn.functional.mse_loss(model(xb), xb.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    assert all(torch.equal(every[0], t) for t in every), "DDP parameters differ"
    assert last < first, f"loss did not go down: {first} -> {last}"
    dist.barrier()
    if rank == 0:
        print(f"torch-nccl ok torch={torch.__version__} nccl={'.'.join(map(str, torch.cuda.nccl.version()))} "
              f"world={world} loss {first:.4f} -> {last:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
