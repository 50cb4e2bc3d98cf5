"""A full or read-only run directory's drain, lifted at the next submission once the
run directory can be written again (fleet.control.drain drains for it).

An HPC allocation outlives a full scratch file system: the user frees space (or the
quota is raised, the file system mounted writable again) and runs the suite again in
the same `fleet up`. Before 2026-12-07 the drain was for good: that fleet drained every
later submission at once, with the same "No space left on device" reason, while
`fleet run` told the user to free space and run the suite again; only `fleet down` and
`fleet up` brought it back. Now a client's next submission first looks: if the drain
was for a full (ENOSPC, EDQUOT) or read-only (EROFS) file system, let the running steps
run, and every submission it touched is closed (nothing of them runs any more), a probe
file is written (a block's worth, fsync'd) and removed in the run directory and in its
.fleet/. If both can be, the drain is lifted: the coordinator's buffered lines are
written, a `drain_lifted` record says so, and the scheduler starts steps again
(fleet.core.deadline.DrainLifted); the steps the drain interrupted are the new
submission's to run (fleet.core.generations renews them). If not, nothing changes: the
submission drains at once, and `fleet run` exits 4 as before.

Not lifted: a drain for the allocation's end (it stopped the running steps), one for a
file system whose writes fail (EIO: an fsync that failed so cannot be trusted to be
made good), one whose steps still run or whose submissions are still being closed, and
children a running step submits (only a client's submission lifts it).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fleet.control.drain import FULL, READ_ONLY
from fleet.core.deadline import DrainLifted
from fleet.wire import events

log = logging.getLogger("fleet.control.coordinator")

PROBE = ".fleet-lift-probe"  # the probe file's name (with the coordinator's pid), removed at once
_LIFTED = (FULL, READ_ONLY)  # the drains a probe may lift (FAILING's is not)


def probe(run_dir: Path) -> OSError | None:
    """Write a block's worth into a new file in `run_dir` and in its .fleet/, fsync it
    and remove it; the first OSError, or None if both could be written."""
    for d in (run_dir, run_dir / ".fleet"):
        path = d / f"{PROBE}-{os.getpid()}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:  # (a file system with files left but no block takes an empty file)
                os.write(fd, bytes(4096))
                os.fsync(fd)
            finally:
                os.close(fd)
                path.unlink(missing_ok=True)
        except OSError as e:
            return e
    return None


def liftable(coord) -> bool:
    """Whether the fleet drained for a full or read-only run directory alone, with nothing
    left of that drain: no step running, every submission closed (and the closes done)."""
    d = coord.drain
    return (d.drained and d.full and d.reason.startswith(_LIFTED) and not coord.stopping
            and not d.closing.busy and not d.closing.open_subs() and coord.sched.running_count() == 0)


def lift(coord, now: float) -> bool:
    """Before a client's submission is registered: lift the drain if it is liftable and a
    probe finds the run directory writable again; whether it was lifted."""
    if not liftable(coord):
        return False
    d = coord.drain
    e = probe(coord.run_dir)
    if e is not None:
        log.warning("the run directory still cannot be written (%s): the fleet stays drained (%s)", e, d.reason)
        return False
    was = d.reason
    d.lifted()
    log.warning("the run directory can be written again: the drain (%s) is lifted; steps start again", was)
    coord.events.write(events.DrainLifted(t=now, reason=was))
    d.write_events()  # (what the drain kept buffered first)
    coord._feed(DrainLifted(was), now)
    return True
