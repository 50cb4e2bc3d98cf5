"""Chains in a node's window (fleet.core.windowchain), through the real Scheduler
handlers: with a depth above 1, several steps wait behind one running step, each
behind the one before it."""

from __future__ import annotations

import pytest

from fleet.core import states as S
from fleet.core.scheduler import (Cancel, Exits, Finished, Kill, NodeJoined, NodeLost, Retry, Scheduler, Start,
                                  StepExited, submission)
from fleet.core.window import Begin, Queue, Unqueued, Withdraw

from coretools import node, slot, suite  # noqa: E402

DROPPED = "withdrawn before it started"


def chained(nodes, *tables, depth=3, window=None, reserve_after=None):
    sched = Scheduler(reserve_after=reserve_after, window=window, depth=depth)
    for n in nodes:
        sched.handle(NodeJoined(n), 0.0)
    return sched, sched.handle(submission(suite(*tables).steps), 0.0)


def of(kind, decisions):
    return [d for d in decisions if isinstance(d, kind)]


def queued(decisions):
    return [(d.step, d.after) for d in of(Queue, decisions)]


def steps(n, **kw):
    return [dict(id=f"s{i}", **kw) for i in range(n)]


def empty(w) -> bool:
    return not (w.next or w.behind or w.count or w.taking or w.ends or w.held or w.chained or w.shelved
                or w.blocker or w.parked or w.began or w.full or w.loose or w.queued_of)


def test_a_depth_of_three_queues_three_steps_behind_a_running_step_each_behind_the_one_before():
    sched, out = chained([node("n1", 1)], *steps(6))
    assert [d.step for d in of(Start, out)] == ["s0"]
    assert queued(out) == [("s1", "s0"), ("s2", "s1"), ("s3", "s2")]
    assert all(d.placement == (slot("n1", [0]),) for d in of(Queue, out))
    assert sched.state("s4") == S.READY and sched.window.queued() == 3


def test_the_default_window_is_the_nodes_cores_times_the_depth_and_an_explicit_one_still_bounds_it():
    sched, out = chained([node("n1", 2)], *steps(12), depth=2)
    assert len(of(Start, out)) == 2 and len(of(Queue, out)) == 4
    sched, out = chained([node("n1", 2)], *steps(12), depth=4, window=3)
    assert len(of(Start, out)) == 2 and len(of(Queue, out)) == 3


def test_a_chain_begins_in_order_and_its_tail_takes_another_once_its_head_runs():
    sched, _ = chained([node("n1", 1)], *steps(6))
    out = sched.handle(StepExited("s0", 1, S.SUCCEEDED), 1.0)
    assert of(Begin, out) == [Begin("s1", 1, (slot("n1", [0]),), "s0")]
    assert queued(out) == [("s4", "s3")]  # the chain is three queued again
    out = sched.handle(StepExited("s1", 1, S.SUCCEEDED), 2.0)
    assert [d.step for d in of(Begin, out)] == ["s2"] and queued(out) == [("s5", "s4")]
    for i, sid in enumerate(["s2", "s3", "s4", "s5"]):
        sched.handle(StepExited(sid, 1, S.SUCCEEDED), 3.0 + i)
    assert sched.finished() and sched.counts() == {S.SUCCEEDED: 6} and empty(sched.window)


def test_a_step_cancelled_in_the_middle_of_a_chain_hands_its_follower_to_its_predecessor_as_the_node_does():
    sched, _ = chained([node("n1", 1)], *steps(4))
    out = sched.handle(Cancel(("s2",), "not wanted"), 1.0)
    assert out == [Kill("s2", 1, "not wanted")]
    out = sched.handle(StepExited("s2", 1, S.CANCELLED, "cancelled before it started"), 1.1)
    assert of(Finished, out) == [Finished("s2", 1, S.CANCELLED, "cancelled before it started", ran=False)]
    assert sched.window.after("s3") == "s1" and sched.window.after("s1") == "s0"
    out = sched.handle(StepExited("s0", 1, S.SUCCEEDED), 2.0)
    assert [d.step for d in of(Begin, out)] == ["s1"]
    out = sched.handle(StepExited("s1", 1, S.SUCCEEDED), 3.0)
    assert of(Begin, out) == [Begin("s3", 1, (slot("n1", [0]),), "s1")]


def test_a_tail_being_cancelled_takes_nothing_behind_it_until_its_node_answers():
    # Its node drops it when the Kill arrives: a launch queued behind it then would start at once.
    sched, _ = chained([node("n1", 1)], *steps(6))
    assert sched.handle(Cancel(("s3",), "no"), 1.0) == [Kill("s3", 1, "no")]
    out = sched.handle(StepExited("s0", 1, S.SUCCEEDED), 2.0)
    assert [d.step for d in of(Begin, out)] == ["s1"] and queued(out) == []
    out = sched.handle(StepExited("s3", 1, S.CANCELLED, "cancelled before it started"), 2.1)
    assert queued(out) == [("s4", "s2"), ("s5", "s4")]  # the chain's tail is s2 again


