#!/usr/bin/env bash
# The one-GPU check of libddp's NCCL backend (issue 5). Run it on a machine with
# a GPU; CI never needs one. Under 5 minutes: builds with CUDA=1 into build-gpu/,
# runs the NCCL backend at world size 1 (collectives, gradient buckets, device
# binding, print control), the gradient path's buckets against one flat
# all_reduce (overhead in percent), the CUDA example, and the cpu-backend unit tests of
# the CUDA build, then prints one table. Exit 0 only if every row passed.
#   tests/gpu/run.sh [-j JOBS]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

jobs=$(nproc 2>/dev/null || echo 4)
if [[ ${1:-} == -j && -n ${2:-} ]]; then jobs=$2; fi
B=build-gpu
log=$B/gpu-check.log
rows=()
fails=0

row() { # name status detail
  rows+=("$(printf '%-40s %-5s %s' "$1" "$2" "$3")")
  [[ $2 == PASS ]] || fails=$((fails + 1))
}

mkdir -p "$B"
: > "$log"
start=$(date +%s)

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >>"$log" 2>&1; then
  echo "tests/gpu/run.sh: no GPU visible (nvidia-smi -L failed); see $log" >&2
  exit 1
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)

# 1. Build with CUDA and NCCL.
if make -j"$jobs" B="$B" CUDA=1 check-build >>"$log" 2>&1; then
  row "build CUDA=1" PASS "$gpu"
else
  row "build CUDA=1" FAIL "see $log"
  printf '%s\n' "${rows[@]}"
  exit 1
fi

run_check() { # name expected-rc command...
  local name=$1 want=$2 out rc
  shift 2
  out=$(timeout -k 5 120 "$@" 2>&1)
  rc=$?
  printf '\n$ %s\n%s\n' "$*" "$out" >>"$log"
  if [[ $rc -eq $want ]]; then row "$name" PASS "rc=$rc"; else row "$name" FAIL "rc=$rc (want $want)"; fi
  last_out=$out
}

one_rank=(env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
          MASTER_PORT=29533 TORCHELASTIC_RUN_ID=gpu-check)

# 2. NCCL backend, world size 1: every CHECK line of the program is a row.
run_check "nccl checks (world size 1)" 0 "${one_rank[@]}" "$B/tests/progs/ddp_gpu_check"
while IFS='|' read -r tag name status why; do
  [[ $tag == CHECK ]] || continue
  if [[ $status == ok ]]; then row "  $name" PASS ""; else row "  $name" FAIL "$why"; fi
done <<<"$last_out"

# 3. Print control: with DDP_PRINT_RANKS=none plain stdout disappears, the
#    forced line stays.
run_check "print control (DDP_PRINT_RANKS=none)" 0 env DDP_PRINT_RANKS=none "${one_rank[@]}" \
  "$B/tests/progs/ddp_gpu_check"
if grep -q '^\[rank0\] forced line$' <<<"$last_out" && ! grep -q '^stdout from rank 0' <<<"$last_out"; then
  row "  quiet stdout, forced line shown" PASS ""
else
  row "  quiet stdout, forced line shown" FAIL "see $log"
fi

# 4. Device binding honours CUDA_VISIBLE_DEVICES (an empty list hides the GPU:
#    nccl is then a clear error, auto falls back to cpu).
run_check "nccl with no visible GPU -> error" 1 env CUDA_VISIBLE_DEVICES= DDP_BACKEND=nccl \
  "${one_rank[@]}" "$B/tests/progs/ddp_coll" check
grep -q 'no GPU is visible' <<<"$last_out" || row "  message names the cause" FAIL "see $log"
run_check "auto with no visible GPU -> cpu" 0 env CUDA_VISIBLE_DEVICES= "${one_rank[@]}" \
  "$B/tests/progs/ddp_coll" check

# 5. The CUDA example: runs, loss goes down, checksum printed.
run_check "examples/train_cuda (world size 1)" 0 "${one_rank[@]}" "$B/bin/train_cuda" --steps 200
first=$(sed -n 's/^epoch 1: loss \([0-9.]*\).*/\1/p' <<<"$last_out")
lastl=$(sed -n 's/^epoch [0-9]*: loss \([0-9.]*\).*/\1/p' <<<"$last_out" | tail -n 1)
sum=$(sed -n 's/^checksum //p' <<<"$last_out")
if [[ -n $first && -n $lastl && -n $sum ]] && awk -v a="$first" -v b="$lastl" 'BEGIN{exit !(b < a)}'; then
  row "  loss decreases, checksum" PASS "loss $first -> $lastl, checksum $sum"
else
  row "  loss decreases, checksum" FAIL "see $log"
fi

# 6. The gradient path on NCCL: DDP buckets vs one flat ncclAllReduce of the
#    same bytes (tests/progs/ddp_gpu_grads.c); the overhead is reported, not
#    asserted (goal: under 5%).
run_check "grads: buckets vs one flat all_reduce" 0 "${one_rank[@]}" \
  "$B/tests/progs/ddp_gpu_grads" 20
grads=$(grep '^grads-nccl ' <<<"$last_out")
if [[ -n $grads ]]; then
  row "  overhead of buckets (goal < 5%)" PASS "${grads#grads-nccl }"
else
  row "  overhead of buckets (goal < 5%)" FAIL "no figures; see $log"
fi

# 7. The cpu backend of the CUDA build (auto picks nccl here, so force cpu).
run_check "cpu backend in the CUDA build" 0 env DDP_BACKEND=cpu \
  "$B/tests/progs/ddp_coll" --spawn 2 check
if B=$B timeout -k 5 180 tests/run.sh unit >>"$log" 2>&1; then
  row "unit tests (CUDA build)" PASS ""
else
  row "unit tests (CUDA build)" FAIL "see $log"
fi

printf '\n%-40s %-5s %s\n' "CHECK" "RESULT" "DETAIL"
printf '%s\n' "${rows[@]}"
printf '\n%d failed, %ss, log: %s\n' "$fails" "$(( $(date +%s) - start ))" "$log"
[[ $fails -eq 0 ]]
