"""Steps that no longer fit after a node is lost, and many ready steps taken out at
once - by a loss, a cancel, a resubmitted changed suite - (fleet.core.unfit,
fleet.core.jobs.take_out), through the real Scheduler handlers."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.childsteps import expand
from fleet.core.resources import Capacity
from fleet.core.scheduler import (Blocked, Cancel, Elsewhere, Finished, NodeLost, Reclaim, Start, StepExited, Submitted,
                                  Unrunnable, submission)

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
    assert all(d.reason == "after losing n2: the allocation has no nodes" and d.after_loss for d in of(Unrunnable, last))
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


def test_a_parent_waiting_for_its_children_when_the_only_node_it_fits_is_lost_is_unrunnable_once_they_end():
    # The corefuzz audit (seed 49): p (4 cores, protocol "steps") ran on A, submitted p/c
    # and waited for it, holding nothing; A was lost. Once p/c succeeded p was ready for
    # ever ("needs 4 cores, 2 free"), nothing started, and the run never finished.
    sched, out = scheduler([node("A", 4), node("B", 2)], {"id": "p", "cores": 4, "protocol": "steps"},
                           {"id": "after", "deps": ["p"]}, {"id": "q", "cores": 4})
    assert [(d.step, d.placement[0].node) for d in of(Start, out)] == [("p", "A")]
    kids, problems = expand("p", [{"id": "c", "command": "x"}], "test")
    assert not problems
    out = sched.handle(Submitted(tuple(kids), {k.id: k.deps for k in kids}, parent="p"), 1.0)
    assert [(d.step, d.placement[0].node) for d in of(Start, out)] == [("p/c", "B")]
    out = sched.handle(StepExited("p", 1, S.WAIT), 1.0)
    assert [d.step for d in of(Start, out)] == ["q"] and sched.state("p") == S.SUSPENDED
    out = sched.handle(NodeLost("A", "agent said goodbye"), 2.0)
    assert of(Unrunnable, out) == []  # p is not pending now: its child still runs
    out = sched.handle(StepExited("p/c", 1, S.SUCCEEDED), 3.0)
    assert [(type(d).__name__, d.step) for d in out if isinstance(d, (Unrunnable, Blocked, Start))] == [
        ("Unrunnable", "p"), ("Blocked", "after")]
    assert of(Unrunnable, out)[0].reason == ("after losing A: needs at least 4 cores on one node; the largest node "
                                             "that could hold it has 2 (the step may not span nodes)")
    assert sched.finished() and sched.counts() == {S.LOST: 1, S.SUCCEEDED: 1, S.UNRUNNABLE: 1, S.BLOCKED: 1}


def test_a_step_another_fleet_gives_back_after_the_only_node_it_fits_was_lost_is_unrunnable():
    sched, out = scheduler([node("A", 4), node("B", 2)], {"id": "wide", "cores": 4}, {"id": "narrow"})
    sched.handle(Elsewhere("wide", 1, "claimed by another fleet"), 0.5)
    sched.handle(NodeLost("A", "agent said goodbye"), 1.0)
    out = sched.handle(Reclaim("wide", "its claim went stale"), 2.0)
    assert [(d.step, d.reason, d.after_loss) for d in of(Unrunnable, out)] == [
        ("wide", "after losing A: needs at least 4 cores on one node; the largest node that could hold it has 2 "
                 "(the step may not span nodes)", True)]
    assert sched.finished() is False and sched.state("narrow") == S.RUNNING
    sched.handle(StepExited("narrow", 1, S.SUCCEEDED), 3.0)
    assert sched.finished()


def test_a_step_ready_again_after_a_loss_that_still_fits_starts_and_its_demand_is_asked_once(monkeypatch):
    sched, out = scheduler([node("A", 4), node("B", 4)], *[{"id": f"s{i}", "cores": 4, "retries": 1}
                                                           for i in range(2)])
    asked = []
    real = Capacity.width
    monkeypatch.setattr(Capacity, "width", lambda self, *a: asked.append(a) or real(self, *a))
    out = sched.handle(NodeLost("A", "agent said goodbye"), 1.0)  # s0 lost there, retried: it fits B
    assert of(Unrunnable, out) == [] and sched.state("s0") == S.READY
    at_loss = len(asked)
    out = sched.handle(StepExited("s1", 1, S.FAILED), 2.0)  # retried too: its demand was asked already
    assert [d.step for d in of(Start, out)] == ["s0"] and of(Unrunnable, out) == [] and len(asked) == at_loss
    out = sched.handle(StepExited("s0", 2, S.SUCCEEDED), 3.0)
    assert [d.step for d in of(Start, out)] == ["s1"]
