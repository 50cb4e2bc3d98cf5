"""The coordinator's side of a zygote its agent restarted (the node's: fleet.node.rezygote).

The agent's ``Ok("restarted")`` names how its zygote died and the [step, attempt] of
each step that had started in it, all ended by then (their processes killed). Each is
ended here as a node's loss would end it, but the node stays: a step that ran there
alone fails, not retried (the zygote is its parent: likely the killer,
fleet.control.jobend.zygote_died); of several, each is lost (retried as a lost step is),
its reason naming the zygote's death and the others. The launches the dead zygote had
not started are the agent's to hand the new one: their steps stay as they are here.
A step named that is queued here on that node (not running: its predecessor's end had
not come) may have started there unheard, and no new zygote is handed it: it is taken
back first (ready again as its next attempt, counted against no retry, an ``unqueued``
record saying it may have started: fleet.core.unsure), as a node's loss takes back its
queued steps; before 2026-12-06 it stayed queued, was promoted at its predecessor's end,
and ran nowhere: the run hung; before 2026-12-07 it ran again as the same attempt.
The restart is logged and recorded (a ``zygote_restarted`` node event).
"""

from __future__ import annotations

import logging

from fleet.core import states as S
from fleet.core.decisions import Exits, StepExited
from fleet.wire import events

log = logging.getLogger("fleet.control.coordinator")


def restarted(coord, agent, msg, now: float) -> None:
    """Agent ``agent`` restarted its zygote (``msg``: its P.Ok "restarted")."""
    node, how = agent.node, msg.zygote
    agent.restarts += 1
    ran = {(s, a) for s, a in msg.steps}
    back = take_back(coord, node, how, ran)  # (first: none of them is promoted as the steps below end)
    views = [v for v in coord.sched.running_on(node) if (v.id, v.attempt) in ran and v.state == S.RUNNING]
    log.warning("the fork server (zygote) on %s %s; its agent started a new one (pid %d, restart %d)%s",
                node, how, msg.pid, agent.restarts,
                f": ended {', '.join(v.id for v in views)}" if views else "")
    coord.events.write(events.ZygoteRestarted(t=now, node=node, reason=how, zygote_pid=msg.pid,
                                              restarts=agent.restarts, steps=[v.id for v in views]))
    if len(views) == 1:
        v = views[0]
        why = (f"its node's fork server (zygote) {how} while this step ran, alone on {node}: likely by this step "
               f"(the zygote is its parent process, $PPID); not retried (each retry could kill a fork server "
               f"again); the node started a new one")
        coord.events.write(events.Exit(t=now, step=v.id, attempt=v.attempt, node=node, outcome=S.FAILED, reason=why))
        coord.recorder.record_attempt(coord.run_dir, v.id, coord.fleet_id, v.attempt,
                                      {"outcome": S.FAILED, "reason": why, "ended_at": now})
        coord._feed(Exits((*back, StepExited(v.id, v.attempt, S.FAILED, why, final=True))), now)
        return
    names = ", ".join(v.id for v in views)
    why = (f"its node's fork server (zygote) {how} while {names} ran on {node} (which, if any, did it is not "
           f"known); the node started a new one")
    # (a lost end's records are the coordinator's: Finished) One pass after them all: nothing is
    # queued behind a step that ends in this batch, nor behind one taken back.
    if back or views:
        coord._feed(Exits((*back, *(StepExited(v.id, v.attempt, S.LOST, why) for v in views))), now)


def take_back(coord, node: str, how: str, named: set) -> list[StepExited]:
    """The lost exits that take back the steps ``named`` that are queued on ``node``
    (ready again: fleet.core.window.Window.dropped), each chain's tail first."""
    sched = coord.sched
    queued = {}
    for step, attempt in named:  # (the steps of one node's dead zygote: a few)
        placed = sched.queued(step)
        if placed is not None and placed.attempt == attempt and placed.placement[0].node == node:
            queued[step] = attempt
    if not queued:
        return []
    why = f"its node's fork server (zygote) {how} before its start was heard; {node} started a new one"
    log.warning("the fork server (zygote) on %s %s: took back %s, queued there", node, how, ", ".join(sorted(queued)))
    return [StepExited(s, queued[s], S.LOST, why) for s in sorted(queued, key=lambda s: -_depth(sched, s))]


def _depth(sched, step: str) -> int:
    """How many queued steps ``step`` waits behind in its chain (fleet.core.windowchain)."""
    n, pred = 0, sched.window.after(step)
    while pred is not None and sched.state_of(pred) == S.QUEUED:
        n, pred = n + 1, sched.window.after(pred)
    return n
