"""Who a reservation goes to (fleet.core.passover): a step that is passed over, never one
that takes the next free core anyway. Through the real Scheduler handlers and through
`fleet simulate`'s runner (simulated time: the start times are exact)."""

from __future__ import annotations

import pytest

from fleet.core import waits as W
from fleet.core.graph import build_graph
from fleet.core.scheduler import NodeJoined, Scheduler, Start, StepExited, Wait, submission
from fleet.core.simulate import pretend_nodes, simulate

from coretools import node, suite  # noqa: E402


def crowd(wide_priority: int = 3, other: bool = False):
    """The audit's suite: `offset` (0.35 s, priority 1), 24 one-core steps of 0.7 s, and
    a two-core step listed last, all ready at once; `other`: 12 more one-core steps of
    another demand (more memory), so that two kinds of narrow step take turns."""
    tables = [{"id": "offset", "estimate": 0.35, "priority": 1},
              {"id": "narrow/{i}", "array": "1-24", "estimate": 0.7}]
    if other:
        tables.append({"id": "other/{i}", "array": "1-12", "estimate": 0.7, "memory": "1536MiB"})
    tables.append({"id": "wide", "cores": 2, "estimate": 1, "priority": wide_priority})
    return suite(*tables).steps


def run(steps, reserve_after, window=0):
    graph, problems = build_graph(steps)
    assert not problems
    return simulate(steps, graph, pretend_nodes(1, 2, 4 * 2**30), keep_log=True, reserve_after=reserve_after,
                    window=window)


def reserved_for(result) -> set[str]:
    """The steps the run's waits say were held back for."""
    return {d.why.detail for _, d in result.log if isinstance(d, Wait) and d.why.cause == W.RESERVED}


@pytest.mark.parametrize("window, start", [(0, 2.45), (None, 3.15)])
def test_a_wide_step_ready_among_narrow_ones_listed_before_it_is_reserved_once_it_has_waited_reserve_after(
        window, start):
    # Before: each one-core step took the one reservation in turn (ready with the wide
    # step, first in setup order), and the wide step started last, at 8.75 s, as without.
    without = run(crowd(), None, window)
    assert without.steps["wide"].start_s == pytest.approx(8.75)
    got = run(crowd(), 2.0, window)
    # Ready at 0: past 2 s the next narrow step to start passes it over, and what frees
    # is held for it (with a node window, behind the steps already handed to the node).
    assert got.steps["wide"].start_s == pytest.approx(start)
    assert reserved_for(got) == {"wide"}  # no narrow step ever held it


@pytest.mark.parametrize("window", [0, None])
def test_two_kinds_of_narrow_step_taking_turns_never_hold_the_reservation_a_wide_step_needs(window):
    got = run(crowd(other=True), 2.0, window)
    assert got.steps["wide"].start_s < 3.5
    assert reserved_for(got) == {"wide"}


def test_a_wide_step_of_higher_priority_is_reserved_in_the_pass_that_would_start_a_lower_one_instead():
    # Before: `offset` (priority 1) was its kind's first step when the wide step first
    # failed, so no lower priority seemed ready; the blocked class was never tried again
    # for priority, and the wide step started last (8.84 s live, 8.75 s simulated).
    sched = Scheduler()  # the default --reserve-after: no step is old enough
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    out = sched.handle(submission(crowd(wide_priority=1)), 0.0)
    assert [d.step for d in out if isinstance(d, Start)] == ["offset"]
    assert [r.step for r in sched.reservations()] == ["wide"]
    why = sched.view("narrow/1").why
    assert (why.cause, why.detail) == (W.RESERVED, "wide")  # it ends after `offset`: it may not borrow
    out = sched.handle(StepExited("offset", 1, "succeeded"), 0.35)
    assert [d.step for d in out if isinstance(d, Start)] == ["wide"]
    assert run(crowd(wide_priority=1), 600.0).steps["wide"].start_s == pytest.approx(0.35)
    assert run(crowd(wide_priority=1), 600.0, None).steps["wide"].start_s == pytest.approx(0.35)


def test_a_narrow_step_that_gets_the_next_free_core_anyway_is_given_no_reservation():
    sched = Scheduler(reserve_after=1.0)
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    sched.handle(submission(suite(*({"id": f"n{i}", "estimate": 10} for i in range(6))).steps), 0.0)
    for t, step in ((20.0, "n0"), (20.0, "n1"), (40.0, "n2")):  # old enough, and each core goes to the next
        out = sched.handle(StepExited(step, 1, "succeeded"), t)
        assert len([d for d in out if isinstance(d, Start)]) == 1
        assert sched.reservations() == []


@pytest.mark.parametrize("priority, window", [(3, 0), (3, None), (1, 0), (1, None)])
def test_the_same_events_give_the_same_decisions_with_steps_passed_over(priority, window):
    first, again = run(crowd(priority, other=True), 2.0, window), run(crowd(priority, other=True), 2.0, window)
    assert first.log == again.log
    assert any(isinstance(d, Wait) and d.why.cause == W.RESERVED for _, d in first.log)
