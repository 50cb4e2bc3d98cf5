"""A scheduling pass starts at most `pass_starts` steps and says GoOn; the rest of it
comes with the next event, the same starts as one unbounded pass (fleet.core.decisions.GoOn)."""

from __future__ import annotations

from fleet.core.decisions import Exits, GoOn
from fleet.core.scheduler import NodeJoined, Scheduler, Start, submission
from fleet.core.simulate import pretend_nodes, simulate
from fleet.core.graph import build_graph

from coretools import node, suite  # noqa: E402

TABLES = [{"id": f"s{i}", "cores": 1 + i % 3} for i in range(60)]


def starts(decisions):
    return [(d.step, d.placement) for d in decisions if isinstance(d, Start)]


def first_pass(pass_starts):
    sched = Scheduler()
    sched.pass_starts = pass_starts
    for n in [node("n1", 16), node("n2", 16), node("n3", 8)]:
        sched.handle(NodeJoined(n), 0.0)
    got = sched.handle(submission(suite(*TABLES).steps), 0.0)
    out, calls = [], 1
    while got and isinstance(got[-1], GoOn):
        assert len(starts(got)) == pass_starts  # bounded, and stopped only with more to try
        out += got[:-1]
        got = sched.handle(Exits(()), 0.0)
        calls += 1
    assert len(starts(got)) <= pass_starts
    return out + got, calls, sched


def test_a_pass_stops_after_its_bound_and_the_next_event_goes_on_with_the_same_starts_as_one_whole_pass():
    whole, calls, _ = first_pass(10_000)
    assert calls == 1 and len(starts(whole)) > 10
    bounded, calls, sched = first_pass(4)
    assert calls > 3
    assert starts(bounded) == starts(whole)
    assert not any(isinstance(d, GoOn) for d in bounded)


def test_simulate_takes_a_bounded_pass_whole_and_gets_the_same_schedule(monkeypatch):
    steps = suite(*[dict(t, estimate=1 + i % 4) for i, t in enumerate(TABLES)]).steps
    nodes = pretend_nodes(3, 16)
    whole = simulate(steps, build_graph(steps)[0], nodes)
    monkeypatch.setattr(Scheduler, "pass_starts", 3)
    bounded = simulate(steps, build_graph(steps)[0], nodes)
    assert bounded.steps == whole.steps and bounded.makespan_s == whole.makespan_s
