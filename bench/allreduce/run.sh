#!/usr/bin/env bash
# bench/allreduce: libddp's cpu backend (shared memory, one node) against
# Open MPI 4.1 (MPI_Allreduce/Allgather/Bcast over its shared-memory path,
# `--mca btl self,vader`) and gloo (PyTorch's CPU backend, Debian torch 1.13),
# side by side in one run: float32 all_reduce (sum), all_gather and broadcast
# of 4 KiB, 64 KiB, 256 KiB, 1 MiB, 16 MiB and 64 MiB at 2 and 4 ranks (4
# ranks oversubscribe this 2-core machine, as CPU ranks beside data loaders
# often do). Every side
# is timed alike: warm-up, barrier, N calls, the slowest rank's mean; each
# cell is the median of REPEAT runs (default 3) and the spread of those runs
# is printed. Beside them, the memory-bandwidth floor measured in the same
# run (bench/allreduce/floor.c: one core's copy, the faster of memcpy and
# non-temporal stores, and y += x at each size) and
# each result as a multiple of it. Then the gradient path of one training
# step (DDP buckets during backward vs one flat all_reduce after it).
# Several nodes (as root, where network namespaces can be made): the TCP ring
# between node leaders, one rank per node on 2 and 4 namespaces joined by a
# bridge, against Open MPI over TCP and gloo, with bus bandwidth as a fraction
# of what one TCP stream carries over the same link (bench/allreduce/ring.py).
# Half precision (bfloat16, float16) all_reduce: libddp against its own float32
# of the same bytes and gloo's float16 (HALF=0 skips it).
# RING=0 skips the several-node part; BENCH_HUGEPAGES=1 puts every side's
# buffers on transparent huge pages (bench/allreduce/bench_buf.h says why).
# Numbers move with machine load; nothing here is asserted.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
bin=$B/bench/allreduce/bench_allreduce
floor=$B/bench/allreduce/floor
mpi=$B/bench/allreduce/mpi_coll
py=/usr/bin/python3
[[ -x $bin && -x $floor ]] || { echo "bench/allreduce: $bin or $floor not built (make bench)" >&2; exit 1; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null \
  || { echo "bench/allreduce: mpicc/mpirun missing (apt-get install libopenmpi-dev openmpi-bin)" >&2; exit 1; }
mpicc -O2 -o "$mpi" bench/allreduce/mpi_coll.c

# 64 and 256 KiB: where the paths change (the single copy from 16 KiB, the
# direct paths from 256 KiB), the rows in between went unmeasured.
sizes=4096,65536,262144,1048576,16777216,67108864
ddp_iters=${DDP_ITERS:-2000,1000,500,200,20,8}
mpi_iters=${MPI_ITERS:-2000,1000,500,200,20,8}
gloo_iters=${GLOO_ITERS:-300,200,100,50,10,5}
repeat=${REPEAT:-3}
ops=${OPS:-all_reduce all_reduce_shared all_gather all_gather_shared broadcast broadcast_shared}
cores=$(nproc)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# mpirun refuses root unless told; vader is its shared-memory transport.
mpirun_=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader)
# BENCH_HUGEPAGES=1: every side's buffers on transparent huge pages (bench_buf.h).
[[ -n ${BENCH_HUGEPAGES:-} ]] && mpirun_+=(-x BENCH_HUGEPAGES)

for ((r = 0; r < repeat; r++)); do
  "$floor" "$sizes" >>"$out"
  "$floor" "$sizes" 2 >>"$out"
  for n in 2 4; do
    for op in $ops; do
      "$bin" sizes "$n" "$sizes" "$ddp_iters" "$op" >>"$out"
      # OP_shared: libddp's buffers are as a DDP bucket's; the anchors' rows
      # are OP's (theirs are private buffers either way).
      [[ $op == *_shared ]] && continue
      "${mpirun_[@]}" -np "$n" "$mpi" "$op" "$sizes" "$mpi_iters" >>"$out"
      "$py" bench/allreduce/gloo_allreduce.py "$n" "$sizes" "$gloo_iters" "$op" >>"$out"
    done
    # Half precision: no MPI type for bfloat16, and torch 1.13's gloo sums
    # float16 but refuses bfloat16.
    if [[ ${HALF:-1} != 0 ]]; then
      "$bin" sizes "$n" "$sizes" "$ddp_iters" all_reduce_bf16 >>"$out"
      "$bin" sizes "$n" "$sizes" "$ddp_iters" all_reduce_f16 >>"$out"
      "$py" bench/allreduce/gloo_allreduce.py "$n" "$sizes" "$gloo_iters" all_reduce_f16 >>"$out"
    fi
  done
