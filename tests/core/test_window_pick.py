"""Which running step a step handed ahead goes behind (fleet.core.windowpick), through
the real Scheduler handlers: the one expected to end soonest, never at the cost of the
order of ready steps (priority, fleet.core.ranks), and never a later slot than need be."""

from __future__ import annotations

import dataclasses

from fleet.core import states as S
from fleet.core.ranks import ordered
from fleet.core.scheduler import NodeJoined, Scheduler, Start, StepExited, submission
from fleet.core.window import Begin, Queue

from coretools import node, slot, suite  # noqa: E402


def windowed(nodes, *tables, window=None, order="setup"):
    sched = ordered(Scheduler(window=window), order)
    for n in nodes:
        sched.handle(NodeJoined(n), 0.0)
    return sched, sched.handle(submission(suite(*tables).steps), 0.0)


def of(kind, decisions):
    return [d for d in decisions if isinstance(d, kind)]


TWO = [node("n1", 1), node("n2", 1)]


def test_a_step_handed_ahead_goes_behind_the_running_step_expected_to_end_soonest_not_the_first_started():
    sched, out = windowed(TWO, {"id": "long", "priority": 1, "estimate": 10}, {"id": "short", "priority": 2, "estimate": 1},
                          {"id": "next", "priority": 3, "estimate": 1})
    assert [(d.step, d.placement[0].node) for d in of(Start, out)] == [("long", "n1"), ("short", "n2")]
    assert of(Queue, out) == [Queue("next", 1, (slot("n2", [0]),), "short")]
    out = sched.handle(StepExited("short", 1, S.SUCCEEDED), 1.0)
    assert of(Begin, out) == [Begin("next", 1, (slot("n2", [0]),), "short")]


def test_an_earlier_runs_recorded_duration_counts_as_the_expectation():
    sched = Scheduler(window=None)
    for n in TWO:
        sched.handle(NodeJoined(n), 0.0)
    steps = suite({"id": "long", "priority": 1}, {"id": "short", "priority": 2}, {"id": "next", "priority": 3}).steps
    out = sched.handle(dataclasses.replace(submission(steps), durations={"long": 10.0, "short": 1.0}), 0.0)
    assert [d.after for d in of(Queue, out)] == ["short"]


def test_a_running_step_with_no_expectation_counts_as_ending_last():
    _, out = windowed(TWO, {"id": "long", "priority": 1, "estimate": 10}, {"id": "short", "priority": 2},
                      {"id": "next", "priority": 3})
    assert [d.after for d in of(Queue, out)] == ["long"]


def test_running_steps_expected_to_end_together_take_steps_in_start_order():
    _, out = windowed([node("n1", 3)], *[{"id": f"s{i}", "estimate": 2} for i in range(6)])
    assert [(d.step, d.after) for d in of(Queue, out)] == [("s3", "s0"), ("s4", "s1"), ("s5", "s2")]


def test_a_step_is_not_queued_behind_one_whose_dependent_comes_first_in_the_order_and_would_take_its_core():
    sched, out = windowed([node("n1", 2)], {"id": "head", "priority": 1}, {"id": "x", "priority": 5},
                          {"id": "y", "priority": 5}, {"id": "tail", "priority": 2, "deps": ["head"]})
    assert [d.step for d in of(Start, out)] == ["head", "x"]
    assert [(d.step, d.after) for d in of(Queue, out)] == [("y", "x")]  # not behind head, first started
    out = sched.handle(StepExited("head", 1, S.SUCCEEDED), 1.0)
    assert [d.step for d in of(Start, out)] == ["tail"] and of(Begin, out) == []


def test_the_critical_path_order_keeps_a_chains_next_step_ahead_of_the_window():
    sched, out = windowed([node("n1", 2)], {"id": "a", "estimate": 3}, {"id": "b", "estimate": 3},
                          {"id": "head", "estimate": 1}, {"id": "tail", "estimate": 40, "deps": ["head"]},
                          order="critical-path")
    assert [d.step for d in of(Start, out)] == ["head", "a"]
    assert [(d.step, d.after) for d in of(Queue, out)] == [("b", "a")]
    out = sched.handle(StepExited("head", 1, S.SUCCEEDED), 1.0)
    assert [d.step for d in of(Start, out)] == ["tail"]


