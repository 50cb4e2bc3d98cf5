"""The order "defer-widest" (fleet.core.deferral): the few biggest spanning steps that are
not critical wait a bounded time, so smaller wide steps ready a little later start at
once. Pure: events in, decisions out."""

from __future__ import annotations

from fleet.core.deferral import Deferral
from fleet.core.graph import build_graph
from fleet.core.ranks import Ranks, upward_ranks
from fleet.core.scheduler import NodeJoined, Scheduler, Start, StepExited, Wait, submission

from tests.core.coretools import node, suite

# 12 cores on 3 nodes. "long" (1000 s) is the critical chain; "big" (6 cores x 100 s) is
# ready at once, "small" (6 cores x 10 s) once "prep" ends at 5 s; "tick" steps end every 10 s.
TABLES = ({"id": "long", "estimate": 1000}, {"id": "big", "cores": 6, "span": True, "estimate": 100},
          {"id": "prep", "estimate": 5}, {"id": "small", "cores": 6, "span": True, "estimate": 10, "deps": ["prep"]},
          {"id": "tick0", "estimate": 10}, *({"id": f"tick{i}", "estimate": 10, "deps": [f"tick{i - 1}"]}
                                            for i in range(1, 6)))


def run(order: str, deferral: Deferral | None = None):
    """Simulate by hand: every step ends after its estimate. Returns (starts, waits)."""
    sched = Scheduler(None)
    sched.ranks = Ranks(order)
    if deferral is not None:
        sched.ranks.deferral = deferral
    for i in range(3):
        sched.handle(NodeJoined(node(f"n{i}", 4)), 0.0)
    s = suite(*[dict(t) for t in TABLES])
    est = {x.id: x.estimate for x in s.steps}
    started, waits, ends = {}, [], []

    def act(out, now):
        for d in out:
            if isinstance(d, Start):
                started[d.step] = now
                ends.append((now + est[d.step], d.step))
            elif isinstance(d, Wait):
                waits.append((now, d.step, d.why.text()))
    act(sched.handle(submission(s.steps), 0.0), 0.0)
    while ends:
        ends.sort()
        now, sid = ends.pop(0)
        act(sched.handle(StepExited(sid, 1, "succeeded"), now), now)
    assert sched.finished()
    return started, waits


def test_the_widest_step_off_the_critical_chain_waits_its_hold_and_a_smaller_wide_one_starts_at_once():
    before, _ = run("critical-then-smallest")
    assert before["big"] == 0.0 and before["small"] == 100.0  # small waits 95 s behind big
    after, waits = run("defer-widest", Deferral(share=0.5, hold_s=20.0))
    assert after["small"] == 5.0 and after["big"] == 20.0  # held 20 s, started at the first pass after
    assert after["long"] == before["long"] == 0.0
    assert (0.0, "big", "deferred (one of the widest steps not on a critical chain) until 20 s") in waits


def test_the_rule_is_deterministic():
    assert run("defer-widest", Deferral(0.5, 20.0)) == run("defer-widest", Deferral(0.5, 20.0))


def test_the_deferred_steps_are_the_largest_work_among_spanning_steps_off_the_critical_chain():
    s = suite(*[dict(t) for t in TABLES], {"id": "huge", "cores": 8, "span": True, "estimate": 900},
              {"id": "mid", "cores": 4, "span": True, "estimate": 100})
    graph, _ = build_graph(s.steps)
    rank = upward_ranks(s.steps, graph.deps)
    d = Deferral(share=0.5)
    d.learn(s.steps, rank, 0.8 * max(rank.values()), None)
    # 4 spanning steps, half deferred: "huge" (rank 900 >= 800) is critical, so "big" and "mid".
    assert d.steps == {"big", "mid"}
    few = Deferral()  # 9 %: fewer than 12 spanning steps in a submission defer none
    few.learn(s.steps, rank, 0.8 * max(rank.values()), None)
    assert few.steps == set()


def test_only_the_defer_widest_order_defers_anything():
    assert [Ranks(o).deferral is None for o in ("setup", "critical-path", "critical-then-smallest")] == [True] * 3
    assert isinstance(Ranks("defer-widest").deferral, Deferral)


def test_a_deferred_step_is_not_held_when_nothing_else_runs():
    sched = Scheduler(None)
    sched.ranks = Ranks("defer-widest")
    sched.ranks.deferral = Deferral(share=1.0, hold_s=1000.0)
    sched.ranks.deferral.steps.add("wide")  # chosen by hand: alone, it is its own critical chain
    sched.handle(NodeJoined(node("n1", 4)), 0.0)
    out = sched.handle(submission(suite({"id": "wide", "cores": 4, "span": True, "estimate": 5}).steps), 0.0)
    assert [d.step for d in out if isinstance(d, Start)] == ["wide"]  # no event would ever come to start it
