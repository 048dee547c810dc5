#!/usr/bin/env bash
# bench/multinode: several nodes' launchers on one machine (loopback), one
# worker each, side by side in one run.
#   rendezvous: N launchers started together; median ms from the first start
#               to the last worker's start (rendezvous plus spawn); floor:
#               the N workers started directly by the harness
#   fail-stop:  once every worker runs, the last node's worker exits 1; ms
#               from that exit until every launcher has exited
# Launchers: ddprun (static rendezvous, and c10d), torchrun (Debian torch
# 1.13, static rendezvous, run through bench/launch/torchrun_fixed.py, which
# fixes its -r/-t parsing on Python 3.11: plain torchrun crashes there),
# and torchrun 2.x (static rendezvous; the torchrun of the Debian root with
# PyTorch 2.x in $TORCH2_ROOT, run by bench/torch2/in-root; only as root and
# when that root exists: bench/torch2/probe.sh, else skipped with the reason).
# torchrun needs ~240 MB RSS and ~2 CPU-s per node here; 32 nodes fit this
# machine's memory (about 8 GB) but take about a minute on 2 cores.
# torchrun 2.x: ~275 MB RSS per node.
# Environment: NS ("2 8 32"), REPS (ddprun runs per size; 5), TORCH_NS
# ("2 8 32"), TORCH2_NS (torchrun 2.x; TORCH_NS), TORCH_REPS (1, both
# torchruns), STOP_NS ("2 8"), STOP_LIMIT (seconds a launcher is given to
# stop; 20), B (build dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
NS=${NS:-2 8 32}
REPS=${REPS:-5}
TORCH_NS=${TORCH_NS-2 8 32} # empty: no torchrun
TORCH2_NS=${TORCH2_NS-$TORCH_NS} # empty: no torchrun 2.x
TORCH_REPS=${TORCH_REPS:-1}
STOP_NS=${STOP_NS:-2 8}
STOP_LIMIT=${STOP_LIMIT:-20}
PY=/usr/bin/python3
export DDPRUN=$PWD/$B/bin/ddprun
[[ -x $DDPRUN ]] || { echo "bench/multinode: $DDPRUN is not built (make bench)" >&2; exit 1; }
H=bench/multinode/mnbench.py

have_torch=0
$PY -c 'import torch.distributed.run' 2>/dev/null && have_torch=1
source bench/torch2/probe.sh
in_list() { [[ " $2 " == *" $1 "* ]]; }
ratio() { # a / b, or "-"
  awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "-"; else printf "%.0fx", a / b }'
}

echo "bench/multinode: N nodes on loopback, one worker each (ms; median of $REPS for ddprun, $TORCH_REPS for torchrun)"
echo "torchrun = Debian torch 1.13 through bench/launch/torchrun_fixed.py (fixes -r/-t parsing on Python 3.11)"
if [[ $have_torch2 -eq 1 ]]; then
  echo "trun2 = torchrun of torch $torch2_ver in $TORCH2_ROOT (bench/torch2/in-root), static"
else
  echo "trun2: skipped: $torch2_why"
fi
printf '\nrendezvous (first launcher start -> last worker start)\n'
printf '%-4s %7s %14s %12s %16s %13s %9s %10s\n' N floor ddprun_static ddprun_c10d torchrun_static \
  trun2_static trun/ddp trun2/ddp
for n in $NS; do
  f=$($PY $H rdzv floor "$n" "$REPS")
  d=$($PY $H rdzv ddprun "$n" "$REPS")
  c=$($PY $H rdzv ddprun-c10d "$n" "$REPS")
  t=-
  if [[ $have_torch -eq 1 ]] && in_list "$n" "$TORCH_NS"; then
    t=$($PY $H rdzv torchrun "$n" "$TORCH_REPS")
  fi
  t2=-
  if [[ $have_torch2 -eq 1 ]] && in_list "$n" "$TORCH2_NS"; then
    t2=$($PY $H rdzv torchrun2 "$n" "$TORCH_REPS")
  fi
  printf '%-4s %7s %14s %12s %16s %13s %9s %10s\n' "$n" "$f" "$d" "$c" "$t" "$t2" \
    "$(ratio "$t" "$d")" "$(ratio "$t2" "$d")"
done

printf '\nfail-stop (worker on the last node exits 1 -> every launcher exited)\n'
printf '%-4s %14s %26s %26s\n' N ddprun_static torchrun_static trun2_static
for n in $STOP_NS; do
  d=$($PY $H stop ddprun "$n" "$STOP_LIMIT")
  t=- t2=-
  if [[ $have_torch -eq 1 ]] && in_list "$n" "$TORCH_NS"; then
    t=$($PY $H stop torchrun "$n" "$STOP_LIMIT")
  fi
  if [[ $have_torch2 -eq 1 ]] && in_list "$n" "$TORCH2_NS"; then
    t2=$($PY $H stop torchrun2 "$n" "$STOP_LIMIT")
  fi
  printf '%-4s %14s %26s %26s\n' "$n" "$d" "$t" "$t2"
done
