#!/usr/bin/env bash
# A real SLURM cluster on this one host: munge, slurmctld and slurmd from Debian's packages, with two
# partitions: `main` (the default, no time limit) and `short` (a 2-minute limit, for runs that must
# time out). For a developer by hand and for the tests (pytest -m slurm):
#
#   bash cluster/slurm.sh up       # install what is missing, write the config, start the daemons
#   export SLURM_CONF=/tmp/tfrl-slurm/slurm.conf   # what `up` prints: sbatch, squeue, sinfo read it
#   bash cluster/slurm.sh status   # sinfo
#   bash cluster/slurm.sh down     # stop the daemons (the config and logs stay in the state dir)
#
# Idempotent: `up` on a running cluster starts only what is not running and waits for the node. The state dir is
# $TFRL_SLURM_DIR (default /tmp/tfrl-slurm): slurm.conf, the daemons' logs and pid files, the
# controller's saved state. Installing needs root and Debian's apt; without them `up` says what to
# install. The daemons run as root with process tracking by /proc (no cgroups, no systemd), which is
# what a container or VM without systemd can offer.
set -euo pipefail
dir="${TFRL_SLURM_DIR:-/tmp/tfrl-slurm}"
conf="$dir/slurm.conf"
host="$(hostname -s)"

die() { echo "error: $*" >&2; exit 1; }
cannot_install() { echo "error: $*" >&2; exit 3; }  # exit 3: the tests skip, with this message

install_packages() {
  local missing=()
  for cmd in munged slurmctld slurmd sbatch; do command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd"); done
  [ ${#missing[@]} -eq 0 ] && return
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    cannot_install "SLURM is not installed here (missing: ${missing[*]}) and this script can install it only as root with apt-get. Install Debian's packages munge, slurmctld, slurmd and slurm-client (or your distribution's), then run it again."
  fi
  echo "installing munge and SLURM from Debian's packages ..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq munge slurmctld slurmd slurm-client >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq munge slurmctld slurmd slurm-client >/dev/null; } \
    || cannot_install "apt-get could not install munge, slurmctld, slurmd and slurm-client; install them by hand and run this again."
}

wanted_conf() {
  local cpus mem
  cpus="$(getconf _NPROCESSORS_ONLN)"  # (nproc would follow OMP_NUM_THREADS)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))  # MB, leaving 1 GB to the host
  cat <<EOF
# written by cluster/slurm.sh: a one-host cluster for tests and for trying sweeps by hand
ClusterName=tfrl
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits for its credential to expire before it starts again: 10 s, not 120
AuthInfo=cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
KillWait=30
MinJobAge=600
# the scheduler looks at pending (e.g. requeued) jobs every 2 s, not every 60 or 30
SchedulerParameters=defer_batch,sched_interval=2,bf_interval=2
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes=ALL MaxTime=2 State=UP
EOF
}

answering() { SLURM_CONF="$conf" timeout 5 sinfo -h >/dev/null 2>&1; }

# A daemon counts as running only while it is alive: a zombie keeps its name for pgrep.
alive() {
  local pid
  for pid in $(pgrep -x "$1"); do
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] || return 0
  done
  return 1
}

# Stop a daemon and wait until it is gone. A controller still saving its state when `up` follows
# `down` would otherwise look running, be left alone, and then exit, leaving no controller.
stop() {
  pkill -x "$1" 2>/dev/null || return 0
  for _ in $(seq 100); do alive "$1" || return 0; sleep 0.3; done
  pkill -KILL -x "$1" 2>/dev/null || true
  sleep 0.5
}

up() {
  mkdir -p "$dir"
  exec 9>"$dir/up.lock"
  flock 9  # two callers at once (the tests' workers): one brings the cluster up, the other finds it up
  # (the daemons it starts must not inherit fd 9, or they would hold the lock for good)
  install_packages
  mkdir -p "$dir/state" "$dir/spool"
  if ! [ -f "$conf" ] || [ "$(cat "$conf")" != "$(wanted_conf)" ]; then  # a new or changed config: restart
    wanted_conf > "$conf"
    stop slurmd; stop slurmctld
  fi
  if ! alive munged; then
    [ -f /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || create-munge-key >/dev/null 2>&1; } \
      || die "no munge key at /etc/munge/munge.key and none could be made (mungekey --create)."
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    munged --force 2>/dev/null 9>&- || die "munged did not start: see /var/log/munge/munged.log"
  fi
  if ! alive slurmctld; then
    SLURM_CONF="$conf" slurmctld -f "$conf" -c 9>&- || die "slurmctld did not start: see $dir/slurmctld.log"
  fi
  local deadline=$((SECONDS + 30))  # slurmd registers once, and retries only later: the controller first
  until answering; do
    [ $SECONDS -lt $deadline ] || die "slurmctld started but did not answer within 30 s: see $dir/slurmctld.log"
    sleep 0.5
  done
  deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ]; do
    # (checked on every pass: a slurmd still exiting from a `down` just before can look alive once)
    alive slurmd || SLURM_CONF="$conf" slurmd -f "$conf" 9>&- || die "slurmd did not start: see $dir/slurmd.log"
    if alive slurmd && [ -n "$(SLURM_CONF="$conf" timeout 5 sinfo -h -N -o '%T' -t idle,mixed,allocated 2>/dev/null)" ]; then
      echo "SLURM is up ($conf)"; print_env; return
    fi
    sleep 1
  done
  die "the SLURM daemons started but the node did not become idle within 60 s: see $dir/slurmctld.log and $dir/slurmd.log"
}

down() {
  stop slurmd
  stop slurmctld
  echo "SLURM is down (state and logs in $dir)"
}

print_env() { echo "export SLURM_CONF=$conf"; }

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) SLURM_CONF="$conf" sinfo ;;
  *) die "usage: bash cluster/slurm.sh up|down|status" ;;
esac
