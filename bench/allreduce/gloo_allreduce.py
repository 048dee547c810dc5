"""gloo all-reduce timing, the anchor for bench/allreduce (Debian torch 1.13).
Usage: gloo_allreduce.py NRANKS BYTES[,BYTES...] ITERS[,ITERS...] [OP]
OP: all_reduce (float32 sum, the default), all_reduce_f16 (the same bytes
of float16; all_reduce_bf16 too, where gloo has it: torch 1.13's has not),
all_gather (BYTES is the whole gathered buffer, as nccl-tests count it) or
broadcast (root 0).
Starts NRANKS processes (torch.multiprocessing, fork), each joining a gloo
process group over a TCPStore on 127.0.0.1; times the calls like the C side: one warm-up, a barrier, ITERS timed calls, and the slowest
rank's mean. Prints one line per size: "gloo op=OP ranks=N bytes=B mean_us=T"."""
import os
import queue
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


HALF = {"all_reduce_bf16": torch.bfloat16, "all_reduce_f16": torch.float16}


def run(op, t, parts):
    if op == "all_gather":
        dist.all_gather(parts, t)
    elif op == "broadcast":
        dist.broadcast(t, 0)
    else:
        dist.all_reduce(t)


def worker(rank, n, port, sizes, iters, op, out):
    if port is not None:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    for size, it in zip(sizes, iters):
        dtype = HALF.get(op, torch.float32)
        es = torch.tensor([], dtype=dtype).element_size()
        count = size // es // n if op == "all_gather" else size // es
        # zeros for half precision, as bench_allreduce: sums of ones overflow
        t = (torch.zeros if op in HALF else torch.ones)(count, dtype=dtype)
        parts = [torch.empty_like(t) for _ in range(n)] if op == "all_gather" else None
        run(op, t, parts)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(it):
            run(op, t, parts)
        mean = torch.tensor([(time.perf_counter() - t0) / it], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        if rank == 0:
            out.put((size, mean.item()))
    dist.destroy_process_group()


def main():
    if sys.argv[1] == "launched":
        # One rank started by a launcher (bench/allreduce/ring.py, several
        # nodes): the world and the store come from its environment.
        n = int(os.environ["WORLD_SIZE"])
        sizes = [int(x) for x in sys.argv[2].split(",")]
        iters = [int(x) for x in sys.argv[3].split(",")]
        op = sys.argv[4] if len(sys.argv) > 4 else "all_reduce"
        out = queue.SimpleQueue()
        worker(int(os.environ["RANK"]), n, None, sizes, iters, op, out)
        while not out.empty():
            size, mean = out.get()
            print(f"gloo op={op} ranks={n} bytes={size} mean_us={mean * 1e6:.1f}", flush=True)
        return
    n = int(sys.argv[1])
    sizes = [int(x) for x in sys.argv[2].split(",")]
    iters = [int(x) for x in sys.argv[3].split(",")]
    op = sys.argv[4] if len(sys.argv) > 4 else "all_reduce"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, n, port, sizes, iters, op, out)) for r in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    if any(p.exitcode != 0 for p in procs):
        sys.exit("gloo_allreduce: a worker failed")
    while not out.empty():
        size, mean = out.get()
        print(f"gloo op={op} ranks={n} bytes={size} mean_us={mean * 1e6:.1f}", flush=True)


if __name__ == "__main__":
    main()