done
for n in 2 4; do "$bin" grads "$n" "${GRAD_STEPS:-5}" >>"$out"; done
ring=$(mktemp)
trap 'rm -f "$out" "$ring"' EXIT
if [[ ${RING:-1} != 0 && $(id -u) -eq 0 ]] && ip netns list >/dev/null 2>&1; then
  B=$B "$py" bench/allreduce/ring.py "${RING_NODES:-2 4}" "${RING_SIZES:-4096,1048576,16777216,67108864}" \
    "${RING_ITERS:-500,50,5,3}" "$repeat" >"$ring" || echo "bench/allreduce: ring.py failed" >&2
else
  echo "bench/allreduce: several nodes skipped (RING=0, or not root, or no network namespaces)" >&2
fi

"$py" - "$out" "$cores" "$ring" <<'PYEOF'
import re, statistics, sys
cores = int(sys.argv[2])
runs, floors, grads, floors2 = {}, {}, [], {}
for line in open(sys.argv[1]):
    m = re.match(r"(ddp|gloo|mpi) op=(\w+) ranks=(\d+) bytes=(\d+) mean_us=([\d.]+)", line)
    if m:
        runs.setdefault((m[1], m[2], int(m[3]), int(m[4])), []).append(float(m[5]))
        continue
    m = re.match(r"floor procs=2 bytes=(\d+) copy_us=([\d.]+) reduce_us=([\d.]+)", line)
    if m:
        floors2.setdefault(int(m[1]), []).append((float(m[2]), float(m[3])))
        continue
    m = re.match(r"floor bytes=(\d+) copy_us=([\d.]+) reduce_us=([\d.]+)", line)
    if m:
        floors.setdefault(int(m[1]), []).append((float(m[2]), float(m[3])))
        continue
    m = re.match(r"grads ranks=(\d+) mode=(\w+) step_ms=([-\d.]+) backward_ms=([-\d.]+) "
                 r"comm_ms=([-\d.]+) mbytes=([\d.]+) buckets=(\d+)", line)
    if m:
        grads.append(m.groups())

med = {k: statistics.median(v) for k, v in runs.items()}
spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in runs.items() if len(v) > 1}

def floor_us(op, n, b, table=None):
    table = table or floors
    c = statistics.median(x[0] for x in table[b])
    r = statistics.median(x[1] for x in table[b])
    over = max(1.0, n / cores)
    if op == "all_reduce":   # each rank sums its 1/n of every peer's buffer, copies the rest
        return (n - 1) / n * (r + c) * over
    if op == "all_gather":   # each rank writes the whole result: the n-1 parts it lacks and,
        return c * over      # the call not being in place, its own part from its send buffer
    return c * max(1.0, (n - 1) / cores)   # every non-root rank copies the whole buffer