def test_a_dependent_that_comes_later_in_the_order_or_is_wider_and_not_of_higher_priority_does_not_hold_the_window():
    _, out = windowed([node("n1", 2)], {"id": "head", "priority": 1}, {"id": "x", "priority": 4},
                      {"id": "y", "priority": 4}, {"id": "z", "priority": 4},
                      {"id": "late", "priority": 5, "deps": ["head"]}, {"id": "wide", "cores": 2, "priority": 4, "deps": ["head"]})
    assert [(d.step, d.after) for d in of(Queue, out)] == [("y", "head"), ("z", "x")]


def test_a_wider_dependent_of_higher_priority_holds_the_window_as_its_reservation_would_keep_the_core():
    # Without a window, wide is ready when head ends and cannot start: its reservation
    # keeps head's core from y (priority 4). So y is not queued behind head.
    _, out = windowed([node("n1", 2)], {"id": "head", "priority": 1}, {"id": "x", "priority": 4},
                      {"id": "y", "priority": 4}, {"id": "z", "priority": 4},
                      {"id": "wide", "cores": 2, "priority": 2, "deps": ["head"]})
    assert [(d.step, d.after) for d in of(Queue, out)] == [("y", "x")]


def test_a_dependent_that_waits_for_other_steps_too_does_not_hold_the_window():
    _, out = windowed([node("n1", 1), node("n2", 1)], {"id": "head", "priority": 1}, {"id": "other", "priority": 1},
                      {"id": "y", "priority": 5}, {"id": "both", "priority": 2, "deps": ["head", "other"]})
    assert [(d.step, d.after) for d in of(Queue, out)] == [("y", "head")]


def test_a_held_running_step_takes_a_step_that_comes_before_its_dependent():
    sched, out = windowed([node("n1", 2)], {"id": "head", "priority": 1}, {"id": "x", "priority": 5},
                          {"id": "y", "priority": 5}, {"id": "tail", "priority": 2, "deps": ["head"]})
    assert [(d.step, d.after) for d in of(Queue, out)] == [("y", "x")]
    out = sched.handle(submission(suite({"id": "urgent", "priority": 1}).steps), 1.0)
    assert [(d.step, d.after) for d in of(Queue, out)] == [("urgent", "head")]


def test_a_step_waits_for_a_slot_that_frees_sooner_rather_than_queue_behind_a_long_step():
    sched, out = windowed([node("n1", 2)], {"id": "a", "estimate": 1}, {"id": "b", "estimate": 10},
                          {"id": "c", "estimate": 1}, {"id": "d", "estimate": 1})
    assert [(d.step, d.after) for d in of(Queue, out)] == [("c", "a")]  # not d behind b (ends at 10)
    out = sched.handle(StepExited("a", 1, S.SUCCEEDED), 1.0)
    assert [d.step for d in of(Begin, out)] == ["c"] and [(d.step, d.after) for d in of(Queue, out)] == [("d", "c")]


def test_the_same_events_give_the_same_decisions_with_estimates_dependents_and_the_window():
    def run():
        tables = [{"id": f"s{i}", "estimate": 1 + (i * 7) % 5, "priority": 1 + i % 3} for i in range(40)]
        tables += [{"id": f"t{i}", "estimate": 2, "deps": [f"s{i}"], "priority": 1} for i in range(0, 40, 4)]
        sched, out = windowed([node("n1", 2), node("n2", 3)], *tables, order="critical-path")
        log, t = list(out), 0.0
        while not sched.finished():
            t += 1
            sid = sched.running(1)[0].id
            log += sched.handle(StepExited(sid, sched.view(sid).attempt, S.SUCCEEDED), t)
        return log
    first = run()
    assert first == run() and of(Queue, first) and of(Begin, first)
