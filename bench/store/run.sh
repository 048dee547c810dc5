#!/usr/bin/env bash
# bench/store: our store server (ddpstore serve) beside PyTorch 1.13's own
# TCPStore server (Debian python3-torch via /usr/bin/python3), driven by the
# same C load generator speaking the 1.x dialect (build/bench/store/storebench;
# its closed loop runs on io_uring where the kernel allows, so that it takes
# less CPU from the server it measures; STOREBENCH_IO=uv runs it on libuv).
# Closed-loop ops/s with p50/p99 latency at 1, 64 and 1024 connections, and
# rendezvous time for 1024 and 4096 clients (connect, ADD a counter, WAIT for
# the key the last one sets). Both servers are measured alternately, the
# median of $STORE_BENCH_REPS runs each is printed in one table with
# ratios is printed. Server CPU time per op is read from /proc.
# PyTorch 2.x's TCPStore server (the one in $TORCH2_ROOT, run by
# bench/torch2/in-root; Debian builds it without libuv, so it is the
# non-libuv server) is measured the same way, against ours, both driven in the
# 2.x dialect (STOREBENCH_DIALECT=2), in a second table; only as root and when
# that root exists (bench/torch2/probe.sh), else the table says why not.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
GEN=$B/bench/store/storebench
DDPSTORE=$B/bin/ddpstore
PY=/usr/bin/python3
SECS=${STORE_BENCH_SECONDS:-2}
REPS=${STORE_BENCH_REPS:-5}
NCPU=$(nproc)
# Generator processes: for rendezvous as many as CPUs (clients are many
# independent processes in reality); for the closed loop one CPU is left to
# the server.
RDZV_PROCS=$(( NCPU > 4 ? 4 : NCPU ))
OPS_PROCS=$(( NCPU > 2 ? NCPU - 1 : 1 ))
OPS_PROCS=$(( OPS_PROCS > 4 ? 4 : OPS_PROCS ))

for f in "$GEN" "$DDPSTORE"; do
  [[ -x $f ]] || { echo "bench/store: $f not built (make bench builds it)" >&2; exit 1; }
done
"$PY" -c "import torch.distributed" 2>/dev/null \
  || { echo "bench/store: $PY cannot import torch (apt-get install python3-torch)" >&2; exit 1; }

source bench/torch2/probe.sh

tmp=$(mktemp -d)
ours_pid= torch_pid= torch2_pid=
cleanup() {
  [[ -n $ours_pid ]] && kill "$ours_pid" 2>/dev/null || true
  [[ -n $torch_pid ]] && kill "$torch_pid" 2>/dev/null || true
  [[ -n $torch2_pid ]] && kill "$torch2_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

"$DDPSTORE" serve --host 127.0.0.1 --port 0 --port-file "$tmp/ours.port" --quiet &
ours_pid=$!
"$PY" bench/store/torch_server.py > "$tmp/torch.port" 2> "$tmp/torch.err" &
torch_pid=$!
if [[ $have_torch2 -eq 1 ]]; then
  # in-root's every step execs: $! is the server's own pid (for its CPU time)
  bench/torch2/in-root python3 /mnt/store/torch_server.py > "$tmp/torch2.port" 2> "$tmp/torch2.err" &
  torch2_pid=$!
fi
for i in $(seq 300); do
  [[ -s $tmp/ours.port && -s $tmp/torch.port ]] \
    && { [[ $have_torch2 -eq 0 ]] || [[ -s $tmp/torch2.port ]]; } && break
  sleep 0.1
done
[[ -s $tmp/ours.port && -s $tmp/torch.port ]] \
  || { echo "bench/store: servers did not start" >&2; cat "$tmp/torch.err" >&2; exit 1; }
port_ours=$(cat "$tmp/ours.port")
port_torch=$(head -1 "$tmp/torch.port")
if [[ $have_torch2 -eq 1 && ! -s $tmp/torch2.port ]]; then
  have_torch2=0
  torch2_why="its TCPStore server did not start: $(tail -n 1 "$tmp/torch2.err")"
fi
port_torch2=$(head -1 "$tmp/torch2.port" 2>/dev/null || true)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
field() { sed -n "s/.*$1=\([0-9.na]*\).*/\1/p" <<<"$2"; }

declare -A runs
# add(name, value): one run's figure ("nan": the run failed)
add() { runs[$1]="${runs[$1]:-} $2"; }
# med(name): the median of the runs' figures, "nan" when none succeeded
med() {
  tr ' ' '\n' <<<"${runs[$1]:-}" | grep -E '^[0-9.]+$' | sort -g \
    | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan";
             else if (NR % 2) print v[(NR + 1) / 2];
             else printf "%.10g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# A series is a server and the dialect it is driven in: ours and torch
# (PyTorch 1.13) in the 1.x dialect, ours2 and torch2 (PyTorch 2.x) in the 2.x
# one. series(name) sets port, pid and dialect.
series() {
  case $1 in
    ours) port=$port_ours pid=$ours_pid dialect=1 ;;
    torch) port=$port_torch pid=$torch_pid dialect=1 ;;
    ours2) port=$port_ours pid=$ours_pid dialect=2 ;;
    torch2) port=$port_torch2 pid=$torch2_pid dialect=2 ;;
  esac
}
SERIES="ours torch"
[[ $have_torch2 -eq 1 ]] && SERIES+=" ours2 torch2"

