"""The allocation, read from the job's environment, and when it ends.

The nodes come from the environment only. The end is read once, when the fleet comes
up (end_time): from the environment where the batch system puts it there, else by one
query of the job (Slurm: `squeue -h -j JOB -o %e`; PBS: `qstat -f JOB`). The batch
system is never polled: nothing here is called again while a fleet runs."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime
from typing import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import hostlist


class AllocationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Allocation:
    """Which batch system (slurm, pbs or none), the job id and its nodes in order."""

    system: str
    job_id: str
    nodes: tuple[str, ...]


def expand_hostlist(expr: str) -> list[str]:
    """Slurm hostlist expression to names: "nid[001-003,007]" -> nid001 nid002 nid003 nid007."""
    try:
        return hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as e:
        raise AllocationError(f"cannot read the hostlist {expr!r}: {e}") from None


def read_nodefile(path: str | Path) -> list[str]:
    """PBS_NODEFILE: one line per slot; nodes de-duplicated, in order of first mention."""
    try:
        lines = Path(path).read_text().split()
    except OSError as e:
        raise AllocationError(f"cannot read the node file {path}: {e}") from None
    return list(dict.fromkeys(line.strip() for line in lines if line.strip()))


def from_environment(env: Mapping[str, str] | None = None) -> Allocation:
    """The current job's allocation (system "none" outside a batch job)."""
    env = os.environ if env is None else env
    if env.get("SLURM_JOB_ID"):
        expr = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not expr:
            raise AllocationError("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: "
                                  "is this running inside the job?")
        return Allocation("slurm", env["SLURM_JOB_ID"], tuple(expand_hostlist(expr)))
    if env.get("PBS_JOBID"):
        nodefile = env.get("PBS_NODEFILE")
        if not nodefile:
            raise AllocationError("PBS_JOBID is set but PBS_NODEFILE is not")
        return Allocation("pbs", env["PBS_JOBID"], tuple(read_nodefile(nodefile)))
    return Allocation("none", "", ())


QUERY_TIMEOUT_S = 10.0  # one query of the batch system at start, bounded


def _query(argv: list[str]) -> str | None:
    """stdout of one batch-system command, or None if it failed (or took too long). Times
    in Slurm's standard format, whatever the user's SLURM_TIME_FORMAT ("relative" gave
    "23:34:04" for an end today, no end at all)."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           timeout=QUERY_TIMEOUT_S, check=False, env={**os.environ, "SLURM_TIME_FORMAT": "standard"})
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def _local_time(text: str, formats: tuple[str, ...]) -> float | None:
    """A local date and time as the batch system prints it, as epoch seconds."""
    for fmt in formats:
        try:
            return time.mktime(datetime.strptime(text.strip(), fmt).timetuple())
        except ValueError:
            continue
    return None


def _seconds(hms: str) -> float | None:
    """[[H:]M:]S (PBS walltime) as seconds."""
    try:
        parts = [float(x) for x in hms.strip().split(":")]
    except ValueError:
        return None
    total = 0.0
    for x in parts:
        total = total * 60 + x
    return total


def end_time(alloc: Allocation, env: Mapping[str, str] | None = None,
             query: Callable[[list[str]], str | None] = _query, now: float | None = None
             ) -> tuple[float | None, str]:
    """When the job ends (epoch seconds; None: not known or no limit) and where that
    came from, in words. At most one query of the batch system."""
    env = os.environ if env is None else env
    if alloc.system == "slurm":
        v = env.get("SLURM_JOB_END_TIME", "")
        if v.isdigit():
            return float(v), "SLURM_JOB_END_TIME"
        out = query(["squeue", "-h", "-j", alloc.job_id, "-o", "%e"])
        end = _local_time(out or "", ("%Y-%m-%dT%H:%M:%S",))
        return (end, f"squeue -j {alloc.job_id}") if end is not None else (None, "Slurm gave no end time")
    if alloc.system == "pbs":
        out = query(["qstat", "-f", alloc.job_id]) or ""
        fields = dict(line.strip().split(" = ", 1) for line in out.splitlines() if " = " in line)
        start = _local_time(fields.get("stime", ""), ("%a %b %d %H:%M:%S %Y",))
        wall = _seconds(fields.get("Resource_List.walltime", "")) or (
            float(env["PBS_WALLTIME"]) if env.get("PBS_WALLTIME", "").isdigit() else None)
        if start is not None and wall:
            return start + wall, f"qstat -f {alloc.job_id}"
        if wall:  # no start known: from now (the job started a little earlier: the drain margin covers it)
            return (time.time() if now is None else now) + wall, "PBS walltime from now"
        return None, "PBS gave no walltime"
    return None, "not a batch job"
