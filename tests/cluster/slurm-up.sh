#!/usr/bin/env bash
# A real Slurm on this one machine: slurmctld plus N fake nodes (node1..nodeN), each
# its own slurmd (Debian's slurmd is built with MULTIPLE_SLURMD: `slurmd -N nodeK`).
# For the integration tests (tests/harness/cluster.py) and CI (.ci/run).
#
#   N=2 bash tests/cluster/slurm-up.sh        # start (idempotent), then `sinfo -N`
#   bash tests/cluster/slurm-down.sh          # stop (by pid files)
#
# Idempotent: if slurmctld answers with the same configuration and N idle nodes,
# nothing is done. Partial states (munged up but slurmctld not, a slurmd gone) are
# repaired; a running Slurm with another configuration is stopped and restarted.
# Needs root (Debian 12, no systemd needed). Installs slurmctld slurmd slurm-client
# munge with apt-get only if a program is missing.
#
# Shared file system: every fake node is this machine, so all paths (the submit
# directory, job output files, the project checkout, the Python environment) are
# the same on every node, as on a cluster with a shared file system. Nothing is
# staged. Nodes cannot be told apart by `hostname` (all say the same): use
# SLURMD_NODENAME. Per-node spool, log and TmpFS directories keep the slurmds apart.
set -euo pipefail

N=${N:-2}
TIMEOUT=${SLURM_UP_TIMEOUT:-60}      # seconds to wait for the nodes to be idle
CONF=/etc/slurm/slurm.conf
export DEBIAN_FRONTEND=noninteractive

log() { echo "slurm-up: $*" >&2; }
die() { log "FAILED: $*"; for f in /var/log/slurm/slurmctld.log /var/log/slurm/slurmd-node1.log; do [ -f "$f" ] && { log "--- tail $f"; tail -n 15 "$f" >&2; }; done; exit 1; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }   # pid file -> process alive?

[ "$(id -u)" = 0 ] || die "needs root (it starts munged, slurmctld and slurmd)"
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"

# -- packages, only if missing ------------------------------------------------------
missing=0
for p in slurmctld slurmd sinfo sbatch srun scontrol munged; do
  command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] || missing=1
done
if [ "$missing" = 1 ]; then
  log "installing slurmctld slurmd slurm-client munge (apt-get)"
  pkgs=(slurmctld slurmd slurm-client munge)
  # Package lists may be absent on a fresh image or stale; update once if needed.
  if ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then apt-get update -qq; fi
  if ! apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null || die "apt-get install ${pkgs[*]}"
  fi
fi
export PATH="$PATH:/usr/sbin:/sbin"

# -- configuration -------------------------------------------------------------------
# CPUs/cores of each fake node = this machine's (so --cpu-bind ids are real ids);
# RealMemory = this machine's memory split between the nodes (memory is not a
# consumable with CR_Core, this only lets jobs ask --mem/--mem-per-cpu sensibly).
cpus=$(nproc --all)
sockets=$(lscpu -p=SOCKET 2>/dev/null | grep -v '^#' | sort -u | wc -l); [ "$sockets" -ge 1 ] || sockets=1
cores=$(lscpu -p=SOCKET,CORE 2>/dev/null | grep -v '^#' | sort -u | wc -l); [ "$cores" -ge 1 ] || cores=$cpus
tpc=$(( cpus / cores )); [ "$tpc" -ge 1 ] || tpc=1
mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 / N ))
want=$(cat <<EOC
# Written by tests/cluster/slurm-up.sh (N=$N). All nodes are this machine.
ClusterName=ci
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
TmpFS=/tmp/%n
NodeName=node[1-$N] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[17001-$((17000+N))] CPUs=$cpus Sockets=$sockets CoresPerSocket=$((cores / sockets)) ThreadsPerCore=$tpc RealMemory=$mem_mb
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOC
)

idle_nodes() { sinfo -h -t idle -o %D 2>/dev/null | awk '{s+=$1} END {print s+0}'; }

if alive /run/slurmctld.pid && [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$want" ] \
   && scontrol ping >/dev/null 2>&1 && [ "$(idle_nodes)" = "$N" ] \
   && [ "$(sinfo -h -N -o %N | sort -u | wc -l)" = "$N" ]; then
  log "already up with $N idle nodes"
  sinfo -N
  exit 0
fi

any_alive() { for f in /run/slurmctld.pid /run/slurmd-node*.pid; do alive "$f" && return 0; done; return 1; }
if [ -f "$CONF" ] && [ "$(cat "$CONF")" != "$want" ] && any_alive; then
  log "a Slurm with another configuration is running: restarting it"
  bash "$(dirname "$0")/slurm-down.sh"
fi

mkdir -p /etc/slurm /var/spool/slurmctld /var/log/slurm
for i in $(seq 1 "$N"); do mkdir -p "/var/spool/slurmd/node$i" "/tmp/node$i"; done
printf '%s\n' "$want" > "$CONF"

# -- daemons, each only if not already running ----------------------------------------
if ! alive /run/munge/munged.pid; then
  install -d -o munge -g munge -m 0755 /run/munge
  [ -s /etc/munge/munge.key ] || { (command -v mungekey >/dev/null && mungekey -c -f) || \
      dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null;
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key; }
  runuser -u munge -- /usr/sbin/munged || die "munged did not start"
fi
if ! alive /run/slurmctld.pid; then
  slurmctld -c || die "slurmctld did not start"           # -c: clear old state
fi
for i in $(seq 1 "$N"); do
  alive "/run/slurmd-node$i.pid" || slurmd -N "node$i" || die "slurmd -N node$i did not start"
done

# -- wait, with a deadline, until all N nodes are idle ---------------------------------
deadline=$(( SECONDS + TIMEOUT ))
until [ "$(idle_nodes)" = "$N" ]; do
  if [ $SECONDS -ge $deadline ]; then sinfo -N >&2 || true; die "nodes not idle after ${TIMEOUT}s"; fi
  # A node left DOWN/DRAIN by an earlier run: give it back.
  down=$(sinfo -h -N -t down,drain,fail -o %N 2>/dev/null | sort -u | paste -sd, || true)
  [ -n "$down" ] && scontrol update NodeName="$down" State=RESUME >/dev/null 2>&1 || true
  sleep 0.5
done

# -- smoke test: one task per node writes into a directory of this machine, which the
# submitter reads back: the "shared file system" every test relies on. ---------------
probe=$(mktemp -d /tmp/slurm-up.XXXXXX)
timeout -k 5 30 srun -N "$N" -n "$N" --ntasks-per-node=1 -t 1 -J slurm-up-smoke -D "$probe" \
  bash -c 'echo ok > "$SLURMD_NODENAME"' || { rm -rf "$probe"; die "srun across the $N nodes failed"; }
seen=$(ls "$probe" | sort | paste -sd' '); rm -rf "$probe"
[ "$seen" = "$(seq -f 'node%g' 1 "$N" | sort | paste -sd' ')" ] || die "smoke test: expected node1..node$N, saw '$seen'"
sinfo -N
