#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A throw-away Slurm cluster on this one machine, for tests, CI and benches:
#
#   scripts/slurm-cluster.sh start DIR [NODES]   # munge + slurmctld + NODES slurmd (default 2)
#   scripts/slurm-cluster.sh stop DIR            # stops everything `start` started in DIR
#   scripts/slurm-cluster.sh env DIR             # prints the exports clients need
#   scripts/slurm-cluster.sh kill-node DIR nK    # SIGKILLs node nK's slurmd (a lost node)
#   scripts/slurm-cluster.sh start-node DIR nK   # starts nK's slurmd again (back to service)
#
# Every node is its own slurmd (`slurmd -N nK`) on 127.0.0.1 with its own port, spool, pid and
# log file, so Slurm sees NODES separate nodes of one CPU each (partition `debug`, all nodes).
# munged runs with its own key and socket under DIR, so it never meets a system munge. There is
# no slurmdbd: accounting_storage/none, finished jobs are logged by jobcomp/filetxt in
# DIR/jobcomp.log. Clients find the cluster through SLURM_CONF=DIR/slurm.conf (see `env`).
#
# Ports: SLURM_PORT_BASE (slurmctld on it, node K on base+K) or the first free block of 10 in
# 17100..17990. `start` exits non-zero (and stops what it started) when the nodes are not idle
# within 60 s; it prints the reason and the daemons' logs.
#
# GPUs without GPU hardware (to test the gres path): SLURM_CLUSTER_GPUS=N gives every node N
# `gpu` gres (GresTypes=gpu, Gres=gpu:N) whose devices in DIR/gres.conf (File=) are links
# DIR/gpu/nvidia0..N-1 to /dev/null, so Slurm allocates them like real GPUs and sets
# CUDA_VISIBLE_DEVICES for each task (a step's tasks see all of the job's GPUs on their node,
# one each with --gpu-bind=per_task:1). Nodes then have N CPUs, so N ranks fit on a node;
# SLURM_CLUSTER_CPUS=M sets the CPUs per node instead (default 1, or N with GPUs; at most this
# machine's cores, or slurmctld marks the nodes INVAL). Unset, the config is as above.
set -euo pipefail

usage() { echo "usage: $0 start|stop|env DIR [NODES] | kill-node|start-node DIR nK" >&2; exit 64; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
nodes=${3:-2}
gpus=${SLURM_CLUSTER_GPUS:-0}
cpus=${SLURM_CLUSTER_CPUS:-}

port_in_use() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

pick_port_base() {
  if [ -n "${SLURM_PORT_BASE:-}" ]; then echo "$SLURM_PORT_BASE"; return; fi
  local base k busy
  # Start at a block chosen by the directory, so clusters started at once rarely race.
  local first=$(( $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 90 ))
  for i in $(seq 0 89); do
    base=$(( 17100 + ((first + i) % 90) * 10 ))
    busy=0
    for k in $(seq 0 "$nodes"); do
      if port_in_use $((base + k)); then busy=1; break; fi
    done
    if [ $busy = 0 ]; then echo "$base"; return; fi
  done
  echo "slurm-cluster: no free port block in 17100..17990" >&2
  return 1
}

# Sends SIGTERM to the processes whose pids are in the files given, waits up to 3 s for them
# to go (a slurmd lingers on SIGTERM), then SIGKILLs what is left and removes the files.
stop_pidfiles() {
  local f pid pids=()
  for f in "$@"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  for _ in $(seq 1 30); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -f "$@"
}

# slurmstepd processes of this cluster (jobs still running when the cluster stops, or steps of
# a node whose slurmd was killed): their command line or working directory names DIR. Each
# one's tasks (its children, each leading its own process group) go with it.
stop_stepds() {
  local p c cwd cmdline
  for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
    cwd=$(readlink "/proc/$p/cwd" 2>/dev/null || true)
    cmdline=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null || true)
    case "$cwd $cmdline" in
      *"$dir"*)
        for c in $(pgrep -P "$p" 2>/dev/null || true); do
          kill -KILL -- "-$c" 2>/dev/null || kill -KILL "$c" 2>/dev/null || true
        done
        kill -KILL "$p" 2>/dev/null || true
        ;;
    esac
  done
}

do_stop() {
  [ -d "$dir" ] || return 0
  # scancel first, so job steps end through Slurm and no worker outlives the cluster.
  if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
    SLURM_CONF=$dir/slurm.conf timeout 5 scancel --user="$(id -un)" >/dev/null 2>&1 || true
  fi
  stop_pidfiles "$dir"/n[0-9]*.pid "$dir/slurmctld.pid"
  stop_stepds
  stop_pidfiles "$dir/munge/munged.pid"
}

