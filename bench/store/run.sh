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

tmp=$(mktemp -d)
ours_pid= torch_pid=
cleanup() {
  [[ -n $ours_pid ]] && kill "$ours_pid" 2>/dev/null || true
  [[ -n $torch_pid ]] && kill "$torch_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

"$DDPSTORE" serve --host 127.0.0.1 --port 0 --port-file "$tmp/ours.port" --quiet &
ours_pid=$!
"$PY" bench/store/torch_server.py > "$tmp/torch.port" 2> "$tmp/torch.err" &
torch_pid=$!
for i in $(seq 300); do
  [[ -s $tmp/ours.port && -s $tmp/torch.port ]] && break
  sleep 0.1
done
[[ -s $tmp/ours.port && -s $tmp/torch.port ]] \
  || { echo "bench/store: servers did not start" >&2; cat "$tmp/torch.err" >&2; exit 1; }
port_ours=$(cat "$tmp/ours.port")
port_torch=$(head -1 "$tmp/torch.port")

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

run_ops() {  # server conns
  local port pid out t0 t1 ops
  if [[ $1 == ours ]]; then port=$port_ours pid=$ours_pid; else port=$port_torch pid=$torch_pid; fi
  t0=$(cpu_ticks "$pid")
  out=$(timeout 300 "$GEN" ops 127.0.0.1 "$port" "$2" "$SECS" "$OPS_PROCS" || echo "ops=nan")
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

run_rdzv() {  # server clients rep
  local port out
  if [[ $1 == ours ]]; then port=$port_ours; else port=$port_torch; fi
  out=$(timeout 300 "$GEN" rdzv 127.0.0.1 "$port" "$2" "r$2x$3" "$RDZV_PROCS" || echo "rdzv_ms=nan")
  add "$1.rdzv.$2" "$(field rdzv_ms "$out")"
  add "$1.conn.$2" "$(field connect_ms "$out")"
}

for rep in $(seq "$REPS"); do
  for n in 1 64 1024; do
    for s in ours torch; do run_ops $s $n; done
  done
  for n in 1024 4096; do
    for s in ours torch; do run_rdzv $s $n "$rep"; done
  done
done

ratio() {  # a b higher_is_better
  awk -v a="$1" -v b="$2" -v h="$3" 'BEGIN {
    if (a == "nan" || b == "nan" || a == 0 || b == 0) { print "n/a"; exit }
    printf "%.1fx", h ? a / b : b / a }'
}

echo "store: ours (ddpstore serve) vs PyTorch 1.13 TCPStore server, same 1.x-dialect load generator"
echo "machine: $NCPU CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); median of $REPS runs;" \
     "closed loop ${SECS}s per run (first 20% warm-up), $OPS_PROCS generator process(es);" \
     "rendezvous with $RDZV_PROCS generator process(es)"
printf '%-30s %-28s %-28s %-7s %s\n' "" "ours" "pytorch 1.13" "ratio" "target"
for n in 1 64 1024; do
  o=$(med ours.ops.$n) t=$(med torch.ops.$n)
  target=""; [[ $n == 64 ]] && target=">= 3x"
  printf '%-30s %-28s %-28s %-7s %s\n' "ops/s, $n conn(s)" \
    "$o (p50 $(med ours.p50.$n)us p99 $(med ours.p99.$n)us)" \
    "$t (p50 $(med torch.p50.$n)us p99 $(med torch.p99.$n)us)" \
    "$(ratio "$o" "$t" 1)" "$target"
done
for n in 64 1024; do
  o=$(med ours.cpu.$n) t=$(med torch.cpu.$n)
  printf '%-30s %-28s %-28s %-7s\n' "server CPU us/op, $n conns" "$o" "$t" "$(ratio "$o" "$t" 0)"
done
for n in 1024 4096; do
  o=$(med ours.rdzv.$n) t=$(med torch.rdzv.$n)
  printf '%-30s %-28s %-28s %-7s %s\n' "rendezvous, $n clients" "$o ms" "$t ms" \
    "$(ratio "$o" "$t" 0)" ">= 5x"
  printf '%-30s %-28s %-28s\n' "  of which all connected" \
    "$(med ours.conn.$n) ms" "$(med torch.conn.$n) ms"
done
echo "(all connected: every client's TCP handshake is done; a server cannot make it"
echo " shorter, only longer (a full listen backlog makes clients retry their SYNs);"
echo " the rest is the server's work: accept, ADD, WAIT and the replies)"
