#!/usr/bin/env bash
# The test runner: unit (cmocka binaries), e2e, compat and slurm (pytest on /usr/bin/python3).
#   tests/run.sh all|unit|e2e|compat|slurm [pytest args...]
#   TEST_JOBS=N: N tests at a time (default: the cores it may use, twice that for
#   e2e and slurm; at most 4)
# slurm (a real cluster, tests/slurm/README) is part of all where this machine can
# make one; otherwise all says why it left it out.
# Each unit binary runs alone under a timeout. Ends with one summary line and a
# non-zero status if anything failed. compat runs against every PyTorch present
# (host, and the roots tests/compat/mkroot.sh made); the summary names them.
set -uo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}; shift || true
B=${B:-build}
PY=/usr/bin/python3
UNIT_TIMEOUT=${UNIT_TIMEOUT:-300}
declare -A pass fail took
failed_names=()

run_unit() {
  pass[unit]=0; fail[unit]=0; took[unit]=0
  local t t0=$SECONDS
  for t in "$B"/tests/unit/test_*; do
    [[ -x $t ]] || continue
    if timeout -k 5 "$UNIT_TIMEOUT" "$t"; then
      pass[unit]=$((pass[unit] + 1))
    else
      fail[unit]=$((fail[unit] + 1)); failed_names+=("unit:$(basename "$t")")
    fi
  done
  took[unit]=$((SECONDS - t0))
}

run_pytest() {  # suite dir
  local suite=$1; shift
  local t0=$SECONDS
  pass[$suite]=0; fail[$suite]=0; took[$suite]=0
  local files=(tests/"$suite"/test_*.py)
  [[ -e ${files[0]} ]] || return 0
  local junit="$B/tests/$suite-junit.xml"
  mkdir -p "$B/tests"
  rm -f "$junit" "$B/tests/$suite-versions"  # tests/compat/conftest.py writes the latter
  DDP_BUILD="$PWD/$B" "$PY" -m pytest -q -p no:cacheprovider --junitxml="$junit" \
    "tests/$suite" "$@"
  local rc=$?
  took[$suite]=$((SECONDS - t0))
  # Counts from the junit report; a crash before it is written counts as a failure.
  if [[ -s $junit ]]; then
    read -r n f e s < <("$PY" - "$junit" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
ts = r if r.tag == "testsuite" else r.find("testsuite")
print(ts.get("tests"), ts.get("failures"), ts.get("errors"), ts.get("skipped"))
PYEOF
)
    pass[$suite]=$((n - f - e - s)); fail[$suite]=$((f + e))
    skip[$suite]=$s
  fi
  if [[ $rc -ne 0 && ${fail[$suite]} -eq 0 ]]; then
    fail[$suite]=1; failed_names+=("$suite:pytest-exit-$rc")
  elif [[ ${fail[$suite]} -gt 0 ]]; then
    failed_names+=("$suite:${fail[$suite]}-failed")
  fi
}

# Why tests/slurm/cluster.sh cannot run here, or nothing.
slurm_why_not() {
  [[ $(id -u) -eq 0 ]] || { echo "not root"; return; }
  local c
  for c in slurmctld slurmd munged sbatch ip unshare; do
    command -v "$c" >/dev/null || { echo "$c not installed (.ci/deps.sh test)"; return; }
  done
  local ns="ddpslprobe$$"
  ip netns add "$ns" 2>/dev/null || { echo "cannot create a network namespace"; return; }
  ip netns del "$ns"
}

run_slurm_if_possible() {
  local why
  why=$(slurm_why_not)
  if [[ -n $why ]]; then
    echo "run.sh: slurm suite skipped: $why"
    return 0
  fi
  run_pytest slurm "${slurm_par[@]}" "$@"
}

