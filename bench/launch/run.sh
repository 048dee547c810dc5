#!/usr/bin/env bash
# bench/launch: how fast and how small a launcher is, side by side in one run.
#   launch:    `L -np N /bin/true` for N = 1, 4, 16: median wall time, peak RSS
#   fail-fast: 4 workers, local rank 0 exits 1 at once, ranks 1-3 `sleep 1000`:
#              wall time until the launcher returns
# Launchers: ddprun; torchrun (Debian 1.13, through torchrun_fixed.py, which
# fixes its -r/-t parsing on Python 3.11: plain torchrun crashes there);
# Open MPI mpirun; and the floor (a C program that posix_spawns N /bin/true
# and waits); and torchrun 2.x (the torchrun of a Debian root with PyTorch
# 2.x, $TORCH2_ROOT, run by bench/torch2/in-root; only as root, and only when
# that root exists: bench/torch2/probe.sh). The
# floor, ddprun and mpirun run in turns. Environment: REPS (launch runs of
# each; 21), MPI_REPS (fail-fast runs; 7), TORCH_REPS (3), NS ("1 4 16"),
# B (build dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
REPS=${REPS:-21}
MPI_REPS=${MPI_REPS:-7}
TORCH_REPS=${TORCH_REPS:-3}
NS=${NS:-1 4 16}
PY=/usr/bin/python3
M=$B/bench/launch/measure
FLOOR=$B/bench/launch/floor
DDPRUN=$B/bin/ddprun
for f in "$M" "$FLOOR" "$DDPRUN"; do
  [[ -x $f ]] || { echo "bench/launch: $f is not built (make bench)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp # torchrun leaves a log directory per run: keep them here

have_torch=0
$PY -c 'import torch.distributed.run' 2>/dev/null && have_torch=1
source bench/torch2/probe.sh
TORCHRUN2=(bench/torch2/in-root torchrun)
have_mpi=0
command -v mpirun >/dev/null && have_mpi=1
mpirun_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# measure REPS CMD... -> "ms rss_kib fails" (or "- - -" when unavailable)
meas() { timeout 900 "$M" "$@" || printf -- '- - -\n- - -\n- - -\n'; }
TORCHRUN=("$PY" bench/launch/torchrun_fixed.py --master_port "$port")

ratio() { # a / b, or "-"
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.1fx", a / b }'
}
mib() { awk -v k="$1" 'BEGIN { if (k == "-") print "-"; else printf "%.1f", k / 1024 }'; }

echo "bench/launch: launch latency and launcher memory (median of runs, peak RSS in MiB)"
echo "torchrun = Debian torch 1.13 run through bench/launch/torchrun_fixed.py (fixes -r/-t parsing on Python 3.11)"
if [[ $have_torch2 -eq 1 ]]; then
  echo "trun2 = torchrun of torch $torch2_ver in $TORCH2_ROOT (bench/torch2/in-root)"
else
  echo "trun2: skipped: $torch2_why"
fi
printf '\n%-4s %10s %10s %12s %10s %10s | %8s %10s %10s %10s | %6s %6s %8s %8s %6s\n' \
  N floor_ms ddprun_ms torchrun_ms trun2_ms mpirun_ms ddp/flr trun/ddp trun2/ddp mpi/ddp \
  flrMiB ddpMiB trunMiB trun2MiB mpiMiB
for n in $NS; do
  # The floor, ddprun and mpirun run in turns, so the machine's load hits
  # them alike (torchrun is too slow for that: it runs on its own).
  m_ms=- m_rss=-
  if [[ $have_mpi -eq 1 ]]; then
    { read -r f_ms f_rss _; read -r d_ms d_rss _; read -r m_ms m_rss _; } < <(
      meas "$REPS" "$FLOOR" "$n" /bin/true -- "$DDPRUN" --nproc-per-node "$n" /bin/true \
        -- mpirun "${mpirun_flags[@]}" -np "$n" /bin/true)
  else
    { read -r f_ms f_rss _; read -r d_ms d_rss _; } < <(
      meas "$REPS" "$FLOOR" "$n" /bin/true -- "$DDPRUN" --nproc-per-node "$n" /bin/true)
  fi
  t_ms=- t_rss=-
  if [[ $have_torch -eq 1 ]]; then
    read -r t_ms t_rss _ < <(meas "$TORCH_REPS" "${TORCHRUN[@]}" --nproc_per_node "$n" --no_python /bin/true)
  fi
  t2_ms=- t2_rss=-
  if [[ $have_torch2 -eq 1 ]]; then
    read -r t2_ms t2_rss _ < <(meas "$TORCH_REPS" "${TORCHRUN2[@]}" --nproc_per_node "$n" --no_python /bin/true)
  fi
  printf '%-4s %10s %10s %12s %10s %10s | %8s %10s %10s %10s | %6s %6s %8s %8s %6s\n' "$n" "$f_ms" \
    "$d_ms" "$t_ms" "$t2_ms" "$m_ms" "$(ratio "$d_ms" "$f_ms")" "$(ratio "$t_ms" "$d_ms")" \
    "$(ratio "$t2_ms" "$d_ms")" "$(ratio "$m_ms" "$d_ms")" \
    "$(mib "$f_rss")" "$(mib "$d_rss")" "$(mib "$t_rss")" "$(mib "$t2_rss")" "$(mib "$m_rss")"
done

fail='[ "${LOCAL_RANK:-$OMPI_COMM_WORLD_LOCAL_RANK}" = 0 ] && exit 1; exec sleep 1000'
m_ms=-
if [[ $have_mpi -eq 1 ]]; then
  { read -r d_ms _ _; read -r m_ms _ _; } < <(meas "$MPI_REPS" \
    "$DDPRUN" --nproc-per-node 4 sh -c "$fail" -- mpirun "${mpirun_flags[@]}" -np 4 sh -c "$fail")
else
  read -r d_ms _ _ < <(meas "$REPS" "$DDPRUN" --nproc-per-node 4 sh -c "$fail")
fi
t_ms=-
if [[ $have_torch -eq 1 ]]; then
  read -r t_ms _ _ < <(meas "$TORCH_REPS" "${TORCHRUN[@]}" --nproc_per_node 4 --no_python sh -c "$fail")
fi
t2_ms=-
if [[ $have_torch2 -eq 1 ]]; then
  read -r t2_ms _ _ < <(meas "$TORCH_REPS" "${TORCHRUN2[@]}" --nproc_per_node 4 --no_python sh -c "$fail")
fi
printf '\nfail-fast, 4 workers (rank 0 exits 1, three sleep): ddprun %s ms, torchrun %s ms, torchrun 2.x %s ms, mpirun %s ms\n' \
  "$d_ms" "$t_ms" "$t2_ms" "$m_ms"
printf 'fail-fast ratios: trun/ddp %s, trun2/ddp %s, mpi/ddp %s\n' \
  "$(ratio "$t_ms" "$d_ms")" "$(ratio "$t2_ms" "$d_ms")" "$(ratio "$m_ms" "$d_ms")"
echo "(torchrun 1.13 notices a failure only at its next poll: --monitor_interval defaults to 5 s there)"
echo "targets: ddprun >= 50x faster than torchrun, >= 5x faster than mpirun, <= 1.5x the floor, <= 5 MiB"
