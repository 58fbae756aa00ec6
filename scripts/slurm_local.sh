#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for testing the SLURM launcher
# (`scripts/reproduce.py --launcher slurm`) against a real scheduler.
#
#   sudo bash scripts/slurm_local.sh start    # install if missing, start
#   bash scripts/slurm_local.sh status        # daemons, node, partitions
#   sudo bash scripts/slurm_local.sh stop     # stop the daemons, remove
#                                             # the config written by start
#
# Root only (daemons, /etc/slurm/slurm.conf). Debian's `slurm-wlm` and
# `munge` packages, installed by `start` when missing. The node is this
# machine, with its CPUs and memory (`slurmd -C`); one partition, `debug`.
# It runs in a container: no systemd, no cgroups (ProctrackType=
# proctrack/linuxproc, TaskPlugin=task/none), no accounting database (so
# `sacct` has nothing; the launcher reads job states from `squeue` and the
# job's own result files). `start` is idempotent (a running cluster is left
# as it is; a controller it starts forgets earlier jobs); `stop` stops only
# what `start` started (pid files under $RTRL_SLURM_DIR) and refuses to
# touch a slurm.conf it did not write.
set -euo pipefail

STATE="${RTRL_SLURM_DIR:-/var/tmp/rtrl-slurm}"
CONF=/etc/slurm/slurm.conf
MARK="# Written by rtrl-rls scripts/slurm_local.sh"
PARTITION=debug

log() { echo "slurm_local: $*"; }
die() { echo "slurm_local: $*" >&2; exit 1; }

answers() { timeout 10 sinfo -h -o %P >/dev/null 2>&1; }

# A pid file's process is running (a zombie left to an init that does not
# reap, as in some containers, is not).
alive() {
  [ -f "$1" ] || return 1
  local state
  state="$(awk '{print $3}' "/proc/$(cat "$1" 2>/dev/null)/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

install_packages() {
  if command -v slurmctld >/dev/null && command -v munged >/dev/null; then
    return
  fi
  [ "$(id -u)" = 0 ] || die "slurm-wlm and munge are not installed (root needed)"
  log "installing slurm-wlm and munge (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

start_munge() {
  if alive "$STATE/munge/munged.pid"; then return; fi
  install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
  install -d -o munge -g munge -m 0755 /run/munge "$STATE/munge"
  if [ ! -s /etc/munge/munge.key ]; then
    runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
  fi
  runuser -u munge -- munged --pid-file="$STATE/munge/munged.pid" \
    --log-file=/var/log/munge/munged.log
  for _ in $(seq 50); do
    munge -n >/dev/null 2>&1 && return
    sleep 0.1
  done
  die "munged does not answer (see /var/log/munge/munged.log)"
}

write_conf() {
  if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script: not touched"
  fi
  # This machine as slurmd sees it: `NodeName=h CPUs=.. RealMemory=..`.
  local node host cpus memory
  node="$(slurmd -C | head -1)"
  host="$(hostname -s)"
  cpus="$(sed -E 's/.* CPUs=([0-9]+).*/\1/' <<<"$node")"
  # Leave the operating system 5% of the memory.
  memory="$(( $(sed -E 's/.* RealMemory=([0-9]+).*/\1/' <<<"$node") * 95 / 100 ))"
  mkdir -p "$(dirname "$CONF")"
  cat >"$CONF" <<EOF
$MARK ($(date -u +%FT%TZ)); stop removes it.
ClusterName=rtrl-local
# Addresses on the loopback: the host name need not resolve.
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# A requeued job may start again after this many seconds (default 120).
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# Pending jobs (a requeued one, a dependency met) start within seconds.
SchedulerParameters=sched_interval=5,bf_interval=5
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
# Ended jobs stay visible to squeue/scontrol for 5 minutes.
MinJobAge=300
KillWait=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$(( memory / cpus ))
EOF
}

start() {
  install_packages
  mkdir -p "$STATE/ctld" "$STATE/d"
  start_munge
  if alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid" && answers; then
    log "already running"
    status
    return
  fi
  write_conf
  # A fresh controller forgets earlier sessions' jobs (-c: clear state).
  alive "$STATE/slurmctld.pid" || slurmctld -c
  alive "$STATE/slurmd.pid" || slurmd
  for _ in $(seq 60); do
    if answers && [ "$(sinfo -h -n "$(hostname -s)" -o %t)" = idle ]; then
      log "started"
      status
      return
    fi
    sleep 1
  done
  scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true
  answers || die "slurmctld does not answer (see $STATE/slurmctld.log)"
  status
}

stop_daemon() {
  local pidfile="$STATE/$1.pid"
  if alive "$pidfile"; then
    kill "$(cat "$pidfile")" 2>/dev/null || true
    for _ in $(seq 100); do
      alive "$pidfile" || break
      sleep 0.1
    done
    if alive "$pidfile"; then kill -9 "$(cat "$pidfile")" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
}

stop() {
  stop_daemon slurmd
  stop_daemon slurmctld
  stop_daemon munge/munged
  if [ -f "$CONF" ] && grep -qF "$MARK" "$CONF"; then rm -f "$CONF"; fi
  log "stopped"
}

status() {
  for daemon in munge/munged slurmctld slurmd; do
    if alive "$STATE/$daemon.pid"; then
      log "$daemon running (pid $(cat "$STATE/$daemon.pid"))"
    else
      log "$daemon not running"
    fi
  done
  if answers; then
    sinfo
  else
    log "sinfo does not answer"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 start|stop|status" ;;
esac
