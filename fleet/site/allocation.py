"""The allocation, read from the job's environment, whether that job is live, and when it ends.

The nodes come from the environment only. The job is asked about once, when the fleet
comes up (at_start): one query (Slurm: `squeue -h -j JOB -o "%T %e"`; PBS: `qstat -f
JOB`) gives its state and its end; an end the batch system puts in the environment
(SLURM_JOB_END_TIME) is taken from there, the state still asked (from 2026-12-07: the
variables of a job that has ended, left in an salloc shell, were taken for a live job,
which a fleet then recorded as its own: fleet.site.jobstate). The batch system is never
polled: nothing here is called again while a fleet runs."""

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

from fleet.core.oneline import one_line


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
        het = sorted(k for k in env if k.startswith("SLURM_JOB_NODELIST_HET_GROUP_"))
        if het or env.get("SLURM_HET_SIZE"):
            # (salloc sets no SLURM_JOB_NODELIST in one, only each component's; sbatch sets
            # it to the first component's: a fleet came up there, the others idle, unsaid)
            het = het or ["SLURM_HET_SIZE"]
            raise AllocationError(f"SLURM_JOB_ID={env['SLURM_JOB_ID']} is a heterogeneous Slurm job ({', '.join(het)}): "
                                  "not supported (its agents would need srun --het-group); ask for one "
                                  "homogeneous allocation (salloc/sbatch without ':' components)")
        if not expr:
            raise AllocationError("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: "
                                  "is this running inside the job?")
        return Allocation("slurm", env["SLURM_JOB_ID"], tuple(expand_hostlist(expr)))
    if env.get("PBS_JOBID"):
        nodefile = env.get("PBS_NODEFILE")
        if not nodefile:
            raise AllocationError("PBS_JOBID is set but PBS_NODEFILE is not")
        nodes = tuple(read_nodefile(nodefile))
        if not nodes:  # (said as "not inside a batch job" before 2026-12-07, PBS_JOBID set)
            raise AllocationError(f"PBS_JOBID is set but the node file {nodefile} (PBS_NODEFILE) lists no node")
        return Allocation("pbs", env["PBS_JOBID"], nodes)
    return Allocation("none", "", ())


QUERY_TIMEOUT_S = 10.0  # one query of the batch system at start, bounded


@dataclass(frozen=True)
class Answer:
    """What one batch-system command said: its exit status, stdout and stderr."""

    returncode: int
    out: str
    err: str = ""


