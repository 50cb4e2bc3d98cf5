"""When this batch job's first fleet in a run directory began: what "an allocation like
this one gives steps" is measured from (fleet.control.stuck).

A job script brings a fleet up again in the same job when the first one was lost (`fleet
run` exits 5: its coordinator killed or crashed; jobscripts/slurm-resubmit.sbatch and
pbs-resubmit.pbs). That fleet starts late in its job. Measured from its own start, the
window was shorter than the job's first fleet had (68 s of the 118 s), and a step that fits
a job of this length, which the first fleet had started, was judged to need a longer
allocation: `fleet run` exited 1, not 3, and the resubmitting chain stopped for good
(before 2026-12-07). Nor is the batch job's own start the right one: it would count the
job script's prologue and `fleet up`'s start-up as step time, and a step that fits only
that would be resubmitted for ever. So the first fleet of a job records when it began (the
moment its window is measured from) in the run directory, in .fleet/jobs/<job>, a small
file created exclusively; a later fleet of the SAME job reads it and measures from there,
judging as the job's first fleet would. One file created (or read) per fleet start, none
per step; the coordinator's per-step path is not touched.

The file names the job (batch system, Slurm cluster, job id: fleet.wire.connection's
this_job and this_cluster), so another job's record is never read: a run directory shared
by several jobs, or a chain of jobs, each has its own. It holds the start and the job's end
as that fleet read them; a record whose end has passed is an earlier job's with the same id
(ids wrap, a cluster reinstalled): not this job's, and it is replaced. The first fleet of a
job removes the records of jobs that ended more than STALE_S ago, so the directory holds
about one file per job still running. A fleet outside a batch job, or with no end known,
records and reads nothing: its window is measured from its own start, as before. Nothing
here may stop a fleet: a record that cannot be written or read (a full disk, a file torn by
a crash) is logged, and the fleet measures from its own start.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from pathlib import Path
from typing import Mapping

from fleet.wire import connection, owndirs, ownfiles

log = logging.getLogger("fleet.control.coordinator")

JOBS = Path(".fleet") / "jobs"
STALE_S = 3600.0  # a record of a job that ended this long ago is removed (hosts' clocks differ a little)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def job_name(env: Mapping[str, str] | None = None) -> str:
    """This process's batch job as a file name ("slurm-1234", "slurm-1234-cluster",
    "pbs-1234.server"), "" outside a batch job."""
    job = connection.this_job(env)
    if not job:
        return ""
    system, _, ident = job.partition(" job ")
    cluster = connection.this_cluster(env)
    # A requeued Slurm job keeps its id: each run of it is a job of its own here (before
    # 2026-12-07 a requeued run measured from the run before, longer than the job).
    env = os.environ if env is None else env
    run = env.get("SLURM_RESTART_COUNT", "") if system == "Slurm" else ""
    name = "-".join(p for p in (system.lower(), ident, cluster, f"run{run}" if run not in ("", "0") else "") if p)
    return _UNSAFE.sub("_", name)[:200]


def _read(path: Path) -> tuple[float, float] | None:
    """(began, end) from a record, None if it holds no such pair."""
    try:
        began, end = (float(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return None
    return began, end


def window_from(run_dir: Path, began: float, end: float | None, env: Mapping[str, str] | None = None) -> float:
    """When this job's window is measured from: its first fleet's start in run_dir, as
    recorded, if this fleet (which began at `began`, in a job ending at `end`) is a later
    one of the same job; else `began` (recorded here if this is the job's first fleet)."""
    name = job_name(env)
    if not name or end is None:
        return began
    d = Path(run_dir) / JOBS
    path = d / name
    try:
        owndirs.makedirs(d)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, ownfiles.MODE)
    except FileExistsError:
        return _earlier(path, began, end)
    except OSError as e:
        log.warning("cannot record this job's first fleet's start in %s (%s): a later fleet of this job measures "
                    "what an allocation like this one gives steps from its own start", path, e.strerror or e)
        return began
    _write(fd, path, began, end)
    _clean(d, name, began)
    return began


def _earlier(path: Path, began: float, end: float) -> float:
    """The start a record of this job's holds, if it is this job's (its end not passed) and
    earlier than `began`; else `began`, and a record of an ended job is replaced."""
    rec = _read(path)
    if rec is not None and rec[1] > began:
        first = min(rec[0], began)
        if first < began:
            log.info("an earlier fleet of this job began in this run directory at %s: what an allocation like "
                     "this one gives steps is measured from then (%.0f s before this fleet)",
                     time.strftime("%H:%M:%S", time.localtime(first)), began - first)
        return first
    if rec is None:  # (written as this fleet looked, or torn by a crash: left, measured from our own start)
        log.warning("cannot read %s: measuring what an allocation like this one gives steps from this fleet's "
                    "start", path)
        return began
    try:  # an ended job's with this id: this job's record from now
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        _write(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ownfiles.MODE), tmp, began, end)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("cannot replace %s (%s)", path, e.strerror or e)
    return began


def _write(fd: int, path: Path, began: float, end: float) -> None:
    """Write the record (the first fleet's start, the job's end) to fd, and close it."""
    try:
        os.write(fd, f"{began:.3f} {end:.3f}\n".encode())
    except OSError as e:
        log.warning("cannot write %s (%s)", path, e.strerror or e)
    finally:
        os.close(fd)


def _clean(d: Path, mine: str, now: float) -> None:
    """Remove the records of jobs that ended more than STALE_S ago (by the first fleet of
    a job: once per job)."""
    try:
        names = os.listdir(d)
    except OSError:
        return
    for name in names:
        if name == mine:
            continue
        rec = _read(d / name)
        if rec is not None and rec[1] < now - STALE_S:
            try:
                os.unlink(d / name)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    log.warning("cannot remove %s (%s)", d / name, e.strerror or e)