def test_a_lost_node_returns_every_step_of_its_chains_to_the_ready_steps_with_their_attempts_unused():
    sched, _ = chained([node("n1", 2), node("n2", 1)], *steps(12))
    on_n1 = [d for d in sched.window.behind if sched.queued(d)[1][0].node == "n1"]
    assert len(on_n1) == 6
    out = sched.handle(NodeLost("n1", "gone"), 1.0)
    assert sorted(d.step for d in of(Unqueued, out)) == sorted(on_n1)
    assert all(d.attempt == 1 for d in of(Unqueued, out))
    assert not [s for s in sched.window.behind if sched.queued(s)[1][0].node == "n1"]
    assert "n1" not in sched.window.count


def test_only_a_chains_tail_is_taken_back_when_cores_free_elsewhere():
    sched, out = chained([node("n1", 1)], {"id": "long"}, *steps(3))
    assert queued(out) == [("s0", "long"), ("s1", "s0"), ("s2", "s1")]
    out = sched.handle(NodeJoined(node("n2", 1)), 1.0)
    assert of(Withdraw, out) == [Withdraw("s2", 1, "taken back from n1: cores came free elsewhere before 's1' ended")]
    out = sched.handle(StepExited("s2", 1, S.CANCELLED, DROPPED), 1.1)
    assert of(Start, out) == [Start("s2", 1, (slot("n2", [0]),))]
    assert sched.window.after("s1") == "s0" and sched.window.after("s0") == "long"


def test_a_step_of_higher_priority_takes_the_chain_back_from_the_first_step_that_comes_after_it():
    # As above, but the late step has priority 1: the chain's tail (s1) is taken back at
    # once, and late takes its place in the chain, behind s0; s1 goes behind late.
    sched, out = chained([node("n1", 1)], {"id": "first", "estimate": 2}, *steps(2, estimate=3), depth=2,
                         reserve_after=1.0)
    out = sched.handle(submission(suite({"id": "late", "priority": 1, "estimate": 1}).steps), 0.5)
    assert [d.step for d in of(Withdraw, out)] == ["s1"]
    out = sched.handle(StepExited("s1", 1, S.CANCELLED, "withdrawn before it started"), 0.6)
    assert of(Unqueued, out) and queued(out) == [("late", "s0")]
    out = sched.handle(StepExited("first", 1, S.SUCCEEDED), 2.0)  # s0 begins where it waits
    assert [d.step for d in of(Begin, out)] == ["s0"] and queued(out) == [("s1", "late")]
    out = sched.handle(StepExited("s0", 1, S.SUCCEEDED), 5.0)
    assert [d.step for d in of(Begin, out)] == ["late"]


def test_the_same_events_give_the_same_decisions_with_chains():
    def run():
        sched, out = chained([node("n1", 2), node("n2", 2)], *steps(40, estimate=2), depth=4)
        log = [out]
        running, now = [(d.step, d.attempt) for d in out if isinstance(d, Start)], 0.0
        while running:
            now += 0.5
            step, attempt = running.pop(0)
            out = sched.handle(StepExited(step, attempt, S.SUCCEEDED), now)
            log.append(out)
            running += [(d.step, d.attempt) for d in out if isinstance(d, (Start, Begin))]
        return log, sched
    (a, sa), (b, _) = run(), run()
    assert a == b and sa.finished() and sa.counts() == {S.SUCCEEDED: 40}


@pytest.mark.parametrize("depth", [2, 4])
def test_once_every_step_has_ended_a_chained_window_keeps_nothing_of_them(depth):
    # 3 nodes of 4 cores, 400 steps of two demands, some failing and retried, one node lost
    # and some steps cancelled on the way: every table of the window is empty at the end.
    sched, out = chained([node("n1", 4), node("n2", 4), node("n3", 4)],
                         *steps(300, estimate=2, retries=1), *[dict(id=f"w{i}", cores=2, retries=1) for i in range(100)],
                         depth=depth)
    running, now, lost, seen, killed = [], 0.0, False, [], set()
    while not sched.finished():
        seen += [type(d).__name__ for d in out]
        running += [(d.step, d.attempt) for d in out if isinstance(d, (Start, Begin))]
        for d in of(Kill, out):  # a node drops a queued step it is asked to
            if sched.state(d.step) == S.QUEUED:
                killed.add((d.step, d.attempt))
        now += 1.0
        if not lost and now == 20.0:
            out, lost = sched.handle(NodeLost("n2", "gone"), now), True
            running = [(s, a) for s, a in running if sched.state(s) == S.RUNNING]
            continue
        if now == 30.0:
            out = sched.handle(Cancel(tuple(s for s in sorted(sched.window.behind)[:5]), "not wanted"), now)
            continue
        if killed:
            step, attempt = killed.pop()
            out = sched.handle(StepExited(step, attempt, S.CANCELLED, "cancelled before it started"), now)
            continue
        assert running, "nothing runs and the suite is not finished"
        step, attempt = running.pop(0)
        outcome = S.FAILED if step.endswith("7") and attempt == 1 else S.SUCCEEDED
        out = sched.handle(StepExited(step, attempt, outcome), now)
    counts = sched.counts()
    assert lost and counts.get(S.CANCELLED) == 5 and counts[S.SUCCEEDED] == 395
    assert seen.count("Begin") > 100 and seen.count("Unqueued") > 0 and seen.count("Retry") > 0, set(seen)
    assert empty(sched.window)