def human(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

def t(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"

print(f"one node, float32, {cores} cores; median of {max(len(v) for v in runs.values())} runs "
      "(spread = (max - min) / median of libddp's runs)")
hdr = (f"{'op':>17} {'ranks':>5} {'size':>7} | {'floor':>9} | {'libddp':>9} {'x floor':>7} {'spread':>6} | "
       f"{'Open MPI':>9} {'gloo':>9} | {'MPI/ddp':>7} {'gloo/ddp':>8}")
print(hdr)
print("-" * len(hdr))
behind = []
far = []
OPS = ("all_reduce", "all_reduce_shared", "all_gather", "all_gather_shared", "broadcast",
       "broadcast_shared")
def base(op):  # the anchors and the floor of OP_shared are OP's
    return op[:-len("_shared")] if op.endswith("_shared") else op
for op in OPS:
    for n in (2, 4):
        for b in sorted(floors):
            d = med.get(("ddp", op, n, b))
            m = med.get(("mpi", base(op), n, b))
            g = med.get(("gloo", base(op), n, b))
            if d is None:
                continue
            f = floor_us(base(op), n, b)
            sp = spread.get(("ddp", op, n, b))
            print(f"{op:>17} {n:>5} {human(b):>7} | {t(f):>9} | {t(d):>9} {d / f:>6.2f}x "
                  f"{(f'{sp * 100:.0f}%' if sp is not None else '-'):>6} | "
                  f"{(t(m) if m else '-'):>9} {(t(g) if g else '-'):>9} | "
                  f"{(f'{m / d:.2f}x' if m else '-'):>7} {(f'{g / d:.1f}x' if g else '-'):>8}")
            if m and m < d:
                behind.append(f"{op} x{n} {human(b)} ({m / d:.2f}x)")
            if b == 64 << 20 and d / f > 1.3:
                far.append(f"{op} x{n} ({d / f:.2f}x)")
print("MPI/ddp, gloo/ddp: the anchor's time over libddp's (above 1: libddp is faster)")
print("OP_shared: libddp's buffers from ddp_alloc, as a DDP bucket's, which the node's ranks")
print("  read directly; the anchors' columns are their OP (private buffers)")
print("floor: one core's copy C (the faster of memcpy and a copy with non-temporal stores)")
print("  and y += x R at the size (floor.c), per rank:")
print("  all_reduce (n-1)/n * (R + C), all_gather C (not in place), broadcast C;")
print(f"  times n/cores when the ranks outnumber the {cores} cores")
print("behind Open MPI: " + (", ".join(behind) if behind else "none"))
print("64 MiB beyond 1.3x the floor: " + (", ".join(far) if far else "none"))
# Two ranks need two cores at once: on a busy machine one process gets a core
# more easily. The same floor measured in two processes at once (floor.c PROCS):
for op in OPS:
    print(f"{op} x2 against the floor measured in 2 processes at once: " + ", ".join(
        f"{human(b)} {med[('ddp', op, 2, b)] / floor_us(base(op), 2, b, floors2):.2f}x"
        for b in sorted(floors2) if ("ddp", op, 2, b) in med))
if any(k[1] == "all_reduce_bf16" for k in med) and not any(k[1] == "all_reduce" for k in med):
    print()
    print("half precision all_reduce: not shown, its float32 column needs all_reduce in OPS")
if any(k[1] == "all_reduce_bf16" for k in med) and any(k[1] == "all_reduce" for k in med):
    print()
    print("half precision all_reduce (sum, the same bytes; float32 accumulation): libddp")
    print("bfloat16 and float16 against its float32, and gloo's float16 (it has no bfloat16)")
    h4 = (f"{'ranks':>5} {'size':>7} | {'f32':>9} {'bf16':>9} {'x f32':>6} {'f16':>9} {'x f32':>6} | "
          f"{'gloo f16':>9} {'gloo/ddp':>8}")
    print(h4)
    print("-" * len(h4))
    for n in (2, 4):
        for b in sorted(floors):
            f, bf, hf = (med.get(("ddp", o, n, b)) for o in ("all_reduce", "all_reduce_bf16",
                                                               "all_reduce_f16"))
            g = med.get(("gloo", "all_reduce_f16", n, b))
            if not (f and bf and hf):
                continue
            print(f"{n:>5} {human(b):>7} | {t(f):>9} {t(bf):>9} {bf / f:>5.2f}x {t(hf):>9} "
                  f"{hf / f:>5.2f}x | {(t(g) if g else '-'):>9} "
                  f"{(f'{g / hf:.1f}x' if g else '-'):>8}")
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

ring, links, failed = {}, [], []
for line in open(sys.argv[3]):
    m = re.match(r"ring side=(\w+) nodes=(\d+) bytes=(\d+) mean_us=([\d.]+)", line)
    if m:
        ring.setdefault((m[1], int(m[2]), int(m[3])), []).append(float(m[4]))
    m = re.match(r"link bytes_per_s=([\d.]+)", line)
    if m:
        links.append(float(m[1]))
    m = re.match(r"ring side=(\w+) nodes=(\d+) failed", line)
    if m:
        failed.append(f"{m[1]} x{m[2]}")
if ring and links:
    lk = statistics.median(links)
    rm = {k: statistics.median(v) for k, v in ring.items()}
    print()
    print(f"several nodes: float32 all_reduce, one rank per node, network namespaces on a bridge;")
    print(f"one TCP stream over the link: {lk / 1e9:.2f} GB/s (median of {len(links)})")
    h3 = (f"{'nodes':>5} {'size':>7} | {'libddp':>9} {'busbw':>7} {'of link':>7} | "
          f"{'Open MPI':>9} {'busbw':>7} | {'gloo':>9} {'busbw':>7} | {'MPI/ddp':>7} {'gloo/ddp':>8}")
    print(h3)
    print("-" * len(h3))
    for n in sorted({k[1] for k in rm}):
        for b in sorted({k[2] for k in rm}):
            d, m_, g = (rm.get((s_, n, b)) for s_ in ("ddp", "mpi", "gloo"))
            if d is None:
                continue
            bus = lambda us: b / (us * 1e-6) * 2 * (n - 1) / n / 1e9
            cell = lambda us: f"{t(us):>9} {bus(us):>6.2f}G" if us else f"{'-':>9} {'-':>7}"
            print(f"{n:>5} {human(b):>7} | {cell(d)} {bus(d) * 1e9 / lk * 100:>6.0f}% | "
                  f"{cell(m_)} | {cell(g)} | "
                  f"{(f'{m_ / d:.2f}x' if m_ else '-'):>7} {(f'{g / d:.1f}x' if g else '-'):>8}")
    print("busbw = bytes/time * 2(n-1)/n; of link = libddp's busbw / one TCP stream's rate")
    if failed:
        print("failed: " + ", ".join(failed))
PYEOF
