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
- A coordinator whose loop did not run for its agents' fence or longer (SIGSTOP, a
  suspended job, starved of the CPU) has lost every agent: each stopped its steps and
  leaves after the fence without word from it (fleet.node.agent). It drains the moment
  it runs again (`frozen`), before it reads what they sent (the steps they stopped, their
  goodbyes), with a reason that starts with NODES_LOST: their steps are interrupted, not
  `terminated` (no attempt used, nothing final written), nothing becomes `unrunnable`
  for want of nodes, the rest is `not_started`, and `fleet run` exits 5 (bring a fleet up
  again). Likewise the last agent leaving on its own (no signal, its zygote alive: a freeze
  a little shorter than the fence, measured short by a heartbeat at most) drains the
  fleet before its loss. Before 2026-12-07 the steps they stopped were counted as
  attempts, `terminated` ("killed by SIGKILL"), the others `unrunnable` ("the allocation
  has no nodes"), and `fleet run` exited 1.
"""

from __future__ import annotations

import logging
import time

from fleet.control import foundgone, outcomes
from fleet.control.drain import NODES_LOST
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
    if not (signal or zygote):
        last_gone(coord, agent.node, now)
    said = f"the agent stopped: its fork server (zygote) {zygote}" if zygote else "the agent stopped on its own"
    if coord.liveness.left(agent, now, coord.stopping or not coord.sched.pool.has(agent.node), said):
        why = f"the agent on {agent.node} stopped on its own"
        if zygote and not coord.drain.drained:
            why = zygote_died(coord, agent.node, zygote, ran, now)
        lost(coord, agent.node, why, now)
    coord.markers.gone(agent.node)


def last_gone(coord, node: str, now: float) -> None:
    """The agent on `node` stopped on its own (its goodbye, with no signal; or an exit
    saying it stopped the step for the coordinator's silence: fencing.UNHEARD): if it was
    the last, drain before its node is lost (see the module doc). (The look for another
    live agent ends at the first found: at once while most are alive.)"""
    c = coord
    if c.stopping or c.drain.drained or not c.ready or not c.sched.pool.has(node):
        return
    agent = c.liveness.agents.get(node)
    if agent is not None and agent.alive and not any(a.alive for a in c.liveness.agents.values() if a is not agent):
        c.drain.outside(f"{NODES_LOST}: every agent has stopped, the last (on {node}) on its own, as agents do "
                        f"without word from the coordinator", now)


def woke(coord) -> float:
    """The loop's poll returned: Liveness.listening_ended (its time, returned), then `frozen`."""
    began = coord.liveness.listening_ended()
    frozen(coord, time.time())
    return began


def frozen(coord, now: float) -> None:
    """Drain now if the loop did not run for its agents' fence or longer (see the module
    doc): each of them has stopped its steps and is leaving. Asked as the loop runs
    again, before anything an agent sent is read (and before a beat reads it)."""
    # How long its agents have had no word from it: the loop's stall, but no longer than
    # since its last heartbeat went out (a long turn beats in its middle: its agents heard
    # that, and a stall of the whole turn would drain a fleet whose agents live).
    stalled = min(coord.liveness.stalled_for(), time.monotonic() - coord.liveness.beat_sent)
    fence = fencing.fence_s(coord.timeout_s)
    if stalled < fence or coord.stopping or not coord.ready or (coord.drain.drained and not coord.drain.full):
        return
    # Held up that long, another fleet may have found it gone and run its steps: then it
    # records nothing, its drain neither (fleet.control.foundgone). Looked at first, as a
    # turn's start does: a freeze in the middle of a turn wakes here before that.
    coord.recorder.stand(time.monotonic())
    if coord.stopping:
        return
    log.error("the coordinator did not run for %.1f s, longer than its agents wait for word from it (%.1f s): "
              "they have stopped their steps and leave", stalled, fence)
    coord.drain.outside(f"{NODES_LOST}: its coordinator did not run for {stalled:.1f} s (stopped, or starved of "
                        f"the CPU), and its agents stop their steps and leave after {fence:g} s without word from "
                        f"it", now)


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
        if not self.stopped:
            return None
        why = self.coord.drain.reason  # (a frozen coordinator's drain says why every node went: `frozen`)
        return f"{why if why.startswith(NODES_LOST) else ORPHANED}; the fleet stopped itself"
