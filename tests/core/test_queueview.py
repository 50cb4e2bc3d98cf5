"""Why ready steps have not started, as `fleet status` lists them (fleet.core.queueview):
the first step of each class of demand, the reservations and the steps the allocation's
end held back, built through the real Scheduler handlers."""

from __future__ import annotations

from fleet.core import waits as W
from fleet.core.deadline import HELD_LISTED, AllocationEnds
from fleet.core.scheduler import NodeJoined, Scheduler, StepExited, submission

from coretools import node, suite  # noqa: E402


def fleet_of(cores: int, *tables, reserve_after=600.0):
    sched = Scheduler(reserve_after)
    sched.handle(NodeJoined(node("n1", cores)), 0.0)
    sched.handle(submission(suite(*tables).steps), 0.0)
    return sched


def narrow(i, est=10.0, **kw):
    return {"id": f"n{i}", "estimate": est, **kw}


def test_each_kind_of_waiting_step_is_listed_once_with_its_reason_and_how_many_wait_behind_it():
    sched = fleet_of(4, *(narrow(i) for i in range(10)), {"id": "wide", "cores": 3, "priority": 1},
                     {"id": "wide2", "cores": 3, "priority": 1}, {"id": "wide3", "cores": 3, "priority": 1},
                     reserve_after=None)
    assert sched.state("wide") == sched.state("n0") == "running"
    heads = sched.waiting_heads(now=7.5, limit=50)
    # In pass order: the three-core class (priority 1), then the one-core class.
    assert [(h.step, h.behind) for h in heads] == [("wide2", 1), ("n1", 8)]
    wide, one = heads
    # (as free now: wide2 was tried while n0 had not started, and 1 core was free then)
    assert (wide.cause, wide.reason) == (W.CORES, "needs 3 cores, 0 free")
    assert wide.ready_s == 7.5
    assert one.cause == W.CORES and one.reason == "needs 1 core, 0 free"


def test_the_list_is_bounded_by_its_limit_not_by_the_ready_steps():
    sched = fleet_of(30, {"id": "all", "cores": 30, "estimate": 10},
                     *({"id": f"w{c}", "cores": c} for c in range(2, 30)))
    heads = sched.waiting_heads(now=1.0, limit=5)
    assert sched.counts()["ready"] == 28
    assert [h.step for h in heads] == ["w2", "w3", "w4", "w5", "w6"]  # setup order, of equal priority


def test_a_step_held_back_by_a_reservation_names_it_and_the_reservation_is_listed():
    sched = fleet_of(4, narrow(0), narrow(1), narrow(2, 20.0), narrow(3, 20.0), reserve_after=0.0)
    sched.handle(submission(suite({"id": "wide", "cores": 4, "priority": 1, "estimate": 5},
                                  {"id": "long", "estimate": 50}).steps), 1.0)
    sched.handle(StepExited("n0", 1, "succeeded"), 10.0)
    [res] = sched.reservations()
    assert (res.step, res.cores, res.expected_start) == ("wide", 4, 20.0)
    assert res.held_cores == 1
    by_step = {h.step: h for h in sched.waiting_heads(now=10.0, limit=50)}
    assert by_step["long"].cause == W.RESERVED
    assert "held back by a reservation for wide" in by_step["long"].reason


def test_steps_the_allocations_end_held_back_are_named_first_come_and_counted_all():
    many = HELD_LISTED + 5
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 64)), 0.0)
    sched.handle(AllocationEnds(end=1000.0, drain_at=700.0, source="given"), 0.0)
    sched.handle(submission(suite(*({"id": f"long{i}", "estimate": 5000} for i in range(many)),
                                  {"id": "short", "estimate": 5}).steps), 0.0)
    shown = sched.deadline.shown()
    assert shown["held"] == many
    assert [h["step"] for h in shown["held_steps"]] == [f"long{i}" for i in range(HELD_LISTED)]
    assert shown["held_steps"][0]["reason"] == "expected to take 5000 s (estimate), 700 s left before the drain point"
    assert sched.state("short") == "running"


def test_a_first_step_not_tried_since_those_before_it_were_handed_ahead_says_what_it_lacks_now():
    sched = Scheduler(None, window=None)  # each node is handed as many steps ahead as it has cores
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    sched.handle(submission(suite(*(narrow(i) for i in range(6))).steps), 0.0)
    assert [sched.state(f"n{i}") for i in range(6)] == ["running"] * 2 + ["queued"] * 2 + ["ready"] * 2
    assert sched.view("n4").why is None  # never tried: its class was blocked when it came first
    [head] = sched.waiting_heads(now=1.0, limit=50)
    assert (head.step, head.cause, head.reason, head.behind) == ("n4", W.CORES, "needs 1 core, 0 free", 1)


def test_after_the_drain_the_steps_left_are_given_the_drains_reason_and_counted_not_started():
    # (before, a step tried while the cores were busy was said short of them, or of memory, on idle nodes)
    from fleet.core.deadline import DrainNow
    sched = fleet_of(2, {"id": "a", "cores": 2}, {"id": "b", "cores": 2}, {"id": "c", "cores": 2},
                     {"id": "d", "deps": ["a"]})
    sched.handle(DrainNow("the drain point, 300 s before the end"), 5.0)
    sched.handle(StepExited("a", 1, "terminated"), 6.0)
    [head] = sched.waiting_heads(now=10.0, limit=50)
    assert (head.step, head.behind, head.cause) == ("b", 1, W.DEADLINE)
    assert head.reason == "not started: drained (the drain point, 300 s before the end); the next run runs it"
    from fleet.core.deadline import as_counted
    assert as_counted(sched.counts(), sched.deadline.drained) == {"interrupted": 1, "not_started": 3}
    assert as_counted({"ready": 2, "running": 1}, False) == {"ready": 2, "running": 1}
