#!/usr/bin/env bash
# The one-GPU check of libddp's NCCL backend (issue 5). Run it on a machine with
# a GPU; CI never needs one. Under 5 minutes: builds with CUDA=1 into build-gpu/,
# runs the NCCL backend at world size 1 (collectives, gradient buckets, device
# binding, print control), the gradient path's buckets against one flat
# all_reduce (overhead in percent), the CUDA example alone and under ddprun, a
# PyTorch script on NCCL under ddprun (where python3 has a CUDA torch), more
# ranks than GPUs (NCCL refuses two ranks on one GPU: a clear error, no hang),
# a stuck stream (libddp's watchdog, and ddprun --hang-timeout), memory errors
# on the GPU (compute-sanitizer, where installed), and the cpu-backend unit
# tests of the CUDA build, then prints one table. Exit 0 only if every row
# passed.
#   tests/gpu/run.sh [-j JOBS] [--prebuilt]
# --prebuilt: the GPU machine has no build dependencies (libuv, cJSON headers):
# build there with tests/gpu/pack.sh, bring build-gpu/ along, and run with this.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

jobs=$(nproc 2>/dev/null || echo 4)
prebuilt=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -j) jobs=${2:?-j needs a number}; shift 2 ;;
    --prebuilt) prebuilt=1; shift ;;
    *) echo "tests/gpu/run.sh: unknown argument '$1' (-j JOBS, --prebuilt)" >&2; exit 2 ;;
  esac
done
B=build-gpu
log=$B/gpu-check.log
rows=()
fails=0

row() { # name status detail
  rows+=("$(printf '%-40s %-5s %s' "$1" "$2" "$3")")
  [[ $2 == FAIL ]] && fails=$((fails + 1)) # SKIP says why a row did not run
  return 0
}

mkdir -p "$B"
: > "$log"
start=$(date +%s)

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >>"$log" 2>&1; then
  echo "tests/gpu/run.sh: no GPU visible (nvidia-smi -L failed); see $log" >&2
  exit 1
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)

# 1. Build with CUDA and NCCL (or take pack.sh's build and the libraries it
#    packed: libuv, cJSON, liburing, cmocka; NCCL, too big to carry, from the
#    toolkit or from PyTorch's wheel, nvidia-nccl).
if [[ $prebuilt -eq 1 ]]; then
  [[ -d $B/lib/dep ]] && export LD_LIBRARY_PATH=$PWD/$B/lib/dep${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for lib in nccl cudart; do
    ldd "$B/tests/progs/ddp_gpu_check" 2>/dev/null | grep -q "lib$lib.so.* => not found" || continue
    dir=$(python3 -c "import nvidia, glob, os; print(*[os.path.dirname(p) for d in nvidia.__path__
      for p in glob.glob(os.path.join(d, '*', 'lib', 'lib$lib.so*'))][:1])" 2>/dev/null)
    [[ -n $dir ]] && export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  done
  if missing=$(ldd "$B/tests/progs/ddp_gpu_check" "$B/bin/ddprun" 2>&1 | grep 'not found'); then
    row "prebuilt $B (tests/gpu/pack.sh)" FAIL "$(echo $missing)"
    printf '%s\n' "${rows[@]}"
    exit 1
  fi
  row "prebuilt $B (tests/gpu/pack.sh)" PASS "$gpu"
  # For what runs after this script (a benchmark of the same build).
  echo "export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >"$B/gpu-check.env"
  ldd "$B/tests/progs/ddp_gpu_check" >>"$log" 2>&1
elif make -j"$jobs" B="$B" CUDA=1 check-build >>"$log" 2>&1; then
  row "build CUDA=1" PASS "$gpu"
else
  row "build CUDA=1" FAIL "see $log"
  printf '%s\n' "${rows[@]}"
  exit 1
fi

check_timeout=120
run_check() { # name expected-rc command...
  local name=$1 want=$2 out rc
  shift 2
  out=$(timeout -k 5 "$check_timeout" "$@" 2>&1)
  rc=$?
  printf '\n$ %s\n%s\n' "$*" "$out" >>"$log"
  if [[ $rc -eq $want ]]; then row "$name" PASS "rc=$rc"; else row "$name" FAIL "rc=$rc (want $want)"; fi
  last_out=$out
}

# One rank without a launcher: DDP_STORE=0, as there is no store behind the
# address (ddp_init would wait for one, saying so, until DDP_TIMEOUT).
one_rank=(env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
          MASTER_PORT=29533 TORCHELASTIC_RUN_ID=gpu-check DDP_STORE=0)

# 2. NCCL backend, world size 1: every CHECK line of the program is a row.
check_rows() { # the CHECK and INFO lines of the last output, a row each
  local tag name status why
  while IFS='|' read -r tag name status why; do
    [[ $tag == INFO ]] && { row "  versions" PASS "$name: $status"; continue; }
    [[ $tag == CHECK ]] || continue
    if [[ $status == ok ]]; then row "  $name" PASS ""; else row "  $name" FAIL "$why"; fi
  done <<<"$last_out"
}
run_check "nccl checks (world size 1)" 0 "${one_rank[@]}" "$B/tests/progs/ddp_gpu_check"
check_rows
# The GPUs this process may use (CUDA_VISIBLE_DEVICES honoured), else nvidia-smi's.
ngpu=$(sed -n 's/^GPUS|//p' <<<"$last_out")
[[ $ngpu =~ ^[1-9][0-9]*$ ]] || ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')

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

