"""The order of ready steps of equal priority (fleet.core.ranks), through the real scheduler."""

from __future__ import annotations

import pytest

from fleet.core.graph import build_graph
from fleet.core.ranks import Ranks, upward_ranks
from fleet.core.scheduler import (Cancel, EnterMore, Entering, NodeJoined, Scheduler, Start, StepExited, Submitted,
                                  submission)
from fleet.core.simulate import simulate

from tests.core.coretools import node, suite

# On one core: "short" comes first in setup order, but "head" leads a 100 s chain.
TABLES = ({"id": "short", "estimate": 5}, {"id": "head", "estimate": 1},
          {"id": "tail", "estimate": 100, "deps": ["head"]}, {"id": "other", "estimate": 5})


def run(order: str, tables=TABLES, cores: int = 1):
    s = suite(*[dict(t) for t in tables])
    sched = Scheduler(None)
    if order != "setup":
        sched.ranks = Ranks(order)
    sched.handle(NodeJoined(node("n1", cores)), 0.0)
    out = sched.handle(submission(s.steps), 0.0)
    return sched, out


def starts(out) -> list[str]:
    return [d.step for d in out if isinstance(d, Start)]


def test_upward_rank_is_a_steps_estimate_plus_the_longest_chain_of_estimates_after_it():
    s = suite(*[dict(t) for t in TABLES], {"id": "side", "estimate": 7, "deps": ["head"]},
              {"id": "unknown", "deps": ["short"]})
    graph, problems = build_graph(s.steps)
    assert not problems
    assert upward_ranks(s.steps, graph.deps) == {"short": 5.0, "head": 101.0, "tail": 100.0, "other": 5.0,
                                                 "side": 7.0, "unknown": 0.0}
    assert upward_ranks(s.steps, graph.deps, {"unknown": 3.0})["short"] == 8.0  # a recorded duration counts


def test_critical_path_order_starts_the_head_of_the_longer_chain_first_and_setup_order_does_not():
    assert starts(run("setup")[1]) == ["short"]
    assert starts(run("critical-path")[1]) == ["head"]


def test_critical_path_order_is_deterministic_and_breaks_ties_by_setup_order():
    def schedule(order):
        sched, out = run(order, TABLES + ({"id": "twin", "estimate": 5},))
        seen, now = starts(out), 0.0
        while not sched.finished():
            now += 1.0
            seen += starts(sched.handle(StepExited(seen[-1], 1, "succeeded"), now))
        return seen
    first = schedule("critical-path")
    assert first == schedule("critical-path") == ["head", "tail", "short", "other", "twin"]


def test_a_live_step_without_an_estimate_is_ranked_by_its_earlier_runs_duration():
    # (docs/user-guide.md said such steps count 0 s for --order: the submission's recorded
    # durations, fleet.core.durations, rank them as an estimate would)
    import dataclasses
    s = suite({"id": "short", "estimate": 5}, {"id": "ran-before"})
    for durations, first in (({}, "short"), ({"ran-before": 50.0}, "ran-before")):
        sched = Scheduler(None)
        sched.ranks = Ranks("critical-path")
        sched.handle(NodeJoined(node("n1", 1)), 0.0)
        out = sched.handle(dataclasses.replace(submission(s.steps), durations=durations), 0.0)
        assert starts(out) == [first], durations


def test_critical_then_smallest_puts_the_critical_chain_first_and_then_the_smallest_work():
    tables = ({"id": "big", "estimate": 50, "cores": 2}, {"id": "small", "estimate": 10, "cores": 2},
              {"id": "head", "estimate": 1, "cores": 2}, {"id": "tail", "estimate": 100, "deps": ["head"]})
    assert starts(run("setup", tables, cores=2)[1]) == ["big"]
    sched, out = run("critical-then-smallest", tables, cores=2)
    assert starts(out) == ["head"]
    assert starts(sched.handle(StepExited("head", 1, "succeeded"), 1.0)) == ["tail"]
    # "big" (50 s) is under 0.8 of the longest chain (101 s): the smallest work goes first.
    assert starts(sched.handle(StepExited("tail", 1, "succeeded"), 101.0)) == ["small"]


def test_a_queued_step_cancelled_under_a_rank_order_is_taken_off_its_queue():
    sched, out = run("critical-path")
    sched.handle(Cancel(("tail", "short")), 0.5)
    seen = starts(sched.handle(StepExited("head", 1, "succeeded"), 1.0))
    assert seen == ["other"] and sched.state("short") == "cancelled"


def test_simulate_with_critical_path_order_ends_sooner_here_with_the_same_steps():
    s = suite(*[dict(t) for t in TABLES])
    graph, _ = build_graph(s.steps)
    nodes = [node("n1", 1)]
    setup = simulate(s.steps, graph, nodes, reserve_after=None)
    ranked = simulate(s.steps, graph, nodes, reserve_after=None, order="critical-path")
    assert (setup.makespan_s, ranked.makespan_s) == (111.0, 111.0)  # one core: the same work
    assert ranked.steps["head"].start_s == 0.0 and setup.steps["head"].start_s == 5.0


def test_an_unknown_order_is_refused_by_name():
    with pytest.raises(ValueError, match="critical-path"):
        Ranks("longest")


def test_a_chunked_submission_is_ranked_in_parts_and_decides_as_the_whole_one_does():
    tables = tuple({"id": f"s{i}", "estimate": 1 + i % 7, "cores": 1 + i % 3,
                    **({"deps": [f"s{i - 3}"]} if i >= 3 else {})} for i in range(30))
    s = suite(*tables)
    graph, _ = build_graph(s.steps)

    def decisions(chunk):
        sched = Scheduler(None)
        sched.ranks = Ranks("critical-then-smallest")
        sched.handle(NodeJoined(node("n1", 4)), 0.0)
        out, pauses = sched.handle(Submitted(tuple(s.steps), graph.deps, chunk=chunk), 0.0), 0
        while sched.entering():
            pauses += 1
            out += sched.handle(EnterMore(), 0.0)
        return [d for d in out if not isinstance(d, Entering)], pauses
    whole, none = decisions(0)
    parts, pauses = decisions(4)
    assert none == 0 and pauses > 30 // 4 and parts == whole  # ranking pauses too, in its four walks
