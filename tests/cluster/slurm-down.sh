#!/usr/bin/env bash
# Stop what tests/cluster/slurm-up.sh started: cancel every job, then stop each
# slurmd, slurmctld and munged by its pid file (TERM, then KILL after a deadline).
# KEEP_MUNGE=1 leaves munged running.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
log() { echo "slurm-down: $*" >&2; }

if command -v scontrol >/dev/null && timeout 5 scontrol ping >/dev/null 2>&1; then
  jobs=$(timeout 5 squeue -h -o %i 2>/dev/null | paste -sd' ')
  [ -n "$jobs" ] && { log "cancelling jobs $jobs"; timeout 10 scancel $jobs || true; sleep 1; }
fi

files=(/run/slurmd-node*.pid /run/slurmctld.pid)
[ "${KEEP_MUNGE:-0}" = 1 ] || files+=(/run/munge/munged.pid)
pids=()
for f in "${files[@]}"; do
  [ -s "$f" ] || continue
  p=$(cat "$f")
  if kill -0 "$p" 2>/dev/null; then kill -TERM "$p" && pids+=("$p") && log "stopping $(basename "$f" .pid) ($p)"; fi
done
deadline=$(( SECONDS + 15 ))
for p in "${pids[@]}"; do
  while kill -0 "$p" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then log "killing $p"; kill -KILL "$p" 2>/dev/null; break; fi
    sleep 0.2
  done
done
for f in "${files[@]}"; do [ -s "$f" ] && ! kill -0 "$(cat "$f")" 2>/dev/null && rm -f "$f"; done
# Job steps whose slurmd is gone (slurmstepd is not in a pid file): report them.
left=$(pgrep -x slurmstepd | paste -sd' ')
[ -n "$left" ] && log "slurmstepd still running: $left (kill -- them by pid if they do not exit)"
exit 0
