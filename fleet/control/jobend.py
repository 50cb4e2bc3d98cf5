"""The coordinator's side of a job ended under the fleet (the node's: fleet.node.jobend).

A cancelled job (scancel, qdel), or one that reaches its time limit with no warning
signal asked for, gets SIGTERM in every process at about the same moment. The
coordinator may get it too (then it stops, and what ends meanwhile is interrupted:
coordinator._interrupt); where the batch system does not track it (Slurm's
proctrack/linuxproc, with the coordinator started by `fleet up` in the batch step
and detached) it hears only its agents: their interrupted exits and their goodbyes
naming the signal. Either of those drains the fleet (Drain.outside): nothing more
starts, what ends is interrupted (no attempt used), what never started is
`not_started`, and `fleet run` exits 3, as at the allocation's end.

Two more rules make that hold:
- A node lost while the fleet drains (its agent said goodbye, or went silent) takes
  its running steps as interrupted, each recorded ("its agent did not report its end"),
  not lost: their exits can no longer come, and a lost attempt would count.
- A fleet whose agents are all gone, with its launcher's processes ended (so none can
  come back: srun, mpiexec or the local agents exited), stops: drained first, so a
  `fleet run` following it hears how its suite ended, then down after LINGER_S. Before
  this rule such a coordinator, detached from the job, outlived it for good.
"""

from __future__ import annotations

import logging

from fleet.control import foundgone, outcomes
from fleet.wire import events, fencing
from fleet.core import states as S
from fleet.core.decisions import NodeLost, StepExited

log = logging.getLogger("fleet.control.coordinator")

LINGER_S = 5.0  # from the drain of a fleet with no agent left to its stop: clients hear the end


def said(coord, agent, msg, now: float) -> None:
    """An agent's word of its own (a P.Ok): "warned", the batch system's warning signal
    reached it (fleet.node.jobend): drain now; or "bye", it stopped."""
    if msg.what == "warned":
        if not coord.stopping:
            coord.drain.outside(f"the batch system's warning signal ({msg.signal}) reached the agent on "
                                f"{agent.node}", now, planned=True)
        return
    bye(coord, agent, msg.signal, now, msg.zygote, msg.steps)


def bye(coord, agent, signal: str, now: float, zygote: str = "", ran=()) -> None:
    """An agent said goodbye (P.Ok "bye"); `signal`: the one that stopped it, if any;
    `zygote`: how its zygote died under it, if it did, running the steps `ran`."""
    if signal and not coord.stopping:  # before the loss: its steps are interrupted, not lost
        coord.drain.outside(f"the batch job is ending (the agent on {agent.node} was stopped by {signal})", now)
    said = f"the agent stopped: its fork server (zygote) {zygote}" if zygote else "the agent stopped on its own"
    if coord.liveness.left(agent, now, coord.stopping or not coord.sched.pool.has(agent.node), said):
        why = f"the agent on {agent.node} stopped on its own"
        if zygote and not coord.drain.drained:
            why = zygote_died(coord, agent.node, zygote, ran, now)
        lost(coord, agent.node, why, now)
    coord.markers.gone(agent.node)


def zygote_died(coord, node: str, how: str, ran, now: float) -> str:
    """A node's zygote died under its agent (`how`: "was killed by SIGKILL"), which left
    the fleet: the reason its node is lost, for the steps it ran. A step that ran there
    alone is the likely killer (the zygote is its parent: `kill $PPID`): its attempt
    fails, not retried (each retry would take another node), its reason saying so.
    Of several, which one did it, if one did, is not known: each is lost as before
    (retried elsewhere), the reason naming the zygote's death and the others."""
    ran = {(s, a) for s, a in ran}
    views = [v for v in coord.sched.running_on(node) if (v.id, v.attempt) in ran and v.state == S.RUNNING]
    if len(views) == 1:
        v = views[0]
        why = (f"its node's fork server (zygote) {how} while this step ran, alone on {node}: likely by this step "
               f"(the zygote is its parent process, $PPID); not retried, since each retry would take another node")
        coord.events.write(events.Exit(t=now, step=v.id, attempt=v.attempt, node=node, outcome=S.FAILED, reason=why))
        coord.recorder.record_attempt(coord.run_dir, v.id, coord.fleet_id, v.attempt,  # (as a lost one's)
                                      {"outcome": S.FAILED, "reason": why, "ended_at": now})
        coord._inbox.append((StepExited(v.id, v.attempt, S.FAILED, why, final=True), now))  # (before the loss)
        return f"the agent on {node} stopped: its fork server (zygote) {how} while {v.id} ran there alone"
    names = ", ".join(v.id for v in views)
    return (f"the agent on {node} stopped: its fork server (zygote) {how}"
            + (f" while {names} ran there (which, if any, did it is not known)" if views else ""))


