"""A step handed ahead is taken back for a step that comes before it in the pass's order
(fleet.core.windoworder), through the real Scheduler handlers: with the default window
a priority-1 step starts when it would with no window (`--window 0`), in the shapes of
the scheduling audit (a step of two dependencies, one that runs alone, a fan-in among
long low-priority steps, a wider one: tests/core/test_window_core.py)."""

from __future__ import annotations

import heapq

from fleet.core import states as S
from fleet.core.scheduler import NodeJoined, Scheduler, Start, StepExited, submission
from fleet.core.window import Begin, Withdraw

from coretools import node, suite  # noqa: E402

DROPPED = "withdrawn before it started"


def starts(nodes, tables, window):
    """Run the suite, every step taking its estimate and each Withdraw answered at once
    by its node (it had not begun): {step: start time}."""
    sched = Scheduler(window=window)
    for n in nodes:
        sched.handle(NodeJoined(n), 0.0)
    est = {t["id"]: t["estimate"] for t in tables}
    begun, ends = {}, []

    def act(out, now):
        todo = list(out)
        while todo:
            d = todo.pop(0)
            if isinstance(d, (Start, Begin)):
                begun[d.step] = now
                heapq.heappush(ends, (now + est[d.step], d.step))
            elif isinstance(d, Withdraw):
                todo += sched.handle(StepExited(d.step, d.attempt, S.CANCELLED, DROPPED), now)

    act(sched.handle(submission(suite(*tables).steps), 0.0), 0.0)
    while ends:
        now, sid = heapq.heappop(ends)
        act(sched.handle(StepExited(sid, 1, S.SUCCEEDED), now), now)
    assert sched.finished()
    return begun


def longs(n, seconds, priority=5):
    return [{"id": f"L{i}", "estimate": seconds, "priority": priority} for i in range(1, n + 1)]


def test_a_priority_1_step_of_two_dependencies_starts_as_without_a_window_not_after_the_steps_queued_before_it():
    # s11: H is ready at 2; with the old window it started at 7, after L2 and L3.
    tables = [{"id": "S1", "estimate": 1}, {"id": "S2", "estimate": 2},
              {"id": "H", "estimate": 1, "priority": 1, "deps": ["S1", "S2"]}] + longs(4, 5)
    without = starts([node("n1", 2)], tables, 0)
    assert without["H"] == 2.0
    assert starts([node("n1", 2)], tables, None)["H"] == 2.0


def test_a_priority_1_step_that_runs_alone_starts_as_without_a_window():
    # s13: A (concurrent = false) waits for S1 alone; with the old window it started at 5.
    tables = [{"id": "S1", "estimate": 1}, {"id": "S2", "estimate": 2},
              {"id": "A", "estimate": 1, "priority": 1, "concurrent": False, "deps": ["S1"]}] + longs(4, 3)
    without = starts([node("n1", 2)], tables, 0)
    assert without["A"] == 2.0
    assert starts([node("n1", 2)], tables, None) == without


def test_a_priority_1_merge_among_long_low_priority_steps_starts_when_its_dependencies_end():
    # s17: m waits for b1 and b2 (60 s) among forty 3600-s steps; the old window started it at 3660.
    tables = [{"id": "b1", "estimate": 60}, {"id": "b2", "estimate": 60},
              {"id": "m", "estimate": 10, "priority": 1, "deps": ["b1", "b2"]}] + longs(40, 3600)
    assert starts([node("n1", 4)], tables, 0)["m"] == 60.0
    assert starts([node("n1", 4)], tables, None)["m"] == 60.0


def test_a_ready_step_of_higher_priority_takes_the_place_of_a_queued_one_of_its_demand():
    # Two long steps run, one queued behind each (the window of a 2-core node); a
    # priority-1 step submitted then takes the latest queued one's place.
    sched = Scheduler(window=None)
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    sched.handle(submission(suite(*longs(4, 5)).steps), 0.0)
    out = sched.handle(submission(suite({"id": "H", "estimate": 1, "priority": 1}).steps), 1.0)
    assert [d.step for d in out if isinstance(d, Withdraw)] == ["L4"]
    out = sched.handle(StepExited("L4", 1, S.CANCELLED, DROPPED), 1.1)
    assert sched.state("L4") == S.READY and sched.window.after("H") == "L2"
    out = sched.handle(StepExited("L2", 1, S.SUCCEEDED), 5.0)
    assert [d.step for d in out if isinstance(d, Begin)] == ["H"]
    assert sched.window.after("L4") == "H"  # queued again after H, not ahead of it


def test_the_same_events_give_the_same_decisions_when_steps_are_taken_back_for_the_order():
    tables = [{"id": f"s{i}", "estimate": 1 + i % 5, "priority": 1 + i % 3,
               **({"deps": [f"s{i - 3}", f"s{i - 7}"]} if i > 7 else {})} for i in range(60)]
    first = starts([node("n1", 3), node("n2", 2)], tables, None)
    assert first == starts([node("n1", 3), node("n2", 2)], tables, None)
