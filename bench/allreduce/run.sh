#!/usr/bin/env bash
# bench/allreduce: libddp's cpu backend against gloo (PyTorch's CPU backend,
# Debian python3-torch 1.13), same machine, same run, one node: float32
# all_reduce of 4 KiB, 1 MiB, 16 MiB and 64 MiB at 2 and 4 ranks (time, algbw,
# busbw as nccl-tests define them, and the ratio), then the gradient path of one
# training step (DDP buckets during backward vs one flat all_reduce after it).
# Targets (issue 5): >= 5x gloo's bandwidth at 64 MiB, >= 10x lower latency at
# 4 KiB. Both sides are timed alike: warm-up, barrier, N calls, the slowest
# rank's mean. Prints one table; numbers move with machine load (never asserted).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
bin=$B/bench/allreduce/bench_allreduce
py=/usr/bin/python3
[[ -x $bin ]] || { echo "bench/allreduce: $bin not built (make bench)" >&2; exit 1; }

sizes=4096,1048576,16777216,67108864
ddp_iters=${DDP_ITERS:-2000,200,20,8}
gloo_iters=${GLOO_ITERS:-300,50,10,5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for n in 2 4; do
  {
    "$bin" sizes "$n" "$sizes" "$ddp_iters"
    "$py" bench/allreduce/gloo_allreduce.py "$n" "$sizes" "$gloo_iters"
    "$bin" grads "$n" "${GRAD_STEPS:-5}"
  } >>"$out"
done

"$py" - "$out" <<'PYEOF'
import re, sys
rows, grads = {}, []
for line in open(sys.argv[1]):
    m = re.match(r"(ddp|gloo) ranks=(\d+) bytes=(\d+) mean_us=([\d.]+)", line)
    if m:
        rows[(m[1], int(m[2]), int(m[3]))] = float(m[4])
        continue
    m = re.match(r"grads ranks=(\d+) mode=(\w+) step_ms=([-\d.]+) backward_ms=([-\d.]+) "
                 r"comm_ms=([-\d.]+) mbytes=([\d.]+) buckets=(\d+)", line)
    if m:
        grads.append(m.groups())

def human(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

print("float32 all_reduce, one node: libddp cpu backend (shared memory) vs gloo (torch 1.13)")
hdr = (f"{'ranks':>5} {'size':>7} | {'ddp time':>10} {'algbw':>7} {'busbw':>7} | "
       f"{'gloo time':>10} {'algbw':>7} {'busbw':>7} | {'ratio':>6}")
print(hdr)
print("-" * len(hdr))
verdict = []
for n in (2, 4):
    for b in sorted({k[2] for k in rows}):
        d, g = rows.get(("ddp", n, b)), rows.get(("gloo", n, b))
        if d is None or g is None:
            continue
        def bw(us):
            alg = b / (us * 1e-6) / 1e9
            return alg, alg * 2 * (n - 1) / n
        da, db = bw(d)
        ga, gb = bw(g)
        ratio = g / d
        t = lambda us: f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"
        print(f"{n:>5} {human(b):>7} | {t(d):>10} {da:>6.2f}G {db:>6.2f}G | "
              f"{t(g):>10} {ga:>6.2f}G {gb:>6.2f}G | {ratio:>5.1f}x")
        if b == 64 << 20:
            verdict.append(f"64 MiB x{n}: {ratio:.1f}x gloo's bandwidth "
                           f"({'meets' if ratio >= 5 else 'MISSES'} >= 5x)")
        if b == 4 << 10:
            verdict.append(f"4 KiB x{n}: {ratio:.1f}x lower latency "
                           f"({'meets' if ratio >= 10 else 'MISSES'} >= 10x)")
print("algbw = bytes/time, busbw = algbw * 2(n-1)/n (GB/s); ratio = gloo time / ddp time")
print("targets: " + "; ".join(verdict))
print()
print("gradient path, one training step (median of steps): backward of a 24-layer model,")
print("then either one flat all_reduce of every gradient or DDP buckets launched during backward")
h2 = f"{'ranks':>5} {'MB':>6} {'buckets':>7} | {'backward':>9} | {'flat: step':>10} {'comm':>8} | {'buckets: step':>13} {'comm':>8}"
print(h2)
print("-" * len(h2))
by = {}
for n, mode, step, bwd, comm, mb, nb in grads:
    by.setdefault(n, {})[mode] = (float(step), float(bwd), float(comm), mb, nb)
for n in sorted(by):
    f, k = by[n].get("flat"), by[n].get("buckets")
    if not f or not k:
        continue
    print(f"{n:>5} {f[3]:>6} {k[4]:>7} | {f[1]:>7.1f}ms | {f[0]:>8.1f}ms {f[2]:>6.1f}ms | "
          f"{k[0]:>11.1f}ms {k[2]:>6.1f}ms")
print("comm = step - backward alone: the all-reduce time left exposed after backward")
PYEOF
