"""A big submission entered in parts (Submitted.chunk, EnterMore): the decisions are
those of the whole submission at once, however the parts fall, and events that come
between the parts are handled after it, in order."""

from __future__ import annotations

from dataclasses import replace

from fleet.core.graph import build_graph, topological_order
from fleet.core.scheduler import (EnterMore, Entering, Ignored, NodeJoined, NodeLost, Scheduler, Start,
                                  StepExited, Submitted)

from coretools import GiB, node, suite

NODES = (node("n1", 4, 1), node("n2", 6, 1, 3 * GiB), node("n3", 2))


def _mixed_suite(changed: bool = False):
    """Widths, priorities, spans, a GPU, a step that runs alone, deps both ways in setup
    order, one step too wide for any node; `changed` alters a few definitions."""
    tables = []
    for i in range(40):
        t = {"id": f"s{i}", "cores": 1 + (i * 7) % 5, "min_cores": 1, "priority": 1 + (i * 3) % 5,
             "span": i % 4 == 0, "gpus": 1 if i % 9 == 0 else 0, "concurrent": i != 17}
        if i >= 3:
            t["deps"] = [f"s{(i * 5) % i}", f"s{i - 3}"]
        if i == 5:
            t["deps"] = ["s30"]  # a dep later in setup order
        if i == 33:
            t["cores"], t["min_cores"] = 64, 64  # fits nowhere
        if changed and i % 10 == 4:
            t["command"] = "y"
        tables.append(t)
    return suite(*tables)


def _submitted(s, done=(), chunk=0) -> Submitted:
    graph, problems = build_graph(s.steps)
    assert problems == []
    return Submitted(tuple(s.steps), graph.deps, frozenset(done), chunk=chunk, order=tuple(topological_order(graph)))


def _fleet() -> Scheduler:
    sched = Scheduler()
    for n in NODES:
        sched.handle(NodeJoined(n), 0.0)
    return sched


def _enter(sched: Scheduler, ev: Submitted, between=()) -> list:
    """Feed ev, then EnterMore until it is all in, handing `between` events (t=2.0) one
    per pause; the decisions without the Entering progress notes."""
    out = sched.handle(ev, 1.0)
    between = list(between)
    while sched.entering():
        assert isinstance(out[-1], Entering) and out[-1].entered < out[-1].total
        if between:
            assert sched.handle(between.pop(0), 2.0) == []  # held, not lost
        out += sched.handle(EnterMore(), 3.0)
    for ev in between:  # the submission was in before they came
        out += sched.handle(ev, 2.0)
    return [d for d in out if not isinstance(d, Entering)]


def _state(sched: Scheduler) -> list:
    return [(v.id, v.state, v.attempt, v.placement, v.generation, v.started_at) for v in sched.views()]


def _run_some(sched: Scheduler) -> list:
    """Finish what runs, failing one, so that a resubmission meets every kind of state."""
    out = []
    for i, v in enumerate(sched.running()):
        out += sched.handle(StepExited(v.id, v.attempt, "failed" if i == 1 else "succeeded"), 5.0 + i)
    return out


def test_a_submission_entered_in_parts_of_any_size_decides_as_one_entered_whole():
    whole = _fleet()
    expected = _enter(whole, _submitted(_mixed_suite(), done={"s1", "s2"}))
    assert any(isinstance(d, Start) for d in expected)
    for chunk in (1, 2, 3, 7, 16, 1000):
        sched = _fleet()
        got = _enter(sched, _submitted(_mixed_suite(), done={"s1", "s2"}, chunk=chunk))
        assert got == expected, chunk
        assert _state(sched) == _state(whole), chunk