def test_a_queued_step_promoted_and_dropped_in_the_same_batch_hands_its_follower_on():
    # Its node dropped s1 (cancelled) before s0 ended; the coordinator reads both in one
    # batch. The node started s2 behind s0 then: s2 runs, on s0's core, and s1 never ran.
    sched, _ = chained([node("n1", 1)], *steps(4))
    sched.handle(Cancel(("s1",), "no"), 1.0)
    out = sched.handle(Exits((StepExited("s0", 1, S.SUCCEEDED), StepExited("s1", 1, S.CANCELLED, "cancelled"))), 2.0)
    assert of(Finished, out)[-1].step == "s1" and sched.state("s1") == S.CANCELLED
    assert [d.step for d in of(Begin, out)] == ["s2"] and sched.state("s2") == S.RUNNING
    assert sched.pool.free_cores == 0 and of(Retry, out) == []


def test_a_simulated_suite_with_chains_never_runs_more_than_a_nodes_cores_and_ends_as_without():
    from fleet.core.graph import build_graph
    from fleet.core.simulate import pretend_nodes, simulate
    tables = [{"id": f"s{i}", "cores": 1 + i % 3, "estimate": 1 + (i * 7) % 5,
               **({"deps": [f"s{i - 5}"]} if i % 4 == 0 and i >= 5 else {})} for i in range(120)]
    tables += [{"id": f"u{i}"} for i in range(10)]  # no estimate: 1 s in the simulation, unknown to the scheduler
    steps = suite(*tables).steps
    nodes = pretend_nodes(3, 4)
    plain = simulate(steps, build_graph(steps)[0], nodes, window=None)
    deep = simulate(steps, build_graph(steps)[0], nodes, window=None, depth=4)
    assert deep == simulate(steps, build_graph(steps)[0], nodes, window=None, depth=4)  # deterministic
    assert len(deep.steps) == len(plain.steps) == 130 and not deep.unrunnable and not deep.blocked
    for n in nodes:
        on = [s for s in deep.steps.values() if s.nodes == (n.name,)]
        for t in sorted({s.start_s for s in on}):
            assert sum(s.cores for s in on if s.start_s <= t < s.end_s) <= len(n.cores), (n.name, t)
    assert deep.makespan_s <= plain.makespan_s * 1.25  # chains commit ahead; here they cost little


def test_a_step_leaving_the_middle_of_a_chain_brings_the_expected_ends_of_all_behind_it_forward():
    # first (2 s) runs; s0, s1, s2 (3 s each) wait behind it: they end at 5, 8 and 11 s.
    sched, out = chained([node("n1", 1)], {"id": "first", "estimate": 2}, *steps(3, estimate=3))
    assert queued(out) == [("s0", "first"), ("s1", "s0"), ("s2", "s1")]
    assert [sched.window.ends[s] for s in ("s0", "s1", "s2")] == [5.0, 8.0, 11.0]
    sched.handle(Cancel(("s0",), "not wanted"), 1.0)
    sched.handle(StepExited("s0", 1, S.CANCELLED, "cancelled before it started"), 1.1)
    assert sched.window.after("s1") == "first"
    assert [sched.window.ends[s] for s in ("s1", "s2")] == [5.0, 8.0]  # s2's, too, not only its follower's




def test_a_reservation_waits_for_the_chain_queued_before_its_step_in_the_order():
    # One node of two cores: `first` (2 s) with a chain of two 3-s steps behind it,
    # `other` (6 s) beside it; the 2-core `late` (priority 3) comes after the chain
    # (priority 2), so nothing is taken back for it, and its plan, made while first still
    # runs, waits for the chain's tail: 2 + 3 + 3 = 8 s (its head alone: other's 6 s).
    def plan(s1_priority):
        sched, out = chained([node("n1", 2)], {"id": "first", "estimate": 2, "priority": 1},
                             {"id": "other", "estimate": 6, "priority": 1}, {"id": "s0", "estimate": 3, "priority": 2},
                             {"id": "s1", "estimate": 3, "priority": s1_priority},
                             {"id": "late", "cores": 2, "estimate": 1, "priority": 3}, depth=2, reserve_after=1.0)
        q = queued(out)
        log = sched.handle(submission(suite({"id": "filler", "estimate": 1, "priority": 5}).steps), 1.5)
        assert not of(Withdraw, log) and not of(Start, log)
        return q, [(p.job.spec.id, p.shadow) for p in sched._res.plans.values()]
    assert plan(2) == ([("s0", "first"), ("s1", "s0")], [("late", 8.0)])
    # s1 after late in the order (priority 4) is not queued at all; the plan is other's end.
    assert plan(4) == ([("s0", "first")], [("late", 6.0)])
