"""The resource model: nodes one by one, widths decided once from the whole
allocation, placements that never overcommit a node, and lost nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.control.checks import fit_problems
from fleet.core.graph import build_graph
from fleet.core.resources import Capacity, Demand, NodeSpec, Pool, Slot
from fleet.core.scheduler import (Blocked, Finished, Ignored, NodeJoined, NodeLost, Retry, Start, StepExited,
                             Unrunnable, Wait)
from fleet.core.simulate import simulate
from fleet.core.suite import parse_suite

from coretools import GiB, WaitSaying, node, scheduler, slot, suite  # noqa: E402


def ok(step, now, sched, attempt=1):
    return sched.handle(StepExited(step, attempt, "succeeded"), now)


# --- widths, decided once from the whole allocation ----------------------------------------------

def test_a_step_gets_its_target_width_when_the_allocation_holds_it():
    cap = Capacity.of([node("a", 4), node("b", 8)])
    assert cap.width(4, 4, 1, 0, None, False) == 4
    assert cap.width(8, 1, 1, 0, None, False) == 8
    assert cap.width(12, 1, 1, 0, None, True) == 12


def test_a_small_allocation_reduces_a_step_toward_its_minimum_and_no_further():
    cap = Capacity.of([node("a", 4), node("b", 8)])
    assert cap.width(16, 2, 1, 0, None, False) == 8      # the largest node
    assert cap.width(16, 2, 1, 0, None, True) == 12      # the whole allocation
    assert cap.width(16, 8, 1, 0, None, False) == 8
    assert isinstance(cap.width(16, 9, 1, 0, None, False), str)
    assert isinstance(cap.width(16, 13, 1, 0, None, True), str)


def test_an_mpi_width_is_whole_ranks_on_every_node():
    cap = Capacity.of([node("a", 4), node("b", 8)])
    # 3 threads per rank: one rank fits on a, two on b.
    assert cap.width(12, 3, 3, 0, None, True) == 9
    assert cap.width(12, 3, 3, 0, None, False) == 6
    assert "needs at least 12 cores; the allocation has 9" == cap.width(12, 12, 3, 0, None, True)


def test_gpus_and_memory_limit_which_nodes_count_for_a_step_that_may_not_span():
    cap = Capacity.of([node("gpu", 4, gpus=2), node("big", 16, memory=64 * GiB)])
    assert cap.width(16, 1, 1, 1, None, False) == 4
    assert cap.width(16, 1, 1, 0, 32 * GiB, False) == 16
    assert cap.width(16, 1, 1, 0, None, False) == 16
    assert cap.width(16, 1, 1, 3, None, False) == "no node has 3 GPUs (the step may not span nodes)"
    # Each alone some node has; the two together none: said so (not as if neither existed).
    assert cap.width(1, 1, 1, 1, 32 * GiB, False) == (
        "no node has both 1 GPU and 32GiB of memory (the step may not span nodes)")
    assert cap.width(1, 1, 1, 0, None, False) == 1


def test_a_step_short_only_of_gpus_is_told_of_gpus_alone_not_of_the_memory_every_node_has():
    cap = Capacity.of([node(f"n{i}", 2, gpus=4, memory=1024 * GiB) for i in range(4)])
    assert cap.width(1, 1, 1, 8, 500 * GiB, False) == "no node has 8 GPUs (the step may not span nodes)"
    assert cap.width(1, 1, 1, 2, 2048 * GiB, False) == "no node has 2TiB of memory (the step may not span nodes)"
    assert cap.width(1, 1, 1, 8, 2048 * GiB, False) == (
        "no node has 8 GPUs and 2TiB of memory (the step may not span nodes)")


def test_an_mpi_rank_wider_than_every_node_is_said_as_such_not_as_an_allocation_of_no_cores():
    cap = Capacity.of([node(f"n{i}", 2) for i in range(4)])
    why = "a rank needs 3 cores on one node; the largest node has 2"
    assert cap.width(3, 3, 3, 0, None, True) == why
    assert cap.width(3, 3, 3, 0, None, False) == why


def test_an_empty_allocation_runs_nothing():
    assert Capacity.of([]).width(1, 1, 1, 0, None, False) == "the allocation has no nodes"


def test_a_step_reduced_by_a_small_allocation_starts_at_its_reduced_width():
    sched, out = scheduler([node("n1", 4)], {"id": "wide", "cores": 8, "min_cores": 2})
    assert out == [Start("wide", 1, (slot("n1", range(4), memory=4 * GiB),))]


def test_a_width_is_never_decided_from_what_happens_to_be_free():
    sched, out = scheduler([node("n1", 4)], {"id": "small"}, {"id": "wide", "cores": 8, "min_cores": 2})
    assert out == [Start("small", 1, (slot("n1", [0]),)), WaitSaying("wide", "needs 4 cores, 3 free", 0)]
    assert ok("small", 1.0, sched) == [Finished("small", 1, "succeeded"),
                                       Start("wide", 1, (slot("n1", range(4), memory=4 * GiB),))]


# --- impossible steps are reported before anything runs -------------------------------------------

def test_minimums_larger_than_the_allocation_are_reported_before_the_run_naming_step_and_field():
    s = suite(
        {"id": "fits", "cores": 8, "min_cores": 2},
        {"id": "wide", "cores": 8, "min_cores": 6},
        {"id": "spans", "cores": 8, "min_cores": 6, "span": True},
        {"id": "huge", "cores": 9, "span": True},
        {"id": "mpi", "mpi": True, "ranks": 10},
        {"id": "threads", "mpi": True, "ranks": 3, "threads": 3},
        {"id": "gpu", "gpus": 1},
        {"id": "mem", "memory": "5GiB"},
    )
    nodes = [node("n1", 4), node("n2", 4)]
    problems = fit_problems(s, nodes)
    assert [(p.step, p.field) for p in problems] == [
        # The field the user wrote: the minimum where one was given, else the target.
        ("wide", "min_cores"), ("huge", "cores"), ("mpi", "ranks"), ("threads", "ranks"),
        ("gpu", "gpus"), ("mem", "memory"),
    ]
    assert all(p.file == "/x/suite.toml" and p.message.startswith("can never run on this allocation: ")
               for p in problems)
    assert problems[0].message.endswith(
        "needs at least 6 cores on one node; the largest node that could hold it has 4 (the step may not span nodes)")
    assert problems[1].message.endswith("needs at least 9 cores; the allocation has 8")
    assert problems[3].message.endswith("needs at least 9 cores; the allocation has 6")


def test_every_step_of_one_impossible_demand_is_reported_each_with_the_field_it_wrote():
    s = suite(
        {"id": "a", "cores": 6, "min_cores": 6},
        {"id": "ok", "cores": 2},
        {"id": "b", "cores": 6},  # the same demand as a, written as a target alone
        {"id": "c", "cores": 6, "min_cores": 6},
        {"id": "m", "mpi": True, "ranks": 10},  # MPI steps span: this one is too wide for all
        {"id": "m2", "mpi": True, "ranks": 10},
    )
    problems = fit_problems(s, [node("n1", 4), node("n2", 4)])
    assert [(p.step, p.field) for p in problems] == [("a", "cores"), ("b", "cores"), ("c", "cores"),
                                                     ("m", "ranks"), ("m2", "ranks")]
    assert len({p.message for p in problems[:3]}) == 1 and problems[3].message == problems[4].message


def test_the_scheduler_reports_an_impossible_step_as_unrunnable_and_blocks_its_dependents():
    sched, out = scheduler([node("n1", 4)],
                           {"id": "wide", "cores": 6, "min_cores": 6},
                           {"id": "after", "deps": ["wide"]},
                           {"id": "other"})
    assert out == [
        Unrunnable("wide", "needs at least 6 cores on one node; the largest node that could hold it has 4 "
                           "(the step may not span nodes)"),
        Blocked("after", "wide"),
        Start("other", 1, (slot("n1", [0]),)),
    ]
    assert ok("other", 1.0, sched) == [Finished("other", 1, "succeeded")]
    assert sched.finished()
    assert sched.counts() == {"unrunnable": 1, "blocked": 1, "succeeded": 1}


# --- placing ----------------------------------------------------------------------------------------

def test_steps_that_all_fit_start_at_once_packed_onto_exact_cores():
    sched, out = scheduler([node("n1", 4), node("n2", 4)], {"id": "a", "cores": 2}, {"id": "b", "cores": 2},
                           {"id": "c", "cores": 4})
    assert out == [
        Start("a", 1, (slot("n1", [0, 1], memory=2 * GiB),)),
        Start("b", 1, (slot("n1", [2, 3], memory=2 * GiB),)),
        Start("c", 1, (slot("n2", [0, 1, 2, 3], memory=4 * GiB),)),
    ]
    assert sched.pool.free_cores == 0
    assert sched.pool.free_on("n1") == (0, 0, 0)


def test_when_only_some_fit_the_rest_wait_and_start_as_cores_come_back():
    sched, out = scheduler([node("n1", 4)], {"id": "a", "cores": 3}, {"id": "b", "cores": 2},
                           {"id": "c"}, {"id": "d", "cores": 2})
    assert out == [
        Start("a", 1, (slot("n1", [0, 1, 2], memory=3 * GiB),)),
        WaitSaying("b", "needs 2 cores, 1 free", 1),
        Start("c", 1, (slot("n1", [3]),)),
    ]
    assert ok("a", 2.0, sched) == [
        Finished("a", 1, "succeeded"),
        Start("b", 1, (slot("n1", [0, 1], memory=2 * GiB),)),
        WaitSaying("d", "needs 2 cores, 1 free", 0),
    ]
    assert ok("c", 3.0, sched) == [Finished("c", 1, "succeeded"), Start("d", 1, (slot("n1", [2, 3], memory=2 * GiB),))]
    assert ok("b", 4.0, sched) == [Finished("b", 1, "succeeded")]
    assert ok("d", 5.0, sched) == [Finished("d", 1, "succeeded")]
    assert sched.finished()


def test_a_step_that_may_not_span_waits_when_cores_are_free_only_across_nodes_and_starts_when_a_node_frees():
    sched, out = scheduler([node("n1", 4), node("n2", 4)], {"id": "a", "cores": 3}, {"id": "b", "cores": 3},
                           {"id": "c", "cores": 2})
    assert out == [
        Start("a", 1, (slot("n1", [0, 1, 2], memory=3 * GiB),)),
        Start("b", 1, (slot("n2", [0, 1, 2], memory=3 * GiB),)),
        WaitSaying("c", "no node has 2 cores free together (the step may not span nodes)", 0),
    ]
    # No overcommit: the two free cores stay free, one on each node.
    assert sched.pool.free_on("n1")[0] == 1 and sched.pool.free_on("n2")[0] == 1
    assert sched.state("c") == "ready"
    assert ok("b", 1.0, sched) == [Finished("b", 1, "succeeded"),
                                   Start("c", 1, (slot("n2", [0, 1], memory=2 * GiB),))]
    assert ok("a", 2.0, sched) == [Finished("a", 1, "succeeded")]
    assert ok("c", 3.0, sched) == [Finished("c", 1, "succeeded")]
    assert sched.finished() and sched.counts() == {"succeeded": 3}


def test_a_step_that_may_span_takes_the_scattered_free_cores_at_once():
    sched, out = scheduler([node("n1", 4), node("n2", 4)], {"id": "a", "cores": 3}, {"id": "b", "cores": 3},
                           {"id": "c", "cores": 2, "span": True})
    assert out == [
        Start("a", 1, (slot("n1", [0, 1, 2], memory=3 * GiB),)),
        Start("b", 1, (slot("n2", [0, 1, 2], memory=3 * GiB),)),
        Start("c", 1, (slot("n1", [3]), slot("n2", [3]))),
    ]
    assert sched.pool.free_cores == 0


def test_a_spanning_step_takes_the_fewest_nodes_most_free_first():
    nodes = [node("n1", 4), node("n2", 8), node("n3", 8)]
    sched, out = scheduler(nodes, {"id": "a", "cores": 2}, {"id": "wide", "cores": 10, "span": True})
    assert out == [
        Start("a", 1, (slot("n1", [0, 1], memory=2 * GiB),)),
        Start("wide", 1, (slot("n2", range(8), memory=8 * GiB), slot("n3", [0, 1], memory=2 * GiB))),
    ]


def test_an_mpi_step_is_placed_in_whole_ranks_per_node():
    sched, out = scheduler([node("n1", 5), node("n2", 5)],
                           {"id": "m", "mpi": True, "ranks": 3, "threads": 2})
    assert out == [Start("m", 1, (slot("n1", range(4), memory=4 * GiB), slot("n2", [0, 1], memory=2 * GiB)))]


def test_cores_and_gpus_free_but_not_together_on_one_node_make_a_step_wait():
    nodes = [node("g1", 2, gpus=1), node("g2", 2, gpus=1)]
    sched, out = scheduler(nodes, {"id": "cpu", "cores": 2}, {"id": "gpu1", "gpus": 1}, {"id": "gpu2", "gpus": 1})
    assert out == [
        Start("cpu", 1, (slot("g1", [0, 1], memory=2 * GiB),)),
        Start("gpu1", 1, (slot("g2", [0], [0]),)),
        WaitSaying("gpu2", "no node has 1 core, 1 GPU free together (the step may not span nodes)", 0),
    ]
    assert (sched.pool.free_cores, sched.pool.free_gpus) == (1, 1)
    assert ok("cpu", 1.0, sched) == [Finished("cpu", 1, "succeeded"), Start("gpu2", 1, (slot("g1", [0], [0]),))]


def test_a_step_waits_for_gpus_when_every_gpu_is_taken():
    sched, out = scheduler([node("g1", 4, gpus=2)], {"id": "a", "gpus": 2}, {"id": "b", "gpus": 1})
    assert out == [Start("a", 1, (slot("g1", [0], [0, 1]),)), WaitSaying("b", "needs 1 GPU, 0 free", 0)]
    assert ok("a", 1.0, sched) == [Finished("a", 1, "succeeded"), Start("b", 1, (slot("g1", [0], [0]),))]


def test_a_spanning_step_with_one_gpu_per_rank_starts_across_nodes_with_its_gpus_beside_its_cores():
    nodes = [node("n1", 4, gpus=2), node("n2", 4, gpus=2)]
    sched, out = scheduler(nodes, {"id": "m", "mpi": True, "ranks": 4, "gpus": 4})
    assert out == [Start("m", 1, (slot("n1", [0, 1], [0, 1], memory=2 * GiB),
                                  slot("n2", [0, 1], [0, 1], memory=2 * GiB)))]
    assert ok("m", 1.0, sched) == [Finished("m", 1, "succeeded")]
    assert (sched.pool.free_cores, sched.pool.free_gpus) == (8, 4)


def test_a_step_waits_for_memory_while_cores_are_free_and_a_default_memory_step_still_starts():
    sched, out = scheduler([node("m1", 4, memory=4 * GiB)],
                           {"id": "a", "memory": "3GiB"}, {"id": "b", "memory": "2GiB"}, {"id": "c"})
    assert out == [
        Start("a", 1, (slot("m1", [0], memory=3 * GiB),)),
        WaitSaying("b", "no node has 1 core, 2GiB of memory free together (the step may not span nodes)", 0),
        Start("c", 1, (slot("m1", [1], memory=GiB),)),
    ]
    assert sched.pool.free_on("m1") == (2, 0, 0)
    assert ok("a", 1.0, sched) == [Finished("a", 1, "succeeded"), Start("b", 1, (slot("m1", [0], memory=2 * GiB),))]


def test_a_step_declaring_less_memory_than_its_share_packs_on_the_smaller_figure():
    big = {"id": "big", "memory": "3584MiB"}
    sched, out = scheduler([node("m1", 4, memory=4 * GiB)], dict(big), {"id": "lean", "cores": 2, "memory": "512MiB"})
    assert out == [
        Start("big", 1, (slot("m1", [0], memory=3584 * 2**20),)),
        Start("lean", 1, (slot("m1", [1, 2], memory=512 * 2**20),)),
    ]
    # The same step at its proportional share (2 GiB) would not fit beside `big`.
    sched, out = scheduler([node("m1", 4, memory=4 * GiB)], dict(big), {"id": "share", "cores": 2})
    assert out[0] == Start("big", 1, (slot("m1", [0], memory=3584 * 2**20),))
    assert len(out) == 2 and isinstance(out[1], Wait) and (out[1].step, out[1].behind) == ("share", 0)
    assert sched.pool.free_on("m1") == (3, 0, 512 * 2**20)


def test_a_spanning_step_with_declared_memory_takes_each_nodes_share_of_it():
    sched, out = scheduler([node("n1", 2), node("n2", 2)], {"id": "m", "cores": 4, "span": True, "memory": "1GiB"})
    assert out == [Start("m", 1, (slot("n1", [0, 1], memory=GiB // 2), slot("n2", [0, 1], memory=GiB // 2)))]


def test_reservations_are_returned_on_every_kind_of_exit():
    nodes = [node("n1", 4, gpus=1), node("n2", 4, gpus=1)]
    sched, out = scheduler(nodes, {"id": "ok", "cores": 3, "gpus": 1}, {"id": "bad", "cores": 2, "memory": "1GiB"},
                           {"id": "span", "cores": 3, "span": True})
    assert [type(d) for d in out] == [Start, Start, Start]
    assert sched.pool.free_cores == 0
    sched.handle(StepExited("ok", 1, "succeeded"), 1.0)
    sched.handle(StepExited("bad", 1, "failed", "exit 1"), 1.0)
    sched.handle(StepExited("span", 1, "terminated", "SIGKILL"), 1.0)
    assert sched.pool.free_on("n1") == (4, 1, 4 * GiB)
    assert sched.pool.free_on("n2") == (4, 1, 4 * GiB)
    assert (sched.pool.free_cores, sched.pool.free_gpus) == (8, 2)
    assert sched.running() == []


def test_nodes_that_differ_in_size_are_each_used_to_their_own_size():
    nodes = [node("small", 2), node("big", 8, memory=64 * GiB)]
    sched, out = scheduler(nodes, {"id": "a", "cores": 2}, {"id": "b", "cores": 6}, {"id": "c", "cores": 2},
                           {"id": "d", "cores": 16, "min_cores": 1})
    assert out == [
        Start("a", 1, (slot("small", [0, 1], memory=2 * GiB),)),   # best fit: the smaller node
        Start("b", 1, (slot("big", range(6), memory=48 * GiB),)),  # share of the big node's memory
        Start("c", 1, (slot("big", [6, 7], memory=16 * GiB),)),
        WaitSaying("d", "needs 8 cores, 0 free", 0),                     # reduced to the largest node
    ]
    ok("a", 1.0, sched)
    assert sched.state("d") == "ready"          # 2 cores on `small` do not hold 8
    ok("b", 2.0, sched)
    assert sched.state("d") == "ready"
    assert ok("c", 3.0, sched) == [Finished("c", 1, "succeeded"),
                                   Start("d", 1, (slot("big", range(8), memory=64 * GiB),))]


def test_a_one_core_step_goes_to_the_node_with_the_fewest_free_cores_that_holds_it():
    nodes = [node("n1", 8), node("n2", 2), node("n3", 4)]
    sched, out = scheduler(nodes, {"id": "a"}, {"id": "b", "cores": 3}, {"id": "c"}, {"id": "d"})
    assert out == [
        Start("a", 1, (slot("n2", [0]),)),
        Start("b", 1, (slot("n3", [0, 1, 2], memory=3 * GiB),)),
        Start("c", 1, (slot("n2", [1]),)),
        Start("d", 1, (slot("n3", [3]),)),
    ]


def test_a_pool_never_hands_out_a_core_twice_and_takes_back_what_it_gave():
    pool = Pool()
    pool.add(NodeSpec("n1", (3, 5, 7, 9), (1,), 4 * GiB))
    a = pool.place(Demand(cores=3))
    b = pool.place(Demand(cores=2))
    assert a == (Slot("n1", (3, 5, 7), (), 3 * GiB),)
    assert b is None
    c = pool.place(Demand(cores=1, gpus=1))
    assert c == (Slot("n1", (9,), (1,), GiB),)
    pool.release(a)
    assert pool.place(Demand(cores=2, memory=GiB)) == (Slot("n1", (3, 5), (), GiB),)
    with pytest.raises(ValueError):
        pool.add(NodeSpec("n1", (0,), (), 0))


# --- lost nodes ---------------------------------------------------------------------------------------

def test_a_lost_node_fails_its_running_steps_as_lost_and_they_are_retried_elsewhere_with_a_new_attempt():
    sched, out = scheduler([node("n1", 2), node("n2", 2)],
                           {"id": "a", "cores": 2, "retries": 1}, {"id": "b"})
    assert out == [Start("a", 1, (slot("n1", [0, 1], memory=2 * GiB),)), Start("b", 1, (slot("n2", [0]),))]
    assert sched.handle(NodeLost("n1", "missed 3 heartbeats"), 5.0) == [
        Finished("a", 1, "lost", "missed 3 heartbeats", goes_on=True),
        Retry("a", 2, "attempt 1 lost"),
        WaitSaying("a", "needs 2 cores, 1 free", 0),
    ]
    assert sched.view("a").attempt == 2
    assert not sched.pool.has("n1")
    # The exit of the lost attempt arrives late: it no longer applies.
    assert sched.handle(StepExited("a", 1, "succeeded"), 6.0) == [
        Ignored("exit of 'a' attempt 1: not running (now ready, attempt 2)")]
    assert ok("b", 7.0, sched) == [Finished("b", 1, "succeeded"),
                                   Start("a", 2, (slot("n2", [0, 1], memory=2 * GiB),))]
    assert sched.handle(StepExited("a", 1, "failed"), 8.0) == [
        Ignored("exit of 'a' attempt 1: not running (now running, attempt 2)")]
    assert ok("a", 9.0, sched, attempt=2) == [Finished("a", 2, "succeeded")]
    assert sched.handle(StepExited("a", 2, "succeeded"), 10.0) == [
        Ignored("exit of 'a' attempt 2: not running (now succeeded, attempt 2)")]
    assert sched.finished()


def test_a_step_lost_with_no_retries_left_fails_and_blocks_its_dependents():
    sched, out = scheduler([node("n1", 1), node("n2", 1)], {"id": "a"}, {"id": "x"}, {"id": "b", "deps": ["a"]})
    assert out == [Start("a", 1, (slot("n1", [0]),)), Start("x", 1, (slot("n2", [0]),))]
    assert sched.handle(NodeLost("n1"), 1.0) == [Finished("a", 1, "lost", "node lost"), Blocked("b", "a")]
    assert sched.state("x") == "running"
    assert ok("x", 2.0, sched) == [Finished("x", 1, "succeeded")]
    assert sched.finished()
    assert sched.counts() == {"lost": 1, "blocked": 1, "succeeded": 1}


def test_losing_one_node_of_a_spanning_step_gives_back_its_cores_on_the_others():
    sched, out = scheduler([node("n1", 2), node("n2", 2)], {"id": "m", "cores": 4, "span": True})
    assert [type(d) for d in out] == [Start]
    assert sched.handle(NodeLost("n2"), 1.0) == [Finished("m", 1, "lost", "node lost")]
    assert sched.pool.free_on("n1") == (2, 0, 2 * GiB)
    assert sched.pool.free_cores == 2


def test_a_waiting_step_that_no_longer_fits_after_a_node_is_lost_is_reported_unrunnable():
    sched, out = scheduler([node("n1", 2), node("n2", 4)], {"id": "a", "cores": 4}, {"id": "b", "cores": 4},
                           {"id": "c", "deps": ["b"]}, {"id": "d"})
    assert out == [Start("a", 1, (slot("n2", range(4), memory=4 * GiB),)), WaitSaying("b", "needs 4 cores, 2 free", 0),
                   Start("d", 1, (slot("n1", [0]),))]
    assert sched.handle(NodeLost("n2"), 1.0) == [
        Finished("a", 1, "lost", "node lost"),
        Unrunnable("b", "after losing n2: needs at least 4 cores on one node; the largest node that could hold "
                        "it has 2 (the step may not span nodes)", after_loss=True),
        Blocked("c", "b"),
    ]
    assert ok("d", 2.0, sched) == [Finished("d", 1, "succeeded")]
    assert sched.finished()


def test_the_loss_of_an_unknown_node_is_ignored_and_a_lost_node_may_join_again():
    sched, out = scheduler([node("n1", 1), node("n2", 1)], {"id": "a", "retries": 1}, {"id": "b"})
    assert out == [Start("a", 1, (slot("n1", [0]),)), Start("b", 1, (slot("n2", [0]),))]
    assert sched.handle(NodeLost("nope"), 0.5) == [Ignored("loss of unknown node 'nope'")]
    assert sched.handle(NodeLost("n1"), 1.0) == [
        Finished("a", 1, "lost", "node lost", goes_on=True), Retry("a", 2, "attempt 1 lost"),
        WaitSaying("a", "needs 1 core, 0 free", 0)]
    assert sched.handle(NodeLost("n1"), 1.5) == [Ignored("loss of unknown node 'n1'")]
    assert sched.handle(NodeJoined(node("n1", 1)), 2.0) == [Start("a", 2, (slot("n1", [0]),))]
    assert ok("a", 3.0, sched, attempt=2) == [Finished("a", 2, "succeeded")]
    assert ok("b", 3.0, sched) == [Finished("b", 1, "succeeded")]
    assert sched.finished()


def test_losing_every_node_leaves_the_steps_still_to_run_unrunnable():
    sched, out = scheduler([node("n1", 1)], {"id": "a", "retries": 3}, {"id": "b"}, {"id": "c", "deps": ["b"]})
    assert out == [Start("a", 1, (slot("n1", [0]),)), WaitSaying("b", "needs 1 core, 0 free", 0)]
    assert sched.handle(NodeLost("n1"), 1.0) == [
        Finished("a", 1, "lost", "node lost", goes_on=True), Retry("a", 2, "attempt 1 lost"),
        Unrunnable("a", "after losing n1: the allocation has no nodes", after_loss=True),
        Unrunnable("b", "after losing n1: the allocation has no nodes", after_loss=True),
        Blocked("c", "b"),
    ]
    assert sched.finished()


# --- property: default memory never changes a schedule ---------------------------------------------------

@st.composite
def allocations(draw):
    count = draw(st.integers(1, 4))
    out = []
    for i in range(count):
        cores = draw(st.integers(1, 8))
        gpus = draw(st.integers(0, 2))
        memory = draw(st.one_of(st.integers(0, 64), st.integers(0, 256 * GiB)))
        out.append(NodeSpec(f"n{i}", tuple(range(cores)), tuple(range(gpus)), memory))
    return out


@st.composite
def default_memory_suites(draw):
    n = draw(st.integers(1, 12))
    tables = []
    for i in range(n):
        cores = draw(st.integers(1, 10))
        t = {"id": f"s{i}", "command": "x", "cores": cores, "min_cores": draw(st.integers(1, cores)),
             "estimate": draw(st.one_of(st.integers(0, 20), st.sampled_from([0.25, 0.5, 1.5, 2.75]))),
             "priority": draw(st.integers(1, 5)), "span": draw(st.booleans()),
             "gpus": draw(st.sampled_from([0, 0, 0, 1, 2])),
             "concurrent": draw(st.sampled_from([True, True, True, True, False]))}
        if i:
            t["deps"] = [f"s{j}" for j in draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))]
        tables.append(t)
    return parse_suite({"steps": tables}, Path("/x/prop.toml"))


def schedule_of(result):
    placements = {}
    for now, d in result.log:
        if isinstance(d, Start):
            placements[d.step] = tuple((s.node, s.cores, s.gpus) for s in d.placement)
    return ({sid: (s.nodes, s.cores, s.start_s, s.end_s) for sid, s in result.steps.items()},
            placements, result.unrunnable, result.blocked)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(default_memory_suites(), allocations())
def test_steps_that_all_take_the_default_memory_get_exactly_the_schedule_that_packing_on_cores_alone_gives(s, nodes):
    graph, problems = build_graph(s.steps)
    assert problems == []
    unlimited = [NodeSpec(n.name, n.cores, n.gpus, 2**62) for n in nodes]
    real = simulate(s.steps, graph, nodes, keep_log=True)
    free = simulate(s.steps, graph, unlimited, keep_log=True)
    assert schedule_of(real) == schedule_of(free)
    assert set(real.steps) | set(real.unrunnable) | set(real.blocked) == {st_.id for st_ in s.steps}


def test_a_spanning_step_with_more_gpus_per_node_than_ranks_reach_still_finds_them():
    # Each node holds its share of the GPUs beside its ranks: 1.5 GPUs beside a rank, on 1-GPU nodes, never.
    nodes = [node("n1", 4, gpus=1), node("n2", 4, gpus=1), node("n3", 4, gpus=1)]
    cap = Capacity.of(nodes)
    assert cap.width(2, 2, 1, 2, None, True) == 2
    assert cap.width(2, 2, 1, 3, None, True) == (
        "needs 3 GPUs for 2 ranks, each node holding its share of the GPUs with its ranks; the nodes hold 0 of the ranks so")
    sched, out = scheduler(nodes, {"id": "m", "cores": 2, "gpus": 2, "span": True},
                           {"id": "bad", "cores": 2, "gpus": 3, "span": True})
    assert out == [
        Unrunnable("bad", "needs 3 GPUs for 2 ranks, each node holding its share of the GPUs with its ranks; "
                          "the nodes hold 0 of the ranks so"),
        Start("m", 1, (slot("n1", [0], [0]), slot("n2", [0], [0]))),
    ]


def test_a_spanning_gpu_step_waits_for_gpus_and_never_takes_a_node_without_a_core_there():
    nodes = [node("n1", 2, gpus=2), node("n2", 2, gpus=2)]
    sched, out = scheduler(nodes, {"id": "g", "gpus": 1}, {"id": "m", "mpi": True, "ranks": 2, "gpus": 4})
    assert out == [Start("g", 1, (slot("n1", [0], [0]),)),
                   WaitSaying("m", "needs 4 GPUs, 3 free", 0)]
    assert ok("g", 1.0, sched) == [Finished("g", 1, "succeeded"),
                                   Start("m", 1, (slot("n1", [0], [0, 1]), slot("n2", [0], [0, 1])))]


def test_a_spanning_step_whose_memory_share_no_set_of_nodes_holds_is_narrowed_or_unrunnable():
    nodes = [node("n1", 2, memory=2 * GiB), node("n2", 2, memory=2 * GiB)]
    cap = Capacity.of(nodes)
    # 4 GiB over 3 cores puts 2.67 GiB beside two of them on one 2 GiB node: 2 cores is the most.
    assert cap.width(3, 1, 1, 0, 4 * GiB, True) == 2
    assert cap.width(3, 3, 1, 0, 4 * GiB, True) == (
        "needs 4GiB of memory over at least 3 cores; no set of nodes holds both "
        "(each node takes its share of the memory with its cores)")
    assert cap.width(4, 4, 1, 0, 4 * GiB, True) == 4
    sched, out = scheduler(nodes, {"id": "m", "cores": 3, "min_cores": 1, "span": True, "memory": "4GiB"})
    assert out == [Start("m", 1, (slot("n1", [0], memory=2 * GiB), slot("n2", [0], memory=2 * GiB)))]
    s = suite({"id": "m", "cores": 3, "span": True, "memory": "4GiB"})
    assert [(p.step, p.field) for p in fit_problems(s, nodes)] == [("m", "memory")]


# --- the pool's change logs keep only their recent entries (fleet.core.nodelog) -------------------

def test_the_pools_change_logs_stay_bounded_however_many_steps_come_and_go():
    pool = Pool()
    for n in (node("a", 4), node("b", 4)):
        pool.add(n)
    one = Demand(1)
    for _ in range(50_000):
        pool.release(pool.place(one))
    assert pool.releases.end() == 50_002          # positions still count every entry
    assert pool._changed.end() == 100_002
    bound = 2 * (2 * 2 + 4096)
    assert len(pool.releases) <= bound and len(pool._changed) <= bound


def test_a_blocked_demand_that_fell_behind_the_kept_entries_is_tried_again():
    pool = Pool()
    for n in (node("a", 4), node("b", 4)):
        pool.add(n)
    big = Demand(4)
    hold = pool.place(big), pool.place(big)
    since = pool.releases.end()                    # big fails from here on...
    assert pool.place(big) is None
    pool.release(hold[0])                          # ...until "a" is back,
    for _ in range(40_000):                        # and many releases later that one is dropped
        pool.release(pool.place(Demand(1)))
    assert pool.releases.since(since) is None
    assert pool.could_fit_since(big, since)
    assert pool.place(big) is not None


def test_dropping_old_log_entries_changes_no_decision_of_a_long_schedule(monkeypatch):
    tables = [{"id": f"s{i}", "cores": 1 + (i * 7) % 5, "estimate": 1 + (i * 13) % 17,
               **({"gpus": 1} if i % 11 == 0 else {})} for i in range(6_000)]
    tables += [{"id": f"w{i}", "mpi": True, "ranks": 6, "threads": 2, "estimate": 30} for i in range(40)]
    tables += [{"id": f"g{i}", "cores": 12, "gpus": 3, "span": True, "estimate": 20} for i in range(20)]
    s = suite(*tables)
    graph, problems = build_graph(s.steps)
    assert problems == []
    nodes = [node(f"n{i}", 8, gpus=2) for i in range(6)]
    trimmed = simulate(s.steps, graph, nodes, keep_log=True)
    monkeypatch.setattr(Pool, "_trim", lambda self: setattr(self, "_trim_at", 1 << 60))
    whole = simulate(s.steps, graph, nodes, keep_log=True)
    assert len(trimmed.steps) == 6_060
    assert schedule_of(trimmed) == schedule_of(whole)


def test_a_lost_attempt_whose_retry_no_longer_fits_says_it_goes_on_then_the_step_is_unrunnable_once():
    # One batch: the lost attempt's end, its retry, and the retry found unrunnable. The
    # coordinator acts on the batch after the scheduler made it all (the step's state is
    # final by then): only goes_on tells it the lost attempt was not the step's end.
    sched, out = scheduler([node("n1", 2), node("n2", 2)], {"id": "m", "cores": 4, "span": True, "retries": 2})
    assert [type(d) for d in out] == [Start]
    out = sched.handle(NodeLost("n2"), 1.0)
    assert out[:2] == [Finished("m", 1, "lost", "node lost", goes_on=True), Retry("m", 2, "attempt 1 lost")]
    assert [type(d) for d in out[2:]] == [Unrunnable]
    assert sched.state("m") == "unrunnable" and sched.finished()
