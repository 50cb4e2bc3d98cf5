"""The allocation's end, its drain, and the closes that counted what was left never
started (fleet.control.drain, fleet.control.closing), as their records say: the handlers
of fleet.report.ingest for these record kinds, gathering into its `Gathered`.

A close after a drain gives the steps it does not name the drain's reason
(fleet.report.assemble); a close without a drain (nothing left could end before the
drain point, and the fleet stays up) names here every step it left, and when.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.report.model import ENDED_WELL
from fleet.wire import events as E

if TYPE_CHECKING:
    from fleet.report.ingest import Gathered


def on_allocation_end(g: Gathered, rec: E.AllocationEnd) -> None:
    """When the allocation ends, and its drain point."""
    g.allocation.update(end=rec.end, drain_at=rec.drain_at, source=rec.source)


def on_drained(g: Gathered, rec: E.Drained) -> None:
    """The fleet drained: why, and how many steps ran then (`running`). The steps it
    interrupted are counted from their exits after it (ingest's exit handler): a full
    disk's drain lets the running steps run, and those that succeed are not interrupted
    (before 2026-12-07 the line said every step running at the drain was)."""
    g.allocation.update(drained=rec.t, reason=rec.reason, running=rec.running)
    g.allocation.setdefault("interrupted", 0)
    g.drained.add(rec.fleet)


def on_not_started(g: Gathered, rec: E.NotStarted) -> None:
    """A close (after a drain, or before the drain point: nothing left could end before
    it) counted the steps left never started, with their reasons."""
    g.allocation.update(not_started=rec.steps, held=rec.held)
    said = isinstance(rec.reason, str) and rec.reason  # (a record of before 2026-12-06 has none)
    if said and rec.fleet not in g.drained:
        # Closed early, not drained: nothing left could end before the drain point. Its
        # steps left are those waiting now (a later submission's are not), told its reason
        # (before 2026-12-06 the report said they "went down before" they ran).
        g.allocation["closed"] = rec.t
        _closed_early(g, rec.fleet, rec.reason, rec.t)
    elif said:
        g.not_started_why = rec.reason
    g.not_started.update(rec.named())
    if rec.longer_only:
        g.allocation["longer_only"] = True
    else:
        g.allocation.pop("longer_only", None)


def _closed_early(g: Gathered, fleet: str, reason: str, t: float) -> None:
    """Each step of `fleet` still waiting to run (never started, or to run again) takes
    `reason`, and ends at `t`, unless an earlier close did so. One walk of the steps per
    close."""
    named, closed = g.not_started, g.closed_at
    for s in g.steps.values():
        if s.fleet != fleet or s.final is not None or s.foreign or s.id in closed:
            continue
        a = s.attempts[-1] if s.attempts else None
        if a is None or (a.exit_seen and (a.retried or s.again) and a.outcome not in ENDED_WELL):
            named.setdefault(s.id, reason)
            closed[s.id] = t