def test_a_resubmission_in_parts_renews_keeps_and_queues_the_same_steps_as_a_whole_one():
    def fleet_after_a_first_run():
        sched = _fleet()
        _enter(sched, _submitted(_mixed_suite()))
        _run_some(sched)
        return sched

    whole = fleet_after_a_first_run()
    expected = _enter(whole, _submitted(_mixed_suite(changed=True), done={"s0"}))
    for chunk in (1, 5, 64):
        sched = fleet_after_a_first_run()
        got = _enter(sched, _submitted(_mixed_suite(changed=True), done={"s0"}, chunk=chunk))
        assert got == expected, chunk
        assert _state(sched) == _state(whole), chunk


def test_events_that_come_between_the_parts_are_held_and_handled_after_the_submission_in_order():
    first = _fleet()
    _enter(first, _submitted(_mixed_suite()))
    running = [v for v in first.running()]
    assert len(running) >= 2
    later = [StepExited(running[0].id, 1, "succeeded"), NodeLost("n3", "gone"),
             StepExited(running[1].id, 1, "failed")]

    def fleet_running():
        sched = _fleet()
        _enter(sched, _submitted(_mixed_suite()))
        return sched

    whole = fleet_running()
    expected = _enter(whole, _submitted(_mixed_suite(changed=True)), between=later)
    sched = fleet_running()
    got = _enter(sched, _submitted(_mixed_suite(changed=True), chunk=3), between=later)
    assert got == expected
    assert _state(sched) == _state(whole)


def test_enter_more_with_nothing_being_entered_is_ignored():
    out = _fleet().handle(EnterMore(), 0.0)
    assert len(out) == 1 and isinstance(out[0], Ignored)


def test_an_unchunked_submission_says_nothing_about_entering():
    out = _fleet().handle(_submitted(_mixed_suite()), 0.0)
    assert not any(isinstance(d, Entering) for d in out)


def test_a_chunked_submission_reports_its_progress_and_its_end():
    sched = _fleet()
    s = _mixed_suite()
    notes = []
    out = sched.handle(replace(_submitted(s), chunk=10), 0.0)
    while True:
        notes += [d for d in out if isinstance(d, Entering)]
        if not sched.entering():
            break
        out = sched.handle(EnterMore(), 0.0)
    assert len(notes) > 3
    assert [n.entered for n in notes] == sorted(n.entered for n in notes)
    assert notes[-1] == Entering(len(s.steps), len(s.steps))


def _busy_fleet(running_deps=()):
    """Two one-core nodes running a0 and a1 of a first suite, a2..a5 ready behind them
    (no window: each ends before the next starts)."""
    sched = Scheduler(window=0)
    for n in (node("n1", 1), node("n2", 1)):
        sched.handle(NodeJoined(n), 0.0)
    _enter(sched, _submitted(suite(*[{"id": f"a{i}"} for i in range(6)])))
    assert sorted(v.id for v in sched.running()) == ["a0", "a1"]
    return sched


def _second(n=30, needs=None, chunk=4):
    """A second suite of n new steps, b7 depending on `needs` of the first if given."""
    steps = suite(*[{"id": f"b{i}"} for i in range(n)]).steps
    deps = {s.id: ((needs,) if needs and s.id == "b7" else ()) for s in steps}
    return Submitted(tuple(steps), deps, chunk=chunk, order=tuple(s.id for s in steps))


def _planned(sched, ev):
    """Hand `ev` and enter it until its plan is made (events wait meanwhile) and its
    steps are being entered."""
    sched.handle(ev, 1.0)
    while sched.entering() and not sched._entry.entered:
        sched.handle(EnterMore(), 1.0)
    assert sched.entering()


def _finish(sched):
    while sched.entering():
        sched.handle(EnterMore(), 3.0)
    for i in range(100):  # everything ends
        running = sched.running()
        if not running:
            break
        for v in running:
            sched.handle(StepExited(v.id, v.attempt, "succeeded"), 4.0 + i)


