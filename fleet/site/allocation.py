"""The allocation, read from the job's environment — never by asking the batch
system, which must not be queried while a fleet runs (or at all, by anything here)."""

from __future__ import annotations

import os
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
