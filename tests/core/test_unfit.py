"""Steps that no longer fit after a node is lost, and many ready steps taken out at
once - by a loss, a cancel, a resubmitted changed suite - (fleet.core.unfit,
fleet.core.jobs.take_out), through the real Scheduler handlers."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.resources import Capacity
from fleet.core.scheduler import Blocked, Cancel, Finished, NodeLost, Start, StepExited, Unrunnable, submission

from coretools import node, scheduler, suite  # noqa: E402


def of(kind, decisions):
    return [d for d in decisions if isinstance(d, kind)]


def test_a_dependent_that_no_longer_fits_either_is_blocked_by_its_unfit_dependency_not_reported_twice():
    sched, _ = scheduler([node("n1", 2), node("n2", 4)], {"id": "x", "cores": 4}, {"id": "a", "cores": 4},
                         {"id": "c", "cores": 4, "deps": ["a"]}, {"id": "d"})
    out = sched.handle(NodeLost("n2"), 1.0)
    assert [(type(d).__name__, d.step) for d in out if isinstance(d, (Unrunnable, Blocked))] == [
        ("Unrunnable", "a"), ("Blocked", "c")]
    assert sched.state("a") == S.UNRUNNABLE and sched.state("c") == S.BLOCKED and sched.state("d") == S.RUNNING


def test_losing_every_node_reports_each_pending_step_unrunnable_once_in_submission_order():
    tables = [{"id": f"s{i}", "cores": 1 + i % 3} for i in range(3000)]
    sched, out = scheduler([node("n1", 4), node("n2", 4)], *tables)
    running = {d.step for d in of(Start, out)}
    sched.handle(NodeLost("n1"), 1.0)
    last = sched.handle(NodeLost("n2"), 2.0)
    unrunnable = [d.step for d in of(Unrunnable, last)]
    pending = [t["id"] for t in tables if t["id"] not in running]
    assert unrunnable == pending  # each once, in setup order
    assert all(d.reason == "after losing n2: the allocation has no nodes" for d in of(Unrunnable, last))
    assert sched.finished() and sched.counts().get(S.READY, 0) == 0
    assert sched._classes == {}


def test_a_loss_asks_whether_a_demand_still_fits_once_per_distinct_demand_not_once_per_step(monkeypatch):
    tables = [{"id": f"s{i}", "cores": 1 + i % 2} for i in range(5000)]
    sched, _ = scheduler([node(f"n{i}", 4) for i in range(4)], *tables)
    asked = []
    real = Capacity.width
    monkeypatch.setattr(Capacity, "width", lambda self, *a: asked.append(a) or real(self, *a))
    for i in range(3):
        sched.handle(NodeLost(f"n{i}"), 1.0 + i)
    assert len(asked) == 3 * 2  # two demands pending, three losses
    assert sched.counts()[S.READY] > 4000


def test_cancelling_thousands_of_ready_steps_takes_them_all_out_and_the_rest_still_start_in_order():
    tables = [{"id": f"s{i}"} for i in range(4000)]
    sched, out = scheduler([node("n1", 2)], *tables)
    assert [d.step for d in of(Start, out)] == ["s0", "s1"]
    gone = [f"s{i}" for i in range(2, 4000) if i % 2 == 0]
    out = sched.handle(Cancel(tuple(gone), "by the user"), 1.0)
    assert len(of(Finished, out)) == len(gone) and of(Start, out) == []
    started = []
    for t, sid in enumerate(["s0", "s1"] + [f"s{i}" for i in range(3, 4000, 2)]):
        started += [d.step for d in of(Start, sched.handle(StepExited(sid, 1, S.SUCCEEDED), 2.0 + t))]
    assert started == [f"s{i}" for i in range(3, 4000, 2)]
    assert sched.finished() and sched.counts() == {S.SUCCEEDED: 2001, S.CANCELLED: 1999}


def test_a_changed_suite_resubmitted_while_its_steps_are_ready_runs_each_new_definition_exactly_once():
    sched, out = scheduler([node("n1", 2)], *[{"id": f"s{i}"} for i in range(2000)])
    starts = [d.step for d in of(Start, out)]
    again = suite(*[{"id": f"s{i}", "command": "changed"} for i in range(2000)])
    starts += [d.step for d in of(Start, sched.handle(submission(again.steps), 1.0))]
    t = 2.0
    while not sched.finished():
        v = sched.running()[0]
        starts += [d.step for d in of(Start, sched.handle(StepExited(v.id, v.attempt, S.SUCCEEDED), t))]
        t += 1.0
    # The two running at the resubmission ran twice (old and new definition); every other once.
    assert sorted(starts) == sorted(["s0", "s1"] + [f"s{i}" for i in range(2000)])
    assert sched.counts() == {S.SUCCEEDED: 2000} and sched._classes == {}
