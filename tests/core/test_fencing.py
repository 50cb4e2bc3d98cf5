"""A lost node's steps run elsewhere only once its own side must have stopped them
(fleet.core.fencing): its resources go at once, its steps at the hold's end, told by
the shell's timer (Fenced) with its time."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.scheduler import (Cancel, Finished, Ignored, NodeJoined, NodeLost, Retry, Scheduler, Start, StepExited,
                                  Unrunnable, submission)
from fleet.core.fencing import Fenced
from fleet.core.deadline import AllocationEnds, DrainNow
from fleet.core.resources import NodeSpec
from fleet.core.window import Begin, Queue, Unqueued, Withdraw

from coretools import node, slot, suite  # noqa: E402

GiB = 1 << 30


def of(kind, decisions):
    return [d for d in decisions if isinstance(d, kind)]


def fleet_of(nodes, *tables, window=0):
    sched = Scheduler(window=window)
    for n in nodes:
        sched.handle(NodeJoined(n), 0.0)
    return sched, sched.handle(submission(suite(*tables).steps), 0.0)


def test_a_lost_nodes_steps_run_elsewhere_only_once_its_fence_has_passed_and_its_cores_go_at_once():
    sched, out = fleet_of([node("n1", 1), node("n2", 1)], {"id": "a", "retries": 1}, {"id": "b"})
    assert {d.step: d.placement[0].node for d in of(Start, out)} == {"a": "n1", "b": "n2"}
    out = sched.handle(NodeLost("n1", "agent missed heartbeats", fence_s=10.5), 100.0)
    assert out == [] and sched.state("a") == S.RUNNING  # held: its node may still run it
    assert sched.pool.free_cores == 0 and sched.pool.total_cores == 1  # n1's core is gone now
    assert sched.fencing.due() == 110.5
    out = sched.handle(StepExited("b", 1, S.SUCCEEDED), 105.0)  # n2 frees: a is not started there yet
    assert of(Start, out) == [] and sched.state("a") == S.RUNNING and sched.pool.free_cores == 1
    out = sched.handle(Fenced(), 110.5)
    assert of(Finished, out) == [Finished("a", 1, S.LOST, "agent missed heartbeats", goes_on=True)]
    assert of(Retry, out) == [Retry("a", 2, "attempt 1 lost")]
    assert of(Start, out) == [Start("a", 2, (slot("n2", [0]),))]
    assert sched.fencing.due() is None


def test_a_timer_that_fires_early_releases_nothing_and_holds_end_in_their_order():
    sched, out = fleet_of([node("n1", 1), node("n2", 1), node("n3", 1)], {"id": "a"}, {"id": "b"}, {"id": "c"})
    sched.handle(NodeLost("n1", "gone", fence_s=5.0), 10.0)
    sched.handle(NodeLost("n2", "gone", fence_s=5.0), 12.0)
    assert sched.handle(Fenced(), 14.9) == []
    out = sched.handle(Fenced(), 16.0)
    assert [d.step for d in of(Finished, out)] == ["a"] and sched.state("b") == S.RUNNING
    out = sched.handle(Fenced(), 17.0)
    assert [d.step for d in of(Finished, out)] == ["b"] and sched.fencing.due() is None


def test_a_node_lost_with_no_fence_or_while_the_fleet_drains_ends_its_steps_at_once():
    sched, _ = fleet_of([node("n1", 1), node("n2", 1)], {"id": "a"}, {"id": "b"})
    out = sched.handle(NodeLost("n1", "the agent stopped on its own"), 1.0)  # it stopped them before its goodbye
    assert [d.step for d in of(Finished, out)] == ["a"] and sched.fencing.due() is None
    sched.handle(AllocationEnds(end=100.0, drain_at=50.0, source="test"), 2.0)
    sched.handle(DrainNow("the allocation ends"), 50.0)
    sched.handle(NodeLost("n2", "gone", fence_s=10.0), 51.0)  # nothing starts again: nothing to wait for
    assert sched.fencing.due() is None and sched.state("b") != S.RUNNING


def test_steps_queued_on_a_lost_node_wait_for_its_fence_too_and_nothing_more_is_queued_there():
    # Its node may have started a queued step (its predecessor ended there) unknown to us.
    sched, out = fleet_of([node("n1", 1), node("n2", 1)], *[{"id": f"s{i}"} for i in range(5)], window=None)
    assert {d.step: d.placement[0].node for d in of(Queue, out)} == {"s2": "n1", "s3": "n2"}
    out = sched.handle(NodeLost("n1", "gone", fence_s=4.0), 1.0)
    assert out == [] and sched.state("s2") == S.QUEUED
    out = sched.handle(StepExited("s1", 1, S.SUCCEEDED), 2.0)  # n2's: its queued s3 begins, s4 queued there
    assert of(Begin, out) == [Begin("s3", 1, (slot("n2", [0]),), "s1")]
    assert [(d.step, d.placement[0].node) for d in of(Queue, out)] == [("s4", "n2")]
    out = sched.handle(Fenced(), 5.0)
    assert Unqueued("s2", 1, "n1 was lost before its start was heard (gone); it may have started there: it runs again as attempt 2", True) in out
    assert of(Finished, out) == [Finished("s0", 1, S.LOST, "gone")]
    assert sched.state("s2") in (S.READY, S.QUEUED) and sched.view("s2").attempt == 2


def test_a_step_that_fits_nowhere_once_a_node_is_lost_is_reported_at_the_loss():
    sched, _ = fleet_of([node("n1", 2), node("n2", 1)], {"id": "a"}, {"id": "wide", "cores": 2, "deps": ["a"]})
    out = sched.handle(NodeLost("n1", "gone", fence_s=10.0), 1.0)
    assert [d.step for d in of(Unrunnable, out)] == ["wide"] and sched.state("a") == S.RUNNING


def test_a_held_node_that_joins_again_ends_its_old_steps_first():
    sched, _ = fleet_of([node("n1", 1)], {"id": "a", "retries": 1})
    sched.handle(NodeLost("n1", "gone", fence_s=10.0), 1.0)
    out = sched.handle(NodeJoined(node("n1", 1)), 2.0)
    assert of(Finished, out) == [Finished("a", 1, S.LOST, "gone", goes_on=True)]
    assert of(Start, out) == [Start("a", 2, (slot("n1", [0]),))] and sched.fencing.due() is None
    assert of(Ignored, sched.handle(Fenced(), 20.0)) == []


def test_a_drain_ends_every_hold_as_the_loss_did_before_and_starts_none_of_its_steps():
    sched, _ = fleet_of([node("n1", 1), node("n2", 1)], {"id": "a", "retries": 1}, {"id": "b"})
    sched.handle(AllocationEnds(end=100.0, drain_at=50.0, source="test"), 1.0)
    sched.handle(NodeLost("n1", "gone", fence_s=10.0), 45.0)
    out = sched.handle(DrainNow("the allocation ends"), 50.0)
    assert of(Finished, out) == [Finished("a", 1, S.LOST, "gone", goes_on=True)] and of(Start, out) == []
    assert sched.fencing.due() is None and sched.state("a") != S.RUNNING


def test_a_step_over_two_nodes_held_for_one_is_not_retried_when_the_other_says_goodbye():
    # Its first node (where its launcher runs) is lost and held; its other node's agent
    # then stops on its own (no hold): the step may still run on the first until its hold ends.
    sched, out = fleet_of([node(n, 2) for n in ("A", "B", "C", "D")],
                          {"id": "w", "cores": 4, "min_cores": 4, "span": True, "retries": 2})
    assert [s.node for s in of(Start, out)[0].placement] == ["A", "B"]
    assert sched.handle(NodeLost("A", "agent missed heartbeats", fence_s=10.0), 1.0) == []
    out = sched.handle(NodeLost("B", "the agent stopped on its own"), 2.0)
    assert of(Finished, out) == [] and of(Start, out) == [] and sched.state("w") == S.RUNNING
    out = sched.handle(Fenced(), 11.0)
    assert of(Finished, out) == [Finished("w", 1, S.LOST, "agent missed heartbeats", goes_on=True)]
    assert [s.node for s in of(Start, out)[0].placement] == ["C", "D"] and sched.fencing.held == {}


def test_a_step_over_two_held_nodes_ends_at_the_later_hold_not_the_first():
    sched, _ = fleet_of([node(n, 2) for n in ("A", "B", "C", "D")],
                        {"id": "w", "cores": 4, "min_cores": 4, "span": True, "retries": 2})
    sched.handle(NodeLost("B", "unreachable", fence_s=4.0), 1.0)  # ends at 5
    sched.handle(NodeLost("A", "agent missed heartbeats", fence_s=10.0), 2.0)  # ends at 12
    out = sched.handle(Fenced(), 5.0)
    assert of(Finished, out) == [] and of(Start, out) == [] and sched.state("w") == S.RUNNING
    out = sched.handle(Fenced(), 12.0)
    assert [d.step for d in of(Finished, out)] == ["w"] and [d.step for d in of(Start, out)] == ["w"]


def test_a_held_step_cancelled_ends_cancelled_with_both_the_cancel_and_the_loss_in_its_reason():
    sched, _ = fleet_of([node("n1", 1), node("n2", 1)], {"id": "a"}, {"id": "b"})
    sched.handle(NodeLost("n1", "agent missed heartbeats", fence_s=5.0), 1.0)
    sched.handle(Cancel(("a",)), 2.0)
    out = sched.handle(Fenced(), 6.0)
    assert of(Finished, out) == [Finished("a", 1, S.CANCELLED, "cancelled (agent missed heartbeats)")]


def test_a_node_back_while_a_step_that_ran_there_is_held_elsewhere_is_not_given_that_steps_part_twice():
    # An MPI step over A and B; both lost with holds; B's hold ends and B joins again
    # before A's does: when the step ends, its old part on B must not go to the new B.
    sched = Scheduler()
    for n in ("A", "B"):
        sched.handle(NodeJoined(NodeSpec(n, (0, 1), (0,), 2 * GiB)), 0.0)
    sched.handle(submission(suite({"id": "mpi", "command": "x", "mpi": True, "ranks": 4, "gpus": 2}).steps), 0.0)
    sched.handle(NodeLost("B", "agent missed heartbeats", fence_s=30.0), 1.0)
    sched.handle(NodeLost("A", "agent missed heartbeats", fence_s=30.0), 5.0)
    assert sched.handle(Fenced(), 31.0) == [] and sched.state("mpi") == S.RUNNING  # held for A still
    sched.handle(NodeJoined(NodeSpec("B", (0, 1), (0,), 2 * GiB)), 33.0)
    out = sched.handle(Fenced(), 35.0)
    assert [d.step for d in of(Finished, out)] == ["mpi"]
    assert sched.pool.free_on("B") == (2, 1, 2 * GiB)  # what B has, not twice that


def test_nothing_is_queued_behind_a_step_queued_on_a_held_node_nor_taken_back_from_it():
    sched = Scheduler(window=2, depth=2)
    for n in ("n0", "n1"):
        sched.handle(NodeJoined(NodeSpec(n, (0,), (), GiB)), 0.0)
    out = sched.handle(submission(suite({"id": "a", "command": "x"}, {"id": "b", "command": "x", "memory": "1GiB"},
                                        {"id": "c", "command": "x"}).steps), 0.0)
    assert [(d.step, d.after) for d in of(Queue, out)] == [("c", "a")]
    sched.handle(NodeLost("n0", "agent missed heartbeats", fence_s=30.0), 1.0)
    out = sched.handle(submission(suite({"id": "d", "command": "x"}).steps), 2.0)
    assert of(Queue, out) == []  # not behind c, queued on the held n0 (it may run there)
    out = sched.handle(StepExited("b", 1, S.SUCCEEDED), 5.0)
    assert [d.step for d in of(Start, out)] == ["d"]
    out = sched.handle(StepExited("d", 1, S.SUCCEEDED), 6.0)
    assert of(Withdraw, out) == []  # c is not taken back from a node that cannot answer
    out = sched.handle(Fenced(), 31.0)
    assert [d.step for d in of(Unqueued, out)] == ["c"] and [d.step for d in of(Start, out)] == ["c"]


def test_a_chain_of_queued_steps_on_a_held_node_is_undone_at_its_fence_and_its_steps_run_elsewhere():
    # --window-depth 2: c queued behind a, e behind c on n0. The hold closed the chain; its
    # end reopened c as the tail (KeyError: the gpufuzz audit), and a stayed running there.
    sched = Scheduler(window=2, depth=2)
    for n in (node("n0", 1), node("n1", 1)):
        sched.handle(NodeJoined(n), 0.0)
    out = sched.handle(submission(suite(*({"id": s} for s in "abcdef")).steps), 0.0)
    assert [(d.step, d.after) for d in of(Queue, out) if d.placement[0].node == "n0"] == [("c", "a"), ("e", "c")]
    assert sched.handle(NodeLost("n0", "silent", fence_s=5.0), 1.0) == []
    out = sched.handle(Fenced(), 6.0)
    assert [d.step for d in of(Unqueued, out)] == ["c", "e"]
    assert of(Finished, out) == [Finished("a", 1, S.LOST, "silent")] and sched.fencing.due() is None
    for t, sid in enumerate("bdfce", start=10):  # n1 runs the rest, one after another (c, e: their next attempts)
        sched.handle(StepExited(sid, 2 if sid in "ce" else 1, S.SUCCEEDED), float(t))
    assert {s: sched.state(s) for s in "bcdef"} == dict.fromkeys("bcdef", S.SUCCEEDED) and sched.finished()