# 6. The gradient path on NCCL: DDP buckets, and one flat ddp_all_reduce,
#    against one bare ncclAllReduce of the same bytes; and a small
#    all_reduce's latency, libddp against the bare call
#    (tests/progs/ddp_gpu_grads.c). Reported, not asserted (goal: buckets
#    under 5% over the bare call).
run_check "grads: buckets vs one flat all_reduce" 0 "${one_rank[@]}" \
  "$B/tests/progs/ddp_gpu_grads" 50
grads=$(grep '^grads-nccl ' <<<"$last_out")
lat=$(grep '^lat-nccl ' <<<"$last_out")
if [[ -n $grads && -n $lat ]]; then
  row "  over bare NCCL (goal: buckets < 5%)" PASS "${grads#grads-nccl }"
  row "  4 KiB all_reduce latency" PASS "${lat#lat-nccl }"
else
  row "  over bare NCCL (goal: buckets < 5%)" FAIL "no figures; see $log"
fi

# 7. Through the launcher: ddprun gives each worker its GPU (LOCAL_RANK) and
#    the store; the CUDA example on every GPU of the machine.
ddprun=("$B/bin/ddprun" --nproc-per-node="$ngpu")
run_check "ddprun: train_cuda on $ngpu GPU(s)" 0 "${ddprun[@]}" "$B/bin/train_cuda" --steps 100
grep -q '^checksum ' <<<"$last_out" || row "  checksum printed" FAIL "see $log"

# 8. A torchrun script on NCCL under ddprun, with this machine's PyTorch (an
#    upstream wheel: its store client, libuv build and NCCL), where it has one
#    that sees a GPU.
if tv=$(python3 -c 'import torch; assert torch.cuda.is_available(); print(torch.__version__)' 2>/dev/null); then
  run_check "ddprun: torch $tv nccl, DDP" 0 "${ddprun[@]}" python3 tests/gpu/torch_nccl.py
  if l=$(grep -m1 '^torch-nccl ok' <<<"$last_out"); then
    row "  collectives exact, DDP agrees" PASS "${l#torch-nccl ok }"
  else
    row "  collectives exact, DDP agrees" FAIL "see $log"
  fi
else
  row "ddprun: torch nccl" SKIP "python3 has no CUDA PyTorch here"
fi

# 9. More ranks than GPUs: two ranks bind the same GPU, which NCCL refuses.
#    The job must fail at once with NCCL's reason, on every rank, not hang.
run_check "ddprun: $((ngpu + 1)) ranks on $ngpu GPU(s) -> error" 1 env DDP_BACKEND=nccl \
  "$B/bin/ddprun" --nproc-per-node=$((ngpu + 1)) "$B/tests/progs/ddp_coll" check
# Each of the two ranks on the shared GPU says so (and the report quotes one).
why=$(grep -m1 'Duplicate GPU detected' <<<"$last_out")
if [[ $(grep -c 'Duplicate GPU detected' <<<"$last_out") -ge 2 ]]; then
  row "  NCCL's reason, from both ranks" PASS "${why:0:110}"
else
  row "  NCCL's reason, from both ranks" FAIL "see $log"
fi

# 10. A stuck GPU: the program's own work never ends and a collective waits
#     behind it. libddp's watchdog ends the wait at DDP_TIMEOUT and aborts
#     the communicator; under ddprun --hang-timeout the launcher finds the
#     rank stuck in its all_reduce first, behind its own GPU work (libddp
#     says so in its progress slot), blames no peer, and ends the job (124).
check_timeout=45
for mode in stuck stuck-buckets; do
  run_check "$mode: watchdog (DDP_TIMEOUT=3)" 0 env DDP_TIMEOUT=3 "${one_rank[@]}" \
    "$B/tests/progs/ddp_gpu_check" "$mode"
  check_rows
  l=$(grep -m1 '^stuck: ' <<<"$last_out") || true
  [[ -n $l ]] && row "  what it said" PASS "${l:7:110}" || row "  what it said" FAIL "see $log"
  run_check "$mode: ddprun --hang-timeout 3" 124 env DDP_TIMEOUT=120 \
    "$B/bin/ddprun" --nproc-per-node=1 --hang-timeout 3 "$B/tests/progs/ddp_gpu_check" "$mode"
  l=$(grep -m1 -E 'collective: all_reduce( \(bucket\))? #[0-9]+ \(its own GPU work' <<<"$last_out")
  [[ -n $l ]] && row "  the dump: behind its own GPU work" PASS "${l:0:110}" ||
    row "  the dump: behind its own GPU work" FAIL "see $log"
  l=$(grep -m1 'never started on its GPU' <<<"$last_out")
  [[ -n $l ]] && row "  the verdict blames no peer" PASS "${l:2:110}" ||
    row "  the verdict blames no peer" FAIL "see $log"
done
check_timeout=120

# 11. Memory errors on the GPU in libddp's NCCL path (staging, buckets,
#     scratch) and in the example's kernels, where compute-sanitizer runs.
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -n $cs ]]; then
  # NCCL probes for kernels its build lacks (cudaFuncGetAttributes fails, on
  # purpose): API errors are not what this looks for.
  sanitize=("$cs" --tool memcheck --report-api-errors no --error-exitcode 9)
  run_check "compute-sanitizer: nccl checks" 0 "${one_rank[@]}" "${sanitize[@]}" \
    "$B/tests/progs/ddp_gpu_check"
  run_check "compute-sanitizer: train_cuda" 0 "${one_rank[@]}" "${sanitize[@]}" \
    "$B/bin/train_cuda" --steps 20
else
  row "compute-sanitizer" SKIP "not installed here"
fi

# 12. The cpu backend of the CUDA build (auto picks nccl here, so force cpu).
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
