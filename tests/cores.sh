#!/usr/bin/env bash
# tests/cores.sh: how many cores the tests may use: this process's affinity
# (nproc), or fewer under a cgroup CPU quota (a container's --cpus, a CI
# runner's limit), which nproc does not see. Prints one number; the default
# of tests/run.sh's TEST_JOBS.
set -u
n=$(nproc)

# "QUOTA PERIOD" of this process's cpu controller (cgroup v2, else v1);
# nothing where there is none.
quota() {
  local v2 v1 f d
  v2=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null)
  v1=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}cpu\(,[^:]*\)\{0,1\}://p' /proc/self/cgroup 2>/dev/null)
  for f in "/sys/fs/cgroup${v2%/}/cpu.max" /sys/fs/cgroup/cpu.max; do
    [[ -r $f ]] && { cat "$f"; return; }
  done
  for d in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
    for f in "$d${v1%/}" "$d"; do
      [[ -r $f/cpu.cfs_quota_us ]] || continue
      echo "$(<"$f/cpu.cfs_quota_us") $(<"$f/cpu.cfs_period_us")"
      return
    done
  done
}

read -r q p <<<"$(quota)"
# "max" (v2) or -1 (v1): no quota.
if [[ ${q:-} =~ ^[0-9]+$ && ${p:-} =~ ^[0-9]+$ ]] && ((q > 0 && p > 0)); then
  c=$(((q + p - 1) / p))
  ((c < n)) && n=$c
fi
echo "$n"
