"""gloo all-reduce timing, the anchor for bench/allreduce (Debian torch 1.13).
Usage: gloo_allreduce.py NRANKS BYTES[,BYTES...] ITERS[,ITERS...]
Starts NRANKS processes (torch.multiprocessing, fork), each joining a gloo
process group over a TCPStore on 127.0.0.1; times dist.all_reduce(float32)
like the C side: one warm-up, a barrier, ITERS timed calls, and the slowest
rank's mean. Prints one line per size: "gloo ranks=N bytes=B mean_us=T"."""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, n, port, sizes, iters, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    for size, it in zip(sizes, iters):
        t = torch.ones(size // 4, dtype=torch.float32)
        dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(it):
            dist.all_reduce(t)
        mean = torch.tensor([(time.perf_counter() - t0) / it], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        if rank == 0:
            out.put((size, mean.item()))
    dist.destroy_process_group()


def main():
    n = int(sys.argv[1])
    sizes = [int(x) for x in sys.argv[2].split(",")]
    iters = [int(x) for x in sys.argv[3].split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, n, port, sizes, iters, out)) for r in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    if any(p.exitcode != 0 for p in procs):
        sys.exit("gloo_allreduce: a worker failed")
    while not out.empty():
        size, mean = out.get()
        print(f"gloo ranks={n} bytes={size} mean_us={mean * 1e6:.1f}", flush=True)


if __name__ == "__main__":
    main()