write_conf() {
  local base=$1 host k names
  host=$(hostname -s)
  names=$(seq -s, -f 'n%g' 1 "$nodes")
  cat >"$dir/slurm.conf" <<EOF
ClusterName=fp8dtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/ctld
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdSpoolDir=$dir/%n
SlurmdPidFile=$dir/%n.pid
SlurmdLogFile=$dir/%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# A lost node is noticed within seconds (tests kill a slurmd on purpose).
SlurmdTimeout=5
SlurmctldTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=5
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.log
EOF
  local gres=""
  if [ "$gpus" -gt 0 ]; then
    gres=" Gres=gpu:$gpus"
    echo "GresTypes=gpu" >>"$dir/slurm.conf"
    # Each slurmd reads gres.conf next to slurm.conf. The links stand in for /dev/nvidiaK:
    # slurmd takes only character or block devices (a regular file "is not a valid character
    # or block device" and no task gets CUDA_VISIBLE_DEVICES); `Count=N` alone registers no
    # GPU ("gres/gpu count reported lower than configured", node INVAL).
    mkdir -p "$dir/gpu"
    for k in $(seq 0 $((gpus - 1))); do ln -s /dev/null "$dir/gpu/nvidia$k"; done
    echo "NodeName=n[1-$nodes] Name=gpu File=$dir/gpu/nvidia[0-$((gpus - 1))]" >"$dir/gres.conf"
  fi
  for k in $(seq 1 "$nodes"); do
    echo "NodeName=n$k NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + k)) CPUs=$cpus RealMemory=1000$gres State=UNKNOWN" >>"$dir/slurm.conf"
  done
  echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP" >>"$dir/slurm.conf"
}

fail_start() {
  echo "slurm-cluster: $1" >&2
  local f
  for f in "$dir"/slurmctld.log "$dir"/n*.log "$dir"/munge/munged.log; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  do_stop
  exit 1
}

do_start() {
  for b in munged slurmctld slurmd sinfo; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || {
      echo "slurm-cluster: $b not installed (scripts/install-deps.sh installs slurm-wlm and munge)" >&2
      exit 69
    }
  done
  export PATH=$PATH:/usr/sbin
  [[ "$nodes" =~ ^[1-9][0-9]?$ ]] || usage
  [[ "$gpus" =~ ^[0-9]{1,2}$ ]] || { echo "slurm-cluster: SLURM_CLUSTER_GPUS=$gpus: expected 0..99" >&2; exit 64; }
  [ -n "$cpus" ] || cpus=$(( gpus > 1 ? gpus : 1 ))
  [[ "$cpus" =~ ^[1-9][0-9]{0,2}$ ]] && [ "$cpus" -le "$(nproc)" ] || {
    echo "slurm-cluster: $cpus CPUs per node: expected 1..$(nproc) (this machine's cores)" >&2
    exit 64
  }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  do_stop  # a cluster left behind in DIR by an earlier run
  rm -rf "$dir/ctld" "$dir/munge" "$dir"/n[0-9]* "$dir/jobcomp.log" "$dir"/*.log \
    "$dir/gres.conf" "$dir/gpu"
  mkdir -p "$dir/ctld" "$dir/munge"
  # Passable by everyone: jobs that run as other users (sbatch --uid) reach munge's socket from
  # srun. The key itself stays root's (0400).
  chmod 755 "$dir/munge"
  local base k
  base=$(pick_port_base)
  write_conf "$base"
  for k in $(seq 1 "$nodes"); do mkdir -p "$dir/n$k"; done

  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" || fail_start "munged did not start"

  export SLURM_CONF=$dir/slurm.conf
  slurmctld -f "$SLURM_CONF" || fail_start "slurmctld did not start"
  for k in $(seq 1 "$nodes"); do
    slurmd -f "$SLURM_CONF" -N "n$k" || fail_start "slurmd n$k did not start"
  done
  local idle
  for _ in $(seq 1 600); do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    if [ "$idle" -ge "$nodes" ]; then
      echo "slurm-cluster: $nodes node(s) idle; export SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.1
  done
  sinfo -N >&2 || true
  fail_start "nodes not idle within 60 s"
}

case "$cmd" in
  start) do_start ;;
  stop)
    [ -d "$dir" ] && dir=$(cd "$dir" && pwd -P)
    do_stop
    ;;
  env) echo "export SLURM_CONF=$(cd "$dir" && pwd -P)/slurm.conf" ;;
  kill-node)
    node=${3:?node name}
    dir=$(cd "$dir" && pwd -P)
    pid=$(cat "$dir/$node.pid")
    # Only the slurmd: its job steps (slurmstepd and the ranks) keep running, as on a node
    # whose controller link died. `stop` ends them.
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$dir/$node.pid"
    ;;
  start-node)
    node=${3:?node name}
    dir=$(cd "$dir" && pwd -P)
    export PATH=$PATH:/usr/sbin
    SLURM_CONF=$dir/slurm.conf slurmd -f "$dir/slurm.conf" -N "$node"
    for _ in $(seq 1 600); do
      state=$(SLURM_CONF=$dir/slurm.conf sinfo -h -n "$node" -N -o '%T' 2>/dev/null || true)
      case "$state" in idle|mixed|allocated) exit 0 ;; esac
      sleep 0.1
    done
    echo "slurm-cluster: $node not back within 60 s (state: $state)" >&2
    exit 1
    ;;
  *) usage ;;
esac
