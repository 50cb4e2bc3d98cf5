"""Where each fleet of a session ends, in the report (fleet.report.ingest's handlers of
the records that say so): its `fleet_down`, or the `fleet_gone` another fleet wrote for
it (found gone: killed, or only held up), whichever comes first, counted once; its nodes
and its attempts that had not ended end with it; another fleet's taking over its steps
(`adopted`); what a fleet found gone that was only held up wrote after that end; and
how `fleet audit` words the attempts such a fleet lost (lost_words).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.report import nodenames
from fleet.report.model import UNFINISHED, Attempt
from fleet.wire import events as E

if TYPE_CHECKING:
    from fleet.report.ingest import Gathered


def ends(rec, kind, live: int, ended: set) -> bool:
    """A fleet of the stream ends at this record: its fleet_down, or its fleet_gone (found
    gone by a fleet sharing the run directory, or by the next one, which may say it again
    when it takes its lease over), whichever comes first: once is counted (`ended`: the
    fleets ended so far). A fleet found gone that was only held up (its job suspended)
    writes its own fleet_down when it goes on, after the finder's fleet_gone (or, by a
    moment, before it): before 2026-12-07 that counted a second end, and a fleet starting
    after it while the finder still ran began a session of its own, with the finder's
    records in it. A fleet_down of a stream whose records name no fleet (a hand-made one)
    always ends one."""
    if kind is E.FleetDown:
        if not rec.fleet:
            return True
        if rec.fleet in ended:
            return False
        ended.add(rec.fleet)
        return True
    if kind is not E.FleetGone or live <= 0 or rec.gone in ended:
        return False
    ended.add(rec.gone)
    return True


def on_adopted(g: Gathered, rec: E.Adopted) -> None:
    """An `adopted` record: another fleet found the fleet running this step gone and
    takes it over; that fleet's attempt ended, unseen, by then (it no longer holds its
    node's cores)."""
    dead = rec.previous.get("fleet") if isinstance(rec.previous, dict) else None
    s = g.steps.get(rec.step)
    if not dead or s is None:
        return
    # (ended already, unseen, if its fleet_gone came first: at that fleet's end, kept)
    a = next((x for x in reversed(s.attempts) if x.fleet == dead and (x.end is None or not x.exit_seen)), None)
    if a is not None:
        a.end, a.outcome = rec.t if a.end is None else min(a.end, rec.t), UNFINISHED
        a.reason = f"its fleet {dead} was gone; fleet {rec.fleet} took the step over"


def past_its_end(g: Gathered, a: Attempt, fleet: str) -> None:
    """An attempt's exit its fleet wrote after its end: a fleet found gone that was only
    held up stops its steps when it goes on, and their exits come after the finder's
    fleet_gone. The attempt ends at its fleet's end, as its nodes do (before 2026-12-07 at
    the exit: its node's cores held past the node's end, many times what it offered, and
    the note that the records overlap); how it ended is the exit's."""
    a.end = max(a.start, g.ended[fleet])
    a.reason = f"{a.reason} (heard after its fleet was found gone by fleet {g.found_by[fleet]}: it ends then here)"


def on_fleet_down(g: Gathered, rec: E.FleetDown) -> None:
    """A `fleet_down` record: its fleet ends here, unless found gone before (ends)."""
    if rec.reason and rec.fleet:
        g.down_why[rec.fleet] = rec.reason
    if rec.fleet in g.ended:
        # Found gone first, and only held up: resumed, it stopped, saying why (the note
        # quotes it); it ended at its fleet_gone, once (ends), its nodes and steps with it.
        return
    if rec.fleet:
        g.ended[rec.fleet] = rec.t
    g.fleets_up -= 1
    g.down_t = rec.t
    g.stopping.setdefault(rec.fleet, rec.t)
    nodenames.left(g.nodes, rec.fleet, rec.t)


def on_fleet_gone(g: Gathered, rec: E.FleetGone) -> None:
    """A `fleet_gone` record: the fleet it names ends here, unless it ended before (ends)."""
    # (said twice: by a fleet beside it, then the next; or after its own fleet_down, which
    # a fleet found gone that was only held up wrote a moment before: ended once, ends)
    if rec.gone in g.ended:
        g.found_by.setdefault(rec.gone, rec.fleet)
        return
    if g.fleets_up > 0:  # (a fleet of this session, which died, or was held up: the first of its ends)
        # Its end: about its lease's last refresh (the record's time), which is refreshed
        # only every few seconds (stale_after/4 before 2026-12-07), so no sooner than the last record the fleet wrote
        # (before 2026-12-06 a fleet killed before its first refresh ended before its
        # fleet_up, its nodes never alive).
        end = max(rec.t, g.last_by.get(rec.gone, rec.t))
        g.fleets_up -= 1
        g.down_t = end if g.down_t is None else max(g.down_t, end)
        g.gone.append(f"{rec.gone} (pid {rec.pid} on {rec.host})")
        g.ended[rec.gone] = end
        g.found_by[rec.gone] = rec.fleet
        nodenames.left(g.nodes, rec.gone, end)
        ended_with(g, rec.gone, end)


def ended_with(g: Gathered, fleet: str, end: float) -> None:
    """A gone fleet's attempts with no end of their own end with it, as its nodes do:
    not later, at another fleet's taking them over or at the session's end (before
    2026-12-06 they held its nodes' cores past the nodes' end: over 100 %, the overlap
    note). One walk of the steps per fleet that died."""
    for s in g.steps.values():
        for a in s.attempts:
            if a.fleet != fleet or a.exit_seen:
                continue
            if a.end is None:
                a.end, a.outcome, a.reason = end, UNFINISHED, "the fleet went down while it ran"
            elif a.end > end:  # taken over (adopted) after the fleet's end
                a.end = end


KILLED = "(the coordinator was killed, its node failed, or the step took it down)"  # (fleet.control.recording)


def lost_words(t: dict, by: str, why: str | None) -> str:
    """`fleet audit`'s reason for a lost attempt (`t`: its record, which the fleet that
    found its fleet gone wrote) whose fleet `by` found gone, as events.jsonl says (the
    finder's fleet_gone); where that fleet wrote its own fleet_down after all (`why`, its
    reason: it was only held up, a suspended job, and stopped when resumed), saying so and
    quoting it. Before 2026-12-07 every such fleet was said to have been killed, its node
    failed or the step to have taken it down."""
    fleet, said = t.get("fleet"), str(t.get("reason") or "")
    found = f"was found gone by fleet {by}"
    if ") ended while it ran" in said and KILLED in said:  # (the finder's words: fleet.control.recording)
        if why:
            return said.replace(") ended while it ran", f") {found} while it ran", 1).replace(
                KILLED, f"(it was only held up: going on, it stopped its steps, saying: \"{why}\")")
        return said.replace(KILLED, f"(it {found}: the coordinator was killed, its node failed, or the step took "
                                    "it down)")
    return f"its fleet {fleet} {found}" + (f", only held up (going on, it said: \"{why}\")" if why else "") \
        + (f": {said}" if said else "")