def test_an_exit_a_new_submission_owes_nothing_is_handled_between_its_parts():
    sched = _busy_fleet()
    _planned(sched, _second())
    got = sched.handle(StepExited("a0", 1, "succeeded"), 2.0)
    assert [d.step for d in got if isinstance(d, Start)] == ["a2"]  # not held: a2 starts at once
    assert sched.entering()
    _finish(sched)
    assert sched.finished() and sched.counts() == {"succeeded": 36}


def test_an_exit_of_a_step_the_new_submission_needs_waits_until_it_is_in_and_so_does_what_comes_after_it():
    sched = _busy_fleet()
    _planned(sched, _second(needs="a0"))
    assert sched.handle(StepExited("a0", 1, "succeeded"), 2.0) == []  # b7 depends on it: held
    assert sched.handle(StepExited("a1", 1, "succeeded"), 2.0) == []  # behind it, in order
    assert sched.state("a0") == sched.state("a1") == "running"
    while sched.entering():
        sched.handle(EnterMore(), 3.0)
    assert sched.state("a0") == sched.state("a1") == "succeeded"
    _finish(sched)
    assert sched.finished() and sched.counts() == {"succeeded": 36}


def test_a_resubmission_that_renews_a_known_step_holds_every_exit_until_it_is_in():
    sched = _busy_fleet()
    # a5 changed (renewed); a1 is not in it, but a renewal makes every exit wait.
    changed = suite(*[{"id": f"a{i}", **({"command": "y"} if i == 5 else {})} for i in range(2, 6)],
                    *[{"id": f"b{i}"} for i in range(30)])
    _planned(sched, _submitted(changed, chunk=4))
    assert sched._entry.apart is None
    assert sched.handle(StepExited("a1", 1, "succeeded"), 2.0) == []
    assert sched.state("a1") == "running"
    _finish(sched)
    assert sched.state("a1") == "succeeded" and sched.finished()


def test_an_exit_that_came_while_the_submission_was_planned_goes_through_once_its_plan_is_made():
    sched = _busy_fleet()
    sched.handle(_second(chunk=2), 1.0)
    assert sched.entering() and sched._entry.apart is None  # its plan not made yet
    assert sched.handle(StepExited("a0", 1, "succeeded"), 2.0) == []  # its plan not made yet: held
    out = []
    while sched.entering() and not sched._entry.entered:  # its plan made, its steps going in
        out += sched.handle(EnterMore(), 3.0)
    assert sched.entering() and sched.state("a0") == "succeeded"  # let through before the rest is in
    assert [d.step for d in out if isinstance(d, Start)] == ["a2"]
    _finish(sched)
    assert sched.finished() and sched.counts() == {"succeeded": 36}


def test_a_waiting_step_whose_renewed_dep_a_later_submission_finds_done_becomes_ready():
    # x, a, b (b needs a) ran; a edited: a and b to run again, a waiting for x's core; a
    # edited back, its marker counts it done: a skipped, and b, kept, waited for ever
    # (the gpufuzz audit: the skip counted b's dep met, and only new steps were resolved).
    from fleet.core import states as S
    first = suite({"id": "x"}, {"id": "a"}, {"id": "b", "deps": ["a"]})
    edited = suite({"id": "x"}, {"id": "a", "command": "z"}, {"id": "b", "deps": ["a"]})
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 1)), 0.0)
    sched.handle(_submitted(first), 0.0)
    for t, sid in ((1.0, "x"), (2.0, "a"), (3.0, "b")):
        sched.handle(StepExited(sid, 1, S.SUCCEEDED), t)
    sched.handle(_submitted(edited), 4.0)
    assert {s: sched.state(s) for s in "xab"} == {"x": S.RUNNING, "a": S.READY, "b": S.WAITING}
    sched.handle(_submitted(first, done={"a", "b"}), 5.0)
    assert sched.state("a") == S.SKIPPED and sched.state("b") == S.READY
    out = sched.handle(StepExited("x", sched.view("x").attempt, S.SUCCEEDED), 6.0)
    assert [d.step for d in out if isinstance(d, Start)] == ["b"]
