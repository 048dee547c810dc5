#!/usr/bin/env bash
# A throwaway Slurm cluster on this machine, made of Debian's slurm-wlm and munge:
# one slurmctld (host "ctl") and three slurmd nodes (n1 n2 n3), each in its own
# network namespace with a veth to a bridge in a hub namespace, each in its own
# UTS namespace (its host name is its node name) and mount namespace (a private
# /etc/hosts bound over the real one). Nothing outside DIR and the namespaces
# created here is changed: not the machine's host name, /etc/hosts or mounts.
#
#   tests/slurm/cluster.sh up DIR          start it; waits until sinfo shows 3 idle nodes
#   tests/slurm/cluster.sh run DIR HOST CMD...   run CMD as on HOST (ctl, n1..n3),
#                                          with SLURM_CONF set (clients: use ctl)
#   tests/slurm/cluster.sh kill DIR HOST   SIGKILL every process of HOST's namespace
#   tests/slurm/cluster.sh down DIR        stop everything, remove namespaces and DIR
#
# DIR must not exist before `up` (it is created); `up` tears down what it made when
# it fails. Needs root (ip netns, unshare). Exit 0, or 1 with the reason on stderr.
set -euo pipefail

HOSTS=(ctl n1 n2 n3)
UP_TIMEOUT=${SLURM_UP_TIMEOUT:-60}

die() { echo "cluster.sh: $*" >&2; exit 1; }

ns_of() { echo "$(cat "$D/tag")$1"; }   # netns name of a host

# Run "$@" in HOST's network, UTS and mount namespaces. The mount namespace is
# new and private each time (unshare -m), so the /etc/hosts bind stays inside.
# With EXEC=exec the caller (a background subshell) becomes the daemon, whose PID
# is then $!: ip netns exec, unshare, env and sh all exec.
enter() {
  local h=$1; shift
  ${EXEC:-} ip netns exec "$(ns_of "$h")" unshare -um --propagation private \
    env SLURM_CONF="$D/slurm.conf" DDP_CL_HOST="$h" DDP_CL_HOSTS="$D/hosts" \
    sh -c 'mount --bind "$DDP_CL_HOSTS" /etc/hosts && hostname "$DDP_CL_HOST" &&
           exec "$@"' sh "$@"
}

