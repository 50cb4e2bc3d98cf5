"""Whether a pid of this host is still the coordinator that a run directory's files name.

A connection file (fleet.json), a lease or a registration outlives a coordinator killed
with SIGKILL, and its pid may be used again by any process. Before 2026-12-06 only the
pid's existence counted: `fleet down` sent SIGTERM, then SIGKILL, to whatever process
had the pid since and said the fleet was down; `fleet up` refused to start as long as
that process lived (and its coordinator then waited --stale-after for the lease);
`fleet status` waited 10 s for an answer that could not come.

Two questions, answered with different care:

- Signalling a pid (`coordinator`) needs proof that it is a coordinator of the run
  directory: its command line is `... -m fleet.control.coordinator --run-dir D ...`
  (fleet.control.client starts it so) with D that directory.
- Calling a record stale (`gone`) and acting on it (removing a fleet.json, taking a
  lease over) needs proof of the opposite: no such process of this user (another
  user's is never a coordinator of ours), or one that is no
  coordinator of the run directory by its command line AND started after the record
  was written, as a process that got the pid later did. Either alone could take a live
  fleet for gone: a command line other than fleet's (a coordinator under a wrapper, or a
  process standing in for one), a start time shifted by a clock stepped since (psutil
  counts it from the boot time, which moves with the wall clock).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import psutil

MODULE = "fleet.control.coordinator"
# A process's start time (psutil: whole seconds of boot time plus clock ticks) reads up
# to a second early; a pid used again within this of the record's writing is not told
# apart (its record is then stale only by its age, as before).
SLACK_S = 1.0


def _process(pid: object) -> psutil.Process | None:
    """The live process pid (not a zombie) of this user, or None. Another user's is
    never a coordinator of ours, whatever its command line says: any user may read
    another's in /proc, and may start a process that looks like a coordinator of any run
    directory (on a pid named in a lease: before 2026-12-06 that kept `fleet up` out and
    made `fleet down` fail with a traceback, as it could not signal it)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE or p.uids().real != os.getuid():
            return None
    except psutil.Error:
        return None
    return p


def _runs_in(p: psutil.Process, run_dir: Path | str) -> bool | None:
    """Whether p's command line is a coordinator's of run_dir: None if it cannot be told
    (its run directory moved or removed since it started, or p cannot be looked at)."""
    try:
        argv = p.cmdline()
    except psutil.AccessDenied:  # (not ours to look at: never a coordinator of ours)
        return False
    except psutil.Error:
        return None
    if MODULE not in argv or "--run-dir" not in argv[:-1]:
        return False
    given = argv[argv.index("--run-dir") + 1]
    try:
        if not os.path.isabs(given):
            given = os.path.join(p.cwd(), given)
        return os.path.samefile(given, run_dir)
    except (OSError, psutil.Error):
        return None


def coordinator(pid: object, run_dir: Path | str) -> psutil.Process | None:
    """The process pid of this host if it is a live coordinator of run_dir by its command
    line (one whose run directory moved since counts), else None. Signal it through the
    psutil.Process returned: psutil sends nothing to a pid used again since."""
    p = _process(pid)
    return p if p is not None and _runs_in(p, run_dir) is not False else None


def gone(pid: object, run_dir: Path | str, written: float | None) -> bool:
    """The coordinator pid of this host, named by a record of run_dir written at
    `written` (epoch seconds; None: not said), is provably gone: no such process, a
    zombie, another user's, or a process that is no coordinator of run_dir and started after the record."""
    p = _process(pid)
    if p is None:
        return True
    if _runs_in(p, run_dir) is not False or not isinstance(written, (int, float)):
        return False
    try:
        return p.create_time() > written + SLACK_S
    except psutil.Error:
        return True  # (it ended as we looked)


def gone_here(rec: dict, run_dir: Path | str, written: float | None) -> bool:
    """As `gone`, for a record naming its host and pid: False for another host's."""
    return rec.get("host") == socket.gethostname() and gone(rec.get("pid"), run_dir, written)
