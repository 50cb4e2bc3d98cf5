"""The order "defer-widest" (fleet.core.deferral): the few biggest spanning steps that are
not critical wait a bounded time, so smaller wide steps ready a little later start at
once. Pure: events in, decisions out."""

from __future__ import annotations

from fleet.core.deferral import Deferral, wake_after
from fleet.core.graph import build_graph
from fleet.core.ranks import Ranks, upward_ranks
from fleet.core.scheduler import Exits, NodeJoined, Scheduler, Start, StepExited, Wait, submission
from fleet.core.simulate import pretend_nodes, simulate

from tests.core.coretools import node, suite

# 12 cores on 3 nodes. "long" (1000 s) is the critical chain; "big" (6 cores x 100 s) is
# ready at once, "small" (6 cores x 10 s) once "prep" ends at 5 s; "tick" steps end every 10 s.
TABLES = ({"id": "long", "estimate": 1000}, {"id": "big", "cores": 6, "span": True, "estimate": 100},
          {"id": "prep", "estimate": 5}, {"id": "small", "cores": 6, "span": True, "estimate": 10, "deps": ["prep"]},
          {"id": "tick0", "estimate": 10}, *({"id": f"tick{i}", "estimate": 10, "deps": [f"tick{i - 1}"]}
                                            for i in range(1, 6)))


def run(order: str, deferral: Deferral | None = None, tables=TABLES, nodes: int = 3):
    """Simulate by hand on 4-core nodes: every step ends after its estimate. Returns (starts, waits)."""
    sched = Scheduler(None)
    sched.ranks = Ranks(order)
    if deferral is not None:
        sched.ranks.deferral = deferral
    for i in range(nodes):
        sched.handle(NodeJoined(node(f"n{i}", 4)), 0.0)
    s = suite(*[dict(t) for t in tables])
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
    now = 0.0
    while ends or wake_after(sched, now) is not None:
        ends.sort()
        at = wake_after(sched, now)  # a hold ends before the next step does: a pass then, as the shells give
        if at is not None and (not ends or at < ends[0][0]):
            now = at
            act(sched.handle(Exits(()), now), now)
            continue
        now, sid = ends.pop(0)
        act(sched.handle(StepExited(sid, 1, "succeeded"), now), now)
    assert sched.finished()
    return started, waits


def deferred(hold: str) -> str:
    return f"deferred for {hold} from when it became ready (one of the widest steps not on a critical chain)"


def test_the_widest_step_off_the_critical_chain_waits_its_hold_and_a_smaller_wide_one_starts_at_once():
    before, _ = run("critical-then-smallest")
    assert before["big"] == 0.0 and before["small"] == 100.0  # small waits 95 s behind big
    after, waits = run("defer-widest", Deferral(share=0.5, hold_s=20.0))
    assert after["small"] == 5.0 and after["big"] == 20.0  # held 20 s, started at the first pass after
    assert after["long"] == before["long"] == 0.0
    assert (0.0, "big", deferred("20 s")) in waits


# 16 nodes of 4 cores, room for every step at once. "long" (5,000 s) is the critical chain;
# twelve spanning steps of 60 s: "w0" (8 cores) ready at once, the rest (4 cores) once "prep"
# ends at 30 s; "tick" steps end every 10 s up to 200 s. The default share defers one: w0.
SHORT = ({"id": "long", "estimate": 5000}, {"id": "w0", "cores": 8, "span": True, "estimate": 60},
         {"id": "prep", "estimate": 30},
         *({"id": f"w{i}", "cores": 4, "span": True, "estimate": 60, "deps": ["prep"]} for i in range(1, 12)),
         {"id": "tick0", "estimate": 10},
         *({"id": f"tick{i}", "estimate": 10, "deps": [f"tick{i - 1}"]} for i in range(1, 20)))


def test_a_suite_of_short_wide_steps_holds_its_deferred_one_about_one_wide_step_not_for_long():
    started, waits = run("defer-widest", tables=SHORT, nodes=16)
    # Held the median spanning step's 60 s (not a fixed 2,400 s), then started at the next pass.
    assert (0.0, "w0", deferred("1 min")) in waits
    assert started["w0"] == 60.0 and started["w1"] == 30.0
    # With a fixed 2,400 s hold it waits that long (not for "long"'s end at 5,000 s, the
    # next event after the hold, as before its end was a timer of its own).
    fixed, _ = run("defer-widest", Deferral(hold_s=2400.0), tables=SHORT, nodes=16)
    assert fixed["w0"] == 2400.0


def test_the_hold_is_the_median_expected_duration_of_the_submissions_spanning_steps():
    s = suite(*[dict(t) for t in SHORT], {"id": "w12", "cores": 2, "span": True, "estimate": 7200})
    graph, _ = build_graph(s.steps)
    rank = upward_ranks(s.steps, graph.deps)
    d = Deferral()
    d.learn(s.steps, rank, 0.8 * max(rank.values()), None)
    # 13 spanning steps, one deferred: work counted up to the median 60 s, so the 2-core
    # 2-hour step (120 core-s) is not the biggest; w0 (480 core-s) is, held 60 s.
    assert d.steps == {"w0"} and d.typical == {"w0": 60.0}


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


def test_a_held_step_first_in_its_class_holds_up_none_of_the_steps_queued_behind_it():
    # "a" and "b" are the same demand (4 cores, spanning): "a" has less work, so it is
    # first in the class, and it is the deferred one. "b" must start at once, not when
    # "a"'s hold ends; "a" starts at the first pass after its hold (a tick's end).
    tables = ({"id": "long", "estimate": 1000}, {"id": "a", "cores": 4, "span": True, "estimate": 10},
              {"id": "b", "cores": 4, "span": True, "estimate": 50}, {"id": "tick0", "estimate": 10},
              *({"id": f"tick{i}", "estimate": 10, "deps": [f"tick{i - 1}"]} for i in range(1, 6)))
    deferral = Deferral(share=0.0, hold_s=20.0)
    deferral.steps.add("a")
    started, waits = run("defer-widest", deferral, tables=tables)
    assert started["b"] == 0.0
    assert started["a"] == 20.0
    assert (0.0, "a", deferred("20 s")) in waits


def test_a_hold_that_ends_between_events_starts_its_step_at_its_end_in_a_simulation_too():
    # "long" runs 1,000 s; the rest end by 70 s. w0 is held 60 s from 0: no step ends at
    # 60 s, and before its hold had a timer w0 waited for "long"'s end (its node idle).
    tables = [dict(t) for t in SHORT if not str(t["id"]).startswith("tick")]
    tables[0]["estimate"] = 1000
    s = suite(*tables)
    graph, _ = build_graph(s.steps)
    r = simulate(s.steps, graph, pretend_nodes(16, 4), order="defer-widest")
    assert r.steps["w0"].start_s == 60.0 and r.steps["w1"].start_s == 30.0
    assert r.makespan_s == 1000.0
    started, waits = run("defer-widest", tables=tables, nodes=16)
    assert started["w0"] == 60.0
    assert [w for w in waits if w[1] == "w0"] == [(0.0, "w0", deferred("1 min"))]  # said once, not at every pass


def test_a_hold_is_said_in_minutes_and_hours_from_when_the_step_became_ready():
    d = Deferral(hold_s=1757.0)

    class Job:
        ready_at = 100.0

        class spec:
            id = "w"
    assert d.why(Job).text() == deferred("29 min 17 s")
    assert Deferral(hold_s=7500.0).why(Job).text() == deferred("2 h 5 min")
