"""An agent's Started and Exited reports: every step's two messages, handled first.

Each step that runs brings the coordinator a Started and an Exited. The agent that
sent one is looked up (fleet.control.liveness.Liveness.known), the report checked
against the step as the scheduler holds it (its attempt, its first node:
Scheduler.placed), then recorded: the `started` line, or the `exit` line, the
attempt's records and the scheduler's event. The step is looked up once: its
placement is carried from the check to the records. A report of a step its node
started before the scheduler knew goes the general way and is held
(fleet.control.early), and so does every report while such a report is held (a
step's reports keep their order).
"""

from __future__ import annotations

from fleet.control import eventlines, jobend, launching, outcomes, spanshare
from fleet.core import states as S
from fleet.core.deadline import drained_exit
from fleet.wire import fencing
from fleet.wire import messages as P

KINDS = (P.Started, P.Exited)


def report(coord, ident: bytes, msg, now: float) -> None:
    """A Started or Exited (`msg`) from the agent `ident`: checked and recorded."""
    agent = coord.liveness.known(ident, msg)
    if agent is None:
        return
    node = agent.node
    view = None if coord.early.held else coord.sched.placed(msg.step)  # (None: not running)
    if view is None:
        if launching.reported(coord, node, msg, now):  # held (fleet.control.early)
            return
        view = coord.sched.placed(msg.step)
    if type(msg) is P.Started:
        started(coord, node, msg, now, view)
    else:
        exited(coord, node, msg, now, view, agent.clock_ahead)


def started(coord, node: str, msg: P.Started, now: float, view) -> None:
    """A step's process started: its `started` line, if the report is of the attempt
    that runs there now (`view`: Scheduler.placed; None, it runs nowhere)."""
    if view is None or view.attempt != msg.attempt or not view.placement or view.placement[0].node != node:
        coord.transport.warn("stale started",
                             f"dropped a start report of {msg.step!r} attempt {msg.attempt} from {node}")
        return
    coord.events.write_encoded((eventlines.started(coord.events.fleet, now, node, msg),))


def exited(coord, node: str, msg: P.Exited, now: float, view, ahead: float | None = None) -> None:
    """A step's attempt ended: its `exit` record and, after the scheduler's event (what it
    frees is decided and launched first), its attempt's records (`view` as for started;
    `ahead`: how far its node's clock is ahead of ours, fleet.control.nodeclock, looked
    up if not given: its end, on that clock, is brought to ours for the report lag)."""
    if ahead is None:
        ahead = coord.liveness.clock_ahead(node)
    if view is None or view.attempt != msg.attempt or (view.placement and view.placement[0].node != node):
        coord.transport.warn("stale exit", f"dropped a stale exit report of {msg.step} attempt {msg.attempt}")
        return
    if msg.disk_full is not None and not coord.stopping:  # its set-up found the disk full: start nothing more
        coord.drain.disk_full(node, msg.step, msg.disk_full, now)
    if msg.error and fencing.UNHEARD in msg.error:  # its agent stopped it, we silent (node.jobend): the last?
        jobend.last_gone(coord, node, now)
    if msg.outcome == S.INTERRUPTED and not coord.stopping:  # its agent got a signal: the job ends (node.jobend)
        coord.drain.outside(f"the batch job is ending (the agent on {node} was stopped by a signal)", now)
    # Stopped with the fleet, or by the drain: interrupted (a timeout, an out_of_memory or a
    # `fleet cancel` the drain found keeps its outcome: fleet.core.deadline).
    d = coord.drain
    if (coord.stopping and msg.outcome != S.SUCCEEDED) or (d.drained and drained_exit(coord.sched, msg.step,
                                                                                     msg.outcome, d.full)):
        coord._interrupt(node, msg, view, now)
        return
    if msg.error and len(view.placement) > 1:  # a spanning step's memory limit was its share (spanshare)
        msg = spanshare.reworded(msg, view, coord.sched.spec_of(msg.step))
    rec = outcomes.written(coord.events, now, node, msg, view, coord.sched)  # the `exit` record, by shape
    coord.liveness.last_report = (now, msg.ended_at - ahead)  # how late reports are read (status), on our clock
    # Decide and launch what this exit frees first; the files that record it come
    # after, off the path between one step's end and the next one's start. (The
    # done marker still precedes the claim's release, which other fleets rely on.)
    # The definition that ran: the scheduler's, taken before it hears of the exit (a
    # newer one submitted meanwhile replaces it then, and is coord.specs' already).
    spec = coord.sched.spec_of(msg.step)
    coord.intake.children.exited(msg, rec, now)  # after its children are in (control/children)
    coord.recorder.exited(node, msg, rec, spec)
