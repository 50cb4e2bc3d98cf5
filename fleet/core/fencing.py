"""A lost node's steps run elsewhere only once its own side must have stopped them.

Why. A node cut off from the coordinator (its network down, or only one way) is lost
after the heartbeat timeout. Its agent, hearing nothing, stops its steps on its own
(fleet.node.agent: at its fence, 3/4 of the timeout without word, SIGTERM, then SIGKILL
after its grace). Until 2026-12-07 the scheduler retried a lost node's steps the moment
the node was lost, while a step slow to die (a trap on SIGTERM, an MPI launcher, a
checkpoint on SIGTERM) still ran there: the same step ran twice at once, for up to
half a second, writing the same work directory (seen with real network partitions).

The rule. A NodeLost with `fence_s` > 0 takes the node's resources at once (nothing more
is placed there; a step that no longer fits anywhere is reported now) and closes its
running steps to the window (nothing is queued behind them), but holds the rest: its
running steps stay running there, its queued steps queued, until `fence_s` after the
loss, by when the node's own stop must be complete (the shell computes it:
fleet.wire.fencing.relaunch_after). Then, at the shell's Fenced event (its timer asks
`due()`), they end lost and are retried elsewhere, and its queued steps are ready
again, as they were at once before. With `fence_s` 0 (the agent said goodbye, having
stopped its steps) or once the fleet drains (nothing starts again) nothing is held;
a drain ends every hold (its steps end lost, as before the drain, which then starts
none of them again).

Deterministic: the end is the loss's time plus `fence_s`, the wake-up an event with
its time. Cost: a heap push per lost node, and a peek per loop turn; nothing per step.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from fleet.core import states as S
from fleet.core.decisions import Ignored, StepExited, Unrunnable
from fleet.core.jobs import take_out


@dataclass(frozen=True)
class Fenced:
    """Event: the first lost node's hold has ended by now (the shell's timer, at
    Fencing.due()): its steps end lost and run elsewhere."""


class Fencing:
    """The lost nodes whose steps are held, with when each hold ends."""

    def __init__(self) -> None:
        self._ends: list[tuple[float, int, str, str, tuple]] = []  # (end, order, node, reason, (step, attempt)...)
        self.nodes: dict[str, float] = {}  # node -> when its hold ends
        # step -> the holds it is in: a step over several lost nodes (span, MPI) ends at
        # the last of their holds, not at the first, nor at another of its nodes' loss
        # with no hold (its goodbye) while its first node may still run it.
        self.held: dict[str, int] = {}
        self._n = 0

    def due(self) -> float | None:
        """When the shell is to feed Fenced next (epoch seconds); None: nothing held."""
        return self._ends[0][0] if self._ends else None

    def hold(self, node: str, until: float, reason: str, victims: tuple) -> None:
        self._n += 1
        heapq.heappush(self._ends, (until, self._n, node, reason, victims))
        self.nodes[node] = until
        for sid, _ in victims:
            self.held[sid] = self.held.get(sid, 0) + 1

    def take(self, now: float, node: str | None = None) -> list[tuple[str, str, tuple]]:
        """The holds ended by `now` in their order, and then `node`'s, whenever it ends:
        (node, reason, its steps in no other hold, which end now)."""
        done = []
        while self._ends and self._ends[0][0] <= now:
            _, _, n, reason, victims = heapq.heappop(self._ends)
            self.nodes.pop(n, None)
            done.append((n, reason, self._out(victims)))
        if node is not None and self.nodes.pop(node, None) is not None:  # (rare: a heap as long as the holds)
            entry = next(e for e in self._ends if e[2] == node)
            self._ends.remove(entry)
            heapq.heapify(self._ends)
            done.append((entry[2], entry[3], self._out(entry[4])))
        return done

    def _out(self, victims: tuple) -> tuple:
        """victims, a hold of theirs ended: those in no other hold."""
        held, last = self.held, []
        for v in victims:
            k = held.get(v[0], 0) - 1
            if k > 0:
                held[v[0]] = k
            else:
                held.pop(v[0], None)
                last.append(v)
        return tuple(last)


def lost(sched, ev, now: float, out: list) -> None:
    """A NodeLost: its resources go now; its steps end lost now, or at its hold's end."""
    if not sched.pool.has(ev.node):
        out.append(Ignored(f"loss of unknown node {ev.node!r}"))
        return
    on = sched._on_node.get(ev.node, ())
    victims = tuple((j.spec.id, j.attempt) for j in sorted((sched._jobs[s] for s in on), key=lambda j: j.seq))
    if ev.fence_s <= 0 or sched.deadline.drained or not (victims or sched.window.count.get(ev.node)):
        sched.window.lost(ev.node, ev.reason, out)  # before the victims: none of them starts now
        _gone(sched, ev.node)
        held = sched.fencing.held  # (a step held for another of its nodes ends with that hold)
        _end(sched, tuple(v for v in victims if v[0] not in held) if held else victims, ev.reason, now, out)
    else:
        window = sched.window
        for sid, _ in victims:  # nothing more is queued behind them there, nor behind those queued there
            window._close(sched._jobs[sid])
            succ = window.next.get(sid)
            if succ is not None:
                for job in window._chain_of(succ):
                    window._close(job)
        sched.fencing.hold(ev.node, now + ev.fence_s, ev.reason, victims)
        _gone(sched, ev.node)
    _unfit(sched, ev.node, out)


def rejoining(sched, node: str) -> None:
    """`node` joins again (after its own hold, settle()) while steps that ran there are
    still held for another of their nodes (a span, an MPI step): their part there went
    with the old node, so it is taken out of their placement, not given back to the new
    one when they end (its cores, GPUs and memory handed out twice)."""
    on = sched._on_node.get(node)
    if not on:
        return
    for sid in on:
        job = sched._jobs[sid]
        job.placement = tuple(s for s in job.placement if s.node != node)
    on.clear()


def settle(sched, now: float, out: list, node: str | None = None, every: bool = False) -> None:
    """The holds ended by `now` (`node`'s too: it joins again, and its cores are to come
    back only once its old steps gave theirs to no one; `every` one: the fleet drains,
    nothing starts again): as a loss without one."""
    for n, reason, victims in sched.fencing.take(math.inf if every else now, node):
        sched.window.lost(n, reason, out)
        _end(sched, victims, reason, now, out)
        if node is None:  # (one that joins again fits what it did: not judged before it is back)
            _unfit(sched, n, out)


def _gone(sched, node: str) -> None:
    sched.pool.remove(node)
    sched._capacity = None


def _end(sched, victims: tuple, reason: str, now: float, out: list) -> None:
    for sid, attempt in victims:  # (one that ended otherwise meanwhile, cancelled: Ignored)
        sched._exited(StepExited(sid, attempt, S.LOST, reason), now, out)


def _unfit(sched, node: str, out: list) -> None:
    """Widths stay as decided; a step that can no longer fit anywhere is reported (not
    once drained: nothing starts anyway, and the steps left are not_started)."""
    unfit = {} if sched.deadline.drained else sched._pending.unfit(sched.capacity())  # once per demand
    if not unfit:
        return
    gone = [j for j in sched._jobs.values() if j.state in (S.WAITING, S.READY) and j.demand in unfit]
    take_out(sched._classes, [j for j in gone if j.state == S.READY], sched._quiet.changed)
    for job in (j for j in gone if j.state in (S.WAITING, S.READY)):  # not blocked meanwhile
        sched._set(job, "impossible")
        out.append(Unrunnable(job.spec.id, f"after losing {node}: {unfit[job.demand]}", after_loss=True))
        sched._block_descendants(job, job.spec.id, out)
