"""Attempts that may have run unheard (fleet.core.unsure), as the report and the audit
tell them.

A queued step (fleet.core.window) whose node was lost, or whose zygote died, before its
start was heard may have run there: its `unqueued` record says `may_have_started`, and
it runs again as attempt + 1. Until 2026-12-07 neither `fleet report` nor `fleet audit`
said so: a step whose side effect happened twice showed one attempt. Now such an attempt
counts among the step's attempts, as one that may have run, and is a problem of its own
(never a failure): "attempt 1 may have run on node1 before attempt 2 (...)".

Its node is its `queued` record's (the `unqueued` one names none): the report keeps the
node of each step queued and not yet started or taken back, so what it holds is bounded
by the fleet's windows, not by the steps (a million-step stream). The handlers gather
into fleet.report.ingest's `Gathered`; a stream of before 2026-12-07 (no
`may_have_started`) reads as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.report.model import MAY_HAVE_RUN, MayHaveRun, r6
from fleet.wire import events as E

if TYPE_CHECKING:
    from fleet.report.ingest import Gathered


def why(reason: str, attempt: int) -> str:
    """An `unqueued` record's reason without what its next attempt is (said apart): the
    words fleet.core.unsure.spend adds."""
    return (reason or "").removesuffix(f"; it may have started there: it runs again as attempt {attempt + 1}")


def words(attempt: int, node: str | None, reason: str) -> str:
    """"attempt 1 may have run on node1 before attempt 2: its node ..." (`reason`: why's)."""
    where = f" on {node}" if node else ""
    return f"attempt {attempt} may have run{where} before attempt {attempt + 1}" + (f": {reason}" if reason else "")


def on_queued(g: Gathered, rec: E.Queued) -> None:
    """The node a step is queued on, until it starts or is taken back."""
    node = rec.node or None
    g.queued_on[rec.step] = g.renamed.get((rec.fleet, node), node) if g.renamed else node


def on_unqueued(g: Gathered, rec: E.Unqueued) -> None:
    """A queued step taken back: if it may have started, an attempt that may have run."""
    node = g.queued_on.pop(rec.step, None)
    if not rec.may_have_started:  # (surely not started: nothing to say; every record before 2026-12-07)
        return
    s = g.step_of(rec.step, rec.t)
    if s.unsure is None:
        s.unsure = []
    s.unsure.append(MayHaveRun(rec.attempt, node, rec.t, why(rec.reason, rec.attempt), rec.fleet))


def problems(s, t0: float, log: str) -> list[dict]:
    """The problems of the step's attempts that may have run (fleet.report.figures.problems)."""
    return [dict(step=s.id, outcome=MAY_HAVE_RUN, attempt=u.attempt, node=u.node, t=r6(u.t - t0), reason=u.reason,
                 retried=False, next_attempt=u.attempt + 1, log=log) for u in s.unsure]