run_ops() {  # series conns
  local port pid dialect out t0 t1 ops
  series "$1"
  t0=$(cpu_ticks "$pid")
  out=$(STOREBENCH_DIALECT=$dialect timeout 300 "$GEN" ops 127.0.0.1 "$port" "$2" "$SECS" "$OPS_PROCS" \
    || echo "ops=nan")
  t1=$(cpu_ticks "$pid")
  ops=$(field ops "$out")
  add "$1.ops.$2" "$ops"
  add "$1.p50.$2" "$(field p50_us "$out")"
  add "$1.p99.$2" "$(field p99_us "$out")"
  if [[ $ops != nan && $ops != 0 ]]; then
    # CPU per op: ticks are 10 ms; the generator runs $SECS seconds.
    add "$1.cpu.$2" "$(awk -v t=$((t1 - t0)) -v o="$ops" -v s="$SECS" \
      'BEGIN { printf "%.1f", t * 10000 / (o * s) }')"
  fi
}

run_rdzv() {  # series clients rep
  local port pid dialect out
  series "$1"
  out=$(STOREBENCH_DIALECT=$dialect timeout 300 "$GEN" rdzv 127.0.0.1 "$port" "$2" "$1.r$2x$3" \
    "$RDZV_PROCS" || echo "rdzv_ms=nan")
  add "$1.rdzv.$2" "$(field rdzv_ms "$out")"
  add "$1.conn.$2" "$(field connect_ms "$out")"
}

for rep in $(seq "$REPS"); do
  for n in 1 64 1024; do
    for s in $SERIES; do run_ops $s $n; done
  done
  for n in 1024 4096; do
    for s in $SERIES; do run_rdzv $s $n "$rep"; done
  done
done

ratio() {  # a b higher_is_better
  awk -v a="$1" -v b="$2" -v h="$3" 'BEGIN {
    if (a == "nan" || b == "nan" || a == 0 || b == 0) { print "n/a"; exit }
    printf "%.1fx", h ? a / b : b / a }'
}

# table(a b label): series a (ours) beside series b, b's column named label
table() {
  local a=$1 b=$2 n o t target
  printf '%-30s %-28s %-28s %-7s %s\n' "" "ours" "$3" "ratio" "target"
  for n in 1 64 1024; do
    o=$(med $a.ops.$n) t=$(med $b.ops.$n)
    target=""; [[ $n == 64 ]] && target=">= 3x"
    printf '%-30s %-28s %-28s %-7s %s\n' "ops/s, $n conn(s)" \
      "$o (p50 $(med $a.p50.$n)us p99 $(med $a.p99.$n)us)" \
      "$t (p50 $(med $b.p50.$n)us p99 $(med $b.p99.$n)us)" \
      "$(ratio "$o" "$t" 1)" "$target"
  done
  for n in 64 1024; do
    o=$(med $a.cpu.$n) t=$(med $b.cpu.$n)
    printf '%-30s %-28s %-28s %-7s\n' "server CPU us/op, $n conns" "$o" "$t" "$(ratio "$o" "$t" 0)"
  done
  for n in 1024 4096; do
    o=$(med $a.rdzv.$n) t=$(med $b.rdzv.$n)
    printf '%-30s %-28s %-28s %-7s %s\n' "rendezvous, $n clients" "$o ms" "$t ms" \
      "$(ratio "$o" "$t" 0)" ">= 5x"
    printf '%-30s %-28s %-28s\n' "  of which all connected" \
      "$(med $a.conn.$n) ms" "$(med $b.conn.$n) ms"
  done
}

echo "store: ours (ddpstore serve) vs PyTorch 1.13 TCPStore server, same 1.x-dialect load generator"
echo "machine: $NCPU CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); median of $REPS runs;" \
     "closed loop ${SECS}s per run (first 20% warm-up), $OPS_PROCS generator process(es);" \
     "rendezvous with $RDZV_PROCS generator process(es)"
table ours torch "pytorch 1.13"
echo
if [[ $have_torch2 -eq 1 ]]; then
  echo "store: ours vs PyTorch $torch2_ver TCPStore server (in $TORCH2_ROOT; non-libuv: Debian builds it without), same load generator in the 2.x dialect"
  table ours2 torch2 "pytorch ${torch2_ver%%+*}"
else
  echo "store: PyTorch 2.x TCPStore server skipped: $torch2_why"
fi
echo "(all connected: every client's TCP handshake is done; a server cannot make it"
echo " shorter, only longer (a full listen backlog makes clients retry their SYNs);"
echo " the rest is the server's work: accept, ADD, WAIT and the replies)"