def lost(coord, node: str, reason: str, now: float, later: bool = False, fence: bool = False) -> None:
    """Tell the scheduler `node` is lost (`later`: at the next turn, through the inbox);
    `fence`: its agent did not say it stopped its steps (it went silent, or could not be
    reached), so they run elsewhere only once it must have (fleet.core.fencing);
    while the fleet drains, its running steps are recorded interrupted first (see the
    module doc)."""
    if coord.drain.drained and not coord.stopping:
        why = coord.drain.why()
        # Exits recorded already whose event waits for the scheduler (the turn's time was
        # up): their step's end is written, and must not be written twice.
        waiting = {ev.step for ev, _ in coord._inbox if type(ev) is StepExited}
        for v in coord.sched.running_on(node):
            if v.id in coord.interrupted or v.id in waiting:  # its exit came (the scheduler hears of it soon)
                continue
            coord.interrupted.add(v.id)
            rec = outcomes.unreported_interrupted(now, v, why)
            coord.events.write(rec)
            coord.submissions.ended(v.id, S.INTERRUPTED, v.attempt, rec.reason, final=True)
            # (Not fed as an exit: one would hand its node's queued step the cores, as if the
            # node had started it; the loss puts that one back, and ends this one interrupted.)
            coord.drain.release(v.id)
    hold = fencing.relaunch_after(coord.heartbeat_s, coord.timeout_s) if fence and not coord.drain.drained else 0.0
    if hold and coord.sched.running_on(node):
        log.error("the steps that ran on %s run elsewhere in %.1f s, once its own side must have stopped them",
                  node, hold)
    if later:
        coord._inbox.append((NodeLost(node, reason, hold), now))
    else:
        coord._feed(NodeLost(node, reason, hold), now)


# Why a fleet with no agent left drains, and stops (its fleet_down's reason): not "the
# batch job is ending", as it said before 2026-12-06. A job's end that reached the agents
# drained the fleet before (their goodbyes name the signal); this is every agent gone
# without one (killed, a node's crash), and nobody stopped the fleet.
ORPHANED = "every node was lost: every agent is gone, and none can come back (the launcher's processes ended)"


class Orphan:
    """Whether the fleet has no agent left and none can come (asked once a heartbeat:
    `tick`); then it drains, and stops LINGER_S later."""

    def __init__(self, coord):
        self.coord = coord
        self.stop_at: float | None = None
        self.stopped = False  # the fleet stopped for it (not asked to)

    def tick(self, now: float) -> None:
        c = self.coord
        if self.stop_at is not None:
            if now >= self.stop_at and not c.stopping:
                log.error("%s: the fleet stops", ORPHANED)
                c.stopping = self.stopped = True
            return
        if not c.ready or c.stopping or c.liveness.any_alive() or not getattr(c.launcher, "ended", bool)():
            return
        c.drain.outside(ORPHANED, now)
        self.stop_at = now + LINGER_S

    def why(self) -> str | None:
        """The reason its fleet_down record gives: why the fleet stopped itself (None: asked
        to); also for a fleet that stopped because another found it gone (fleet.control.foundgone)."""
        if (gone := foundgone.down_why(self.coord.recorder)) is not None:
            return gone
        return f"{ORPHANED}; the fleet stopped itself" if self.stopped else None
