"""A node's window does not pass a node's resources from step to step of one demand
while an earlier ready step of another demand could take them (fleet.core.windowfair),
through the real Scheduler handlers: the reportscale audit's finding 4, small. Steps of
a later submission (1 core, default memory) were handed ahead behind each other, hand
to hand, and the earlier submission's 1-core steps with a memory figure never started."""

from __future__ import annotations

import heapq
from pathlib import Path

from fleet.core import states as S
from fleet.core.scheduler import NodeJoined, Scheduler, Start, StepExited, submission
from fleet.core.suite import parse_suite
from fleet.core.window import Begin, Queue, Withdraw

from coretools import node  # noqa: E402

MiB = 2**20
DROPPED = "withdrawn before it started"


def suite_at(path: str, *tables: dict):
    for t in tables:
        t.setdefault("command", "x")
    return parse_suite({"steps": list(tables)}, Path(path))


class Run:
    """A scheduler driven as a fleet would be: each step takes its estimate, each
    Withdraw answered at once by its node (it had not begun)."""

    def __init__(self, nodes, window, reserve_after=600.0):
        self.sched = Scheduler(reserve_after=reserve_after, window=window)
        self.est, self.begun, self.ends, self.queued = {}, {}, [], []
        for n in nodes:
            self.sched.handle(NodeJoined(n), 0.0)

    def submit(self, path, tables, now):
        self.est.update({t["id"]: t["estimate"] for t in tables})
        self.act(self.sched.handle(submission(suite_at(path, *tables).steps), now), now)

    def act(self, out, now):
        todo = list(out)
        while todo:
            d = todo.pop(0)
            if isinstance(d, (Start, Begin)):
                self.begun[d.step] = now
                heapq.heappush(self.ends, (now + self.est[d.step], d.step))
            elif isinstance(d, Queue):
                self.queued.append((now, d.step, d.after))
            elif isinstance(d, Withdraw):
                todo += self.sched.handle(StepExited(d.step, d.attempt, S.CANCELLED, DROPPED), now)

    def until(self, t):
        while self.ends and self.ends[0][0] <= t:
            now, sid = heapq.heappop(self.ends)
            self.act(self.sched.handle(StepExited(sid, 1, S.SUCCEEDED), now), now)


def audit_shape(window, reserve_after=600.0):
    """Two one-core nodes. Submission 1: four 10-s steps, then O1, O2 (1 core, 64 MiB);
    submission 2 at t=5: six 10-s steps of 1 core and default memory. {step: start}."""
    run = Run([node("n1", 1), node("n2", 1)], window, reserve_after)
    first = [{"id": f"X{i}", "estimate": 10} for i in range(1, 5)]
    first += [{"id": f"O{i}", "estimate": 10, "memory": 64 * MiB} for i in (1, 2)]
    run.submit("/x/first.toml", first, 0.0)
    run.until(5.0)
    run.submit("/x/second.toml", [{"id": f"L{i}", "estimate": 10} for i in range(1, 7)], 5.0)
    run.until(1e9)
    assert run.sched.finished()
    return run


def test_an_earlier_ready_step_of_another_demand_is_not_passed_for_good_by_steps_handed_ahead():
    without = audit_shape(0).begun
    assert without["O1"] == without["O2"] == 20.0  # the first cores to free after X3, X4: by submission order
    run = audit_shape(None)  # (before: O1 and O2 began at 50, after every L; in the audit, never)
    assert run.begun["O1"] == 20.0, run.begun
    # O2 is handed ahead behind O1, its own demand, the moment O1 starts (X4 still runs):
    # the window's commitment, one step, as within one demand.
    assert run.begun["O2"] == 30.0 and (20.0, "O2", "O1") in run.queued
    assert not [q for q in run.queued if q[1].startswith("L") and q[0] < 20.0]  # none while O1 was ready
    assert max(run.begun.values()) == 50.0  # (as without a window: no core left idle)


def test_with_no_reservations_the_window_keeps_the_order_across_demands_too():
    assert audit_shape(None, reserve_after=None).begun["O1"] == 20.0


def test_a_step_of_another_demand_that_comes_after_is_still_handed_ahead():
    # The earlier-ordered class is the one handed ahead: X5.. of the first submission go
    # behind the running X steps, and L (later, of another demand) waits its turn.
    run = Run([node("n1", 1)], None)
    run.submit("/x/first.toml", [{"id": f"X{i}", "estimate": 10} for i in range(1, 4)], 0.0)
    run.submit("/x/second.toml", [{"id": "O1", "estimate": 10, "memory": 64 * MiB}], 1.0)
    run.until(1e9)
    assert run.begun == {"X1": 0.0, "X2": 10.0, "X3": 20.0, "O1": 30.0}
    assert [q[1] for q in run.queued] == ["X2", "X3"]
