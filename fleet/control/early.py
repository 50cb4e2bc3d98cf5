"""Reports of steps their node started before the scheduler knew (a node's window,
fleet.core.window).

A step handed ahead starts on its node the moment its predecessor is reaped, and the
node reports the predecessor's Exited and the step's Started in one batch. The
coordinator reads that batch while it drains its agents, when the predecessor's exit
only joins the inbox: the loop hands a turn's exits to the scheduler together, in one
pass (fleet.control.turns). So the step is still QUEUED to the scheduler when its
Started is read, and often its Exited too.

Such a report is held here, with every later report of the same step (a step's Exited
never comes before its Started), and handed to the coordinator's handlers once the
scheduler runs the step: after the loop's pump has handed it the inbox (replay), once
per pump, within the turn's time as the pump's own work is (a pass that makes
thousands of queued steps run at once, as at 10,000 nodes, hands their reports on over
several turns, not in one stall). A report of a step no longer queued then is handled as
it would have been on arrival; one whose step left its node's window without starting
(the node was lost) is dropped as stale there.

Before, each such report handed the scheduler the inbox up to the predecessor's exit
on the spot, one event at a time: a scheduling pass per queued step's Started, which
at a full pool is one pass per step (benchmarks/README.md, "Reports of queued steps
held for the turn's pass").
"""

from __future__ import annotations

import time
from collections import deque

from fleet.core import states as S
from fleet.wire import messages as P

CHECK = 64  # reports handed between two looks at the clock


class Early:
    """One coordinator's held reports, in the order they came."""

    __slots__ = ("held", "steps", "cut", "seen")

    def __init__(self) -> None:
        self.held: deque = deque()  # (node, report, time received)
        self.steps: dict[str, int] = {}  # step -> its reports held
        self.cut = False  # the last replay stopped at its time with reports it could hand
        self.seen = -1  # the scheduler's count of events applied at the last replay

    def __bool__(self) -> bool:
        return bool(self.held)

    def hold(self, sched, node: str, msg, now: float) -> bool:
        """Keep a Started or Exited (`msg`, from `node`) of a step still QUEUED there, or
        of a step with a report kept already; True if kept (False: handle it now)."""
        step = msg.step
        if step not in self.steps:
            view = sched.queued(step)  # (None: not queued, the common case)
            if view is None or view.attempt != msg.attempt or view.placement[0].node != node:
                return False
        self.held.append((node, msg, now))
        self.steps[step] = self.steps.get(step, 0) + 1
        return True

    def replay(self, sched, started, exited, failed, until: float | None = None) -> bool:
        """Hand the held reports of steps that are no longer queued to started(node, msg,
        now) or exited(...), in order; True if any was handed. A handler that raises is
        failed() from its except block, and the rest are handed all the same. Past
        `until` (time.monotonic(), looked at every CHECK reports handed) the rest stay
        held, in order, and `cut` says so: a turn that made thousands of queued steps run
        at once hands their reports over several turns, as the pump acts on decisions.

        A replay costs what it hands and what it keeps back, never what it leaves for the
        next turn: those wait where they are (they were copied once per turn, so a pass
        that freed 100,000 reports cost the loop time quadratic in them). And none is
        looked at while the scheduler has applied no event since the last replay that
        handed all it could: a step leaves QUEUED only by one (while a submission is
        entered, a report for each step its nodes start from their windows waits here,
        and the pump replays after every message it reads)."""
        if not self.cut and sched.handled == self.seen:
            return False
        self.seen = sched.handled
        self.cut = False
        held, steps = self.held, self.steps
        keep: list = []  # reports of steps still queued, and those behind them
        kept: set = set()
        handed = 0
        for _ in range(len(held)):
            entry = held.popleft()
            step = entry[1].step
            if step in kept or sched.state_of(step) == S.QUEUED:
                keep.append(entry)
                kept.add(step)
                continue
            if until is not None and handed % CHECK == 0 and time.monotonic() > until:
                self.cut = True
                held.appendleft(entry)  # it and the rest, in order, for the next turn
                break
            handed += 1
            left = steps[step] - 1
            if left:
                steps[step] = left
            else:
                del steps[step]
            node, msg, now = entry
            try:
                (started if type(msg) is P.Started else exited)(node, msg, now)
            except Exception:  # a bug must not lose the reports after it
                failed()
        held.extendleft(reversed(keep))  # they came first: ahead of the rest
        return handed > 0