# Each suite runs on pytest-xdist workers, TEST_JOBS of them (default: the
# cores this run may use, tests/cores.sh; twice that for e2e and slurm; at
# most 4). e2e and slurm mostly wait (timeouts, heartbeats, sleeping ranks):
# two at once on two cores kept them 18% busy, four did the e2e suite in 56%
# of the time. compat is CPU-bound (every rank imports torch): one a core.
# TEST_JOBS=1, or no xdist
# (.ci/deps.sh test installs it), runs them one at a time, as -s or --pdb do.
# A module marked xdist_group stays whole on one worker (--dist loadgroup): its
# module-scoped fixture runs once (make install, a training run, a server).
# slurm's modules all do (--dist loadfile): each brings up its own cluster
# (own namespaces, addresses and munge), once.
if [[ -n ${TEST_JOBS:-} ]]; then
  [[ $TEST_JOBS =~ ^[0-9]+$ ]] ||
    { echo "run.sh: TEST_JOBS must be a number, not '$TEST_JOBS'" >&2; exit 2; }
  jobs=$((10#$TEST_JOBS)) wait_jobs=$((10#$TEST_JOBS))
else
  cores=$(tests/cores.sh)
  [[ $cores =~ ^[0-9]+$ ]] || { echo "run.sh: tests/cores.sh said '$cores'" >&2; exit 2; }
  jobs=$cores wait_jobs=$((cores * 2))
fi
((jobs > 4)) && jobs=4
((wait_jobs > 4)) && wait_jobs=4
# pytest arguments that need the tests in this process (output shown, a
# debugger), or that turn xdist off: one at a time, not an error. -s may be
# among other short flags (-vs, -xs) before one that takes a value (-k...).
prev= serial=
for arg in "$@"; do
  case $arg in
    --capture=no | --pdb | --trace | -pno:xdist) serial=1 ;;
    no) [[ $prev == --capture ]] && serial=1 ;;
    no:xdist) [[ $prev == -p ]] && serial=1 ;;
    -[!-]*)
      flags=${arg#-}
      flags=${flags%%[kmprcoWn]*}
      [[ $flags == *s* ]] && serial=1
      ;;
  esac
  prev=$arg
done
[[ -n $serial ]] && jobs=1 wait_jobs=1
par=() wait_par=() slurm_par=()
if ((wait_jobs > 1)) && "$PY" -c 'import xdist' 2>/dev/null; then
  ((jobs > 1)) && par=(-n "$jobs" --dist loadgroup)
  wait_par=(-n "$wait_jobs" --dist loadgroup)
  slurm_par=(-n "$wait_jobs" --dist loadfile)
fi

declare -A skip
case $what in
  unit) run_unit ;;
  e2e) run_pytest e2e "${wait_par[@]}" "$@" ;;
  compat) run_pytest compat "${par[@]}" "$@" ;;
  slurm) run_pytest slurm "${slurm_par[@]}" "$@" ;;
  all) run_unit; run_pytest e2e "${wait_par[@]}" "$@"; run_pytest compat "${par[@]}" "$@"
       run_slurm_if_possible "$@" ;;
  *) echo "run.sh: unknown suite '$what' (all, unit, e2e, compat, slurm)" >&2; exit 2 ;;
esac

total_fail=0; summary=""
for s in unit e2e compat slurm; do
  [[ -n ${pass[$s]+x} ]] || continue
  label=$s
  if [[ -s $B/tests/$s-versions ]]; then label+=" (torch $(<"$B/tests/$s-versions"))"; fi
  summary+=" $label ${pass[$s]} passed, ${fail[$s]} failed${skip[$s]:+, ${skip[$s]} skipped}"
  summary+=" ($((took[$s] / 60))m$((took[$s] % 60))s);"
  total_fail=$((total_fail + fail[$s]))
done
if [[ $total_fail -eq 0 ]]; then
  echo "TEST SUMMARY: PASS:${summary%;}"
else
  echo "TEST SUMMARY: FAIL:${summary%;} — failed: ${failed_names[*]}"
  exit 1
fi
