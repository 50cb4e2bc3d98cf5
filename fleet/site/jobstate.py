"""Whether a batch job has ended, asked of the batch system (never from the coordinator's loop).

A fleet that finds the run directory's lease, or its `fleet.json`, left by a
coordinator of another host cannot tell from its pid whether it is alive: `fleet up`
refused the run directory, and the lease was waited for until it went stale
(`--stale-after`, 10 minutes by default): the next job of a chain that resubmits itself
after its predecessor's coordinator was killed on another node. Both name the holder's
batch job and Slurm cluster (fleet.wire.connection.this_job, this_cluster); when that
job has ended, nothing of it runs any more: the file is removed and the lease taken
over at once (fleet.control.client.live, fleet.control.lease).

Slurm: `squeue -h -j JOB -o %T`. A job still known prints its state; one that ended
prints nothing (with no state filter squeue lists only live states) or, once slurmctld
forgot it, fails with "Invalid job id specified": both are ended. PBS and others:
not known here (None), and the lease waits to go stale as before.
"""

from __future__ import annotations

import re
import socket
import subprocess

from fleet.wire.connection import this_cluster, this_job

QUERY_TIMEOUT_S = 10.0
_SLURM = re.compile(r"^Slurm job (\d+(?:_\d+)?)$")
# Job states in which something of the job may still run (squeue's %T).
ALIVE = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "REQUEUED",
                   "REQUEUE_FED", "REQUEUE_HOLD", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})


def tells(host: str | None, job: str | None, cluster: str | None, outside: bool = False) -> bool:
    """Whether the batch job a record names can tell if the record's process is gone: a
    process of another host (its pid means nothing here), in another job of the Slurm
    cluster this process runs in (another cluster's job id names another job, or none,
    here: several clusters may share a file system). `outside`: also from outside a job
    (a login node), the cluster then asked of Slurm (`scontrol show config`): for an
    explicit command (`fleet down`), not for what runs often (`fleet status`)."""
    if not job or host == socket.gethostname() or job == this_job():
        return False
    mine = this_cluster() or (_cluster_asked() if outside and not this_job() else "")
    return bool(mine and cluster == mine)


def ended_elsewhere(host: str | None, job: str | None, cluster: str | None, outside: bool = False) -> bool:
    """A record of another host's process whose batch job (see tells) has ended."""
    return tells(host, job, cluster, outside) and ended(job) is True


def _cluster_asked() -> str:
    """This machine's Slurm cluster, as `scontrol show config` names it ("" if none)."""
    try:
        p = subprocess.run(["scontrol", "show", "config"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    for line in p.stdout.splitlines() if p.returncode == 0 else ():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            return value.strip()
    return ""


def ended(job: str) -> bool | None:
    """True if the batch job named so (as this_job names it: "Slurm job 1234") has
    ended, False if it may still run, None if that cannot be known here."""
    m = _SLURM.match(job or "")
    if m is None:
        return None
    try:
        p = subprocess.run(["squeue", "-h", "-j", m.group(1), "-o", "%T"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0:
        return True if "Invalid job id" in p.stderr else None
    states = set(p.stdout.split())
    return not (states & ALIVE)