def _query(argv: list[str]) -> Answer | None:
    """What one batch-system command said, or None if it could not be run (or took too
    long). Times in Slurm's standard format, whatever the user's SLURM_TIME_FORMAT
    ("relative" gave "23:34:04" for an end today, no end at all)."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=QUERY_TIMEOUT_S,
                           check=False, env={**os.environ, "SLURM_TIME_FORMAT": "standard"})
    except (OSError, subprocess.SubprocessError):
        return None
    return Answer(p.returncode, p.stdout, p.stderr)


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


@dataclass(frozen=True)
class AtStart:
    """The batch job as asked once when a fleet comes up: when it ends (epoch seconds;
    None: not known, or no limit), where that came from in words, and, if the batch
    system said the job the environment names is not live (ended, or unknown to it),
    why, in words ("": live, or that could not be asked)."""

    end: float | None
    source: str
    gone: str = ""


# A job that the batch system no longer knows (slurmctld forgot it, MinJobAge after its
# end; PBS keeps no history, or keeps it apart): ended, as for fleet.site.jobstate.
_UNKNOWN = {"slurm": {"Invalid job id": "that Slurm does not know"},
            "pbs": {"Unknown Job Id": "that PBS does not know", "Job has finished": "that has ended"}}
_PBS_ENDED = {"F": "finished", "X": "a subjob that finished"}  # job_state of a job that ended


def at_start(alloc: Allocation, env: Mapping[str, str] | None = None,
             query: Callable[[list[str]], Answer | None] = _query, now: float | None = None) -> AtStart:
    """The job `alloc` names, asked once: its end and whether it is live (AtStart).
    Slurm's end from the query, else from SLURM_JOB_END_TIME (the query's is current: a
    time limit changed since the job started is in it). A query that fails for another
    reason than the job being unknown (a timeout, the controller unreachable) tells
    nothing of its state: the fleet starts, as before 2026-12-07."""
    env = os.environ if env is None else env
    if alloc.system == "slurm":
        ans = query(["squeue", "-h", "-j", alloc.job_id, "-t", "all", "-o", "%T %e"])
        gone = _gone(alloc, ans)
        first = ans.out.strip().splitlines()[0] if ans and ans.returncode == 0 and ans.out.strip() else ""
        end = _local_time(first.partition(" ")[2], ("%Y-%m-%dT%H:%M:%S",))  # (its state: _gone)
        if end is not None:
            return AtStart(end, f"squeue -j {alloc.job_id}", gone)
        v = env.get("SLURM_JOB_END_TIME", "")
        if v.isdigit():
            return AtStart(float(v), "SLURM_JOB_END_TIME", gone)
        return AtStart(None, "Slurm gave no end time", gone)
    if alloc.system == "pbs":
        ans = query(["qstat", "-f", alloc.job_id])
        out = ans.out if ans and ans.returncode == 0 else ""
        fields = dict(line.strip().split(" = ", 1) for line in out.splitlines() if " = " in line)
        gone = _gone(alloc, ans, fields.get("job_state", "").strip())
        start = _local_time(fields.get("stime", ""), ("%a %b %d %H:%M:%S %Y",))
        wall = _seconds(fields.get("Resource_List.walltime", "")) or (
            float(env["PBS_WALLTIME"]) if env.get("PBS_WALLTIME", "").isdigit() else None)
        if start is not None and wall:
            return AtStart(start + wall, f"qstat -f {alloc.job_id}", gone)
        if wall:  # no start known: from now (the job started a little earlier: the drain margin covers it)
            return AtStart((time.time() if now is None else now) + wall, "PBS walltime from now", gone)
        return AtStart(None, "PBS gave no walltime", gone)
    return AtStart(None, "not a batch job")


def _gone(alloc: Allocation, ans: Answer | None, pbs_state: str = "") -> str:
    """Why the batch system's answer `ans` says the job is not live, or ""."""
    if ans is None:
        return ""
    if ans.returncode != 0:
        said = next((w for m, w in _UNKNOWN[alloc.system].items() if m.lower() in ans.err.lower()), None)
        return f"{said} ({one_line(ans.err.strip())})" if said else ""
    if alloc.system == "pbs":
        return f"that has ended (job_state {pbs_state}: {_PBS_ENDED[pbs_state]})" if pbs_state in _PBS_ENDED else ""
    from fleet.site.jobstate import ALIVE
    state = (ans.out.split() or [""])[0]
    if not state:  # (squeue lists a job until slurmctld forgets it; nothing: as forgotten)
        return "that squeue no longer lists"
    return "" if state in ALIVE else f"that has ended ({state})"


_SYSTEM = {"slurm": "Slurm", "pbs": "PBS"}
_VARIABLE = {"slurm": "SLURM_JOB_ID", "pbs": "PBS_JOBID"}


def refusal(alloc: Allocation, at: AtStart, now: float | None = None) -> str:
    """Why a fleet must not start in the job `alloc` as asked (`at`), or "": the job has
    ended (the environment's variables are an old job's), or its end, read from the job,
    is already past (the fleet would drain at once and start nothing: fleet run exits 3,
    and a job script that resubmits on 3 resubmits jobs that do nothing)."""
    if at.gone:
        var, system = _VARIABLE[alloc.system], _SYSTEM[alloc.system]
        return (f"{var}={alloc.job_id} names a {system} job {at.gone}: variables left from an old job (a shell "
                f"whose job ended, such as salloc's?); unset the {var.split('_')[0]}_* variables or run inside a "
                f"live job")
    now = time.time() if now is None else now
    if at.end is not None and at.end <= now:
        return (f"the job's end, {_clock(at.end)} ({at.source}), is already past (it is {_clock(now)} here): the "
                f"fleet would drain at once and start nothing; variables of an ended job? give --end or "
                f"--walltime to say when the allocation ends")
    return ""


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def end_time(alloc: Allocation, env: Mapping[str, str] | None = None,
             query: Callable[[list[str]], Answer | None] = _query, now: float | None = None
             ) -> tuple[float | None, str]:
    """When the job ends and where that came from, in words (at_start's end and source)."""
    at = at_start(alloc, env, query, now)
    return at.end, at.source