write_conf() {
  local net=$1
  {
    echo "127.0.0.1 localhost"
    echo "$net.1 ctl"
    for i in 1 2 3; do echo "$net.$((10 + i)) n$i"; done
  } >"$D/hosts"
  cat >"$D/slurm.conf" <<EOF
ClusterName=ddptest
SlurmctldHost=ctl($net.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$D/ctld-state
SlurmctldPidFile=$D/slurmctld.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdSpoolDir=$D/spool-%n
SlurmdPidFile=$D/slurmd-%n.pid
SlurmdLogFile=$D/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$D/jobcomp.txt
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
KillWait=10
SlurmdTimeout=30
MinJobAge=600
# A job that loses a node ends (NODE_FAIL) instead of going back to the queue.
JobRequeue=0
InactiveLimit=0
NodeName=n1 NodeAddr=$net.11 CPUs=4 State=UNKNOWN
NodeName=n2 NodeAddr=$net.12 CPUs=4 State=UNKNOWN
NodeName=n3 NodeAddr=$net.13 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP
EOF
  # Without IgnoreSystemd slurmd stops: "No filesystem mounted on /sys/fs/cgroup".
  printf 'CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n' >"$D/cgroup.conf"
}

net_up() {
  local tag net hub i h
  tag=$(cat "$D/tag"); net=$(cat "$D/net"); hub="${tag}hub"
  ip netns add "$hub"
  echo "$hub" >>"$D/netns"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  i=0
  for h in "${HOSTS[@]}"; do
    local ns="$tag$h" addr
    ip netns add "$ns"
    echo "$ns" >>"$D/netns"
    [[ $h == ctl ]] && addr="$net.1" || addr="$net.$((10 + ${h#n}))"
    ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$hub"
    ip -n "$hub" link set "p$i" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    i=$((i + 1))
  done
}

munge_up() {
  mkdir -m 0700 "$D/munge"
  dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
  chmod 0600 "$D/munge/munge.key"
  munged --socket="$D/munge/munge.sock" --key-file="$D/munge/munge.key" \
    --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" \
    --seed-file="$D/munge/munged.seed" --force
  local t=0
  until [[ -S $D/munge/munge.sock && -s $D/munge/munged.pid ]]; do
    ((t++ < 50)) || die "munged did not start: $(tail -3 "$D/munge/munged.log" 2>/dev/null)"
    sleep 0.1
  done
  cat "$D/munge/munged.pid" >>"$D/pids"
}

daemons_up() {
  mkdir -p "$D/ctld-state"
  EXEC=exec enter ctl slurmctld -D -i </dev/null >"$D/ctl.out" 2>&1 &
  echo $! >>"$D/pids"
  local h
  for h in n1 n2 n3; do
    mkdir -p "$D/spool-$h"
    EXEC=exec enter "$h" slurmd -D -N "$h" </dev/null >"$D/$h.out" 2>&1 &
    echo $! >>"$D/pids"
  done
}

wait_idle() {
  local t0=$SECONDS out=""
  while ((SECONDS - t0 < UP_TIMEOUT)); do
    out=$(enter ctl sinfo -h -N -o '%N %t' 2>/dev/null || true)
    if [[ $(grep -c ' idle$' <<<"$out") -eq 3 ]]; then
      return 0
    fi
    sleep 0.5
  done
  die "nodes not idle after ${UP_TIMEOUT}s: sinfo says: ${out:-nothing};" \
      "slurmctld: $(tail -3 "$D/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
}

up() {
  [[ $(id -u) -eq 0 ]] || die "needs root (ip netns, unshare)"
  for c in slurmctld slurmd munged sinfo ip unshare; do
    command -v "$c" >/dev/null || die "$c not found (.ci/deps.sh test installs slurm-wlm munge)"
  done
  [[ ! -e $D ]] || die "$D exists"
  mkdir -p "$D"
  D=$(cd "$D" && pwd)
  printf 'dsl%04d%03d' $(($$ % 10000)) $((RANDOM % 1000)) >"$D/tag"
  echo "10.$((RANDOM % 150 + 100)).$((RANDOM % 250 + 1))" >"$D/net"
  : >"$D/pids"; : >"$D/netns"
  ok=0
  trap '((ok)) || { echo "cluster.sh: up failed; tearing down $D" >&2; down; }' EXIT
  write_conf "$(cat "$D/net")"
  net_up
  munge_up
  daemons_up
  wait_idle
  ok=1
}

# Everything by what this script recorded: its PIDs, then every process left in
# its namespaces (job steps), then the namespaces, then DIR. Safe to repeat.
down() {
  set +e
  local p ns t
  if [[ -f $D/pids ]]; then
    while read -r p; do kill -TERM "$p" 2>/dev/null; done <"$D/pids"
    for t in $(seq 50); do
      local alive=0
      while read -r p; do kill -0 "$p" 2>/dev/null && alive=1; done <"$D/pids"
      ((alive)) || break
      sleep 0.1
    done
    while read -r p; do kill -KILL "$p" 2>/dev/null; done <"$D/pids"
  fi
  if [[ -f $D/netns ]]; then
    while read -r ns; do
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    done <"$D/netns"
    for t in $(seq 50); do
      local left=""
      while read -r ns; do left+=$(ip netns pids "$ns" 2>/dev/null); done <"$D/netns"
      [[ -z $left ]] && break
      sleep 0.1
    done
    while read -r ns; do ip netns del "$ns" 2>/dev/null; done <"$D/netns"
  fi
  rm -rf "$D"
  return 0
}

cmd=${1:-}; D=${2:-}
[[ -n $cmd && -n $D ]] || die "usage: cluster.sh up|down|run|kill DIR [HOST CMD...]"
case $cmd in
  up) up ;;
  down) [[ -d $D ]] && down ;;
  run)
    h=${3:-}; shift 3 || die "usage: cluster.sh run DIR HOST CMD..."
    D=$(cd "$D" && pwd)
    enter "$h" "$@" ;;
  kill)
    h=${3:-}
    for p in $(ip netns pids "$(ns_of "$h")"); do kill -KILL "$p" 2>/dev/null || true; done ;;
  *) die "unknown command '$cmd' (up, down, run, kill)" ;;
esac
