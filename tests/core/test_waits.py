"""Why a ready step waits: the scheduler says it as a structured WaitReason (its cause,
what the step needs, what the allocation had free), and the words rendered from it
are the 0.1 words, byte for byte."""

from __future__ import annotations

from fleet.core import waits as W
from fleet.core.scheduler import Elsewhere, Start, StepExited, Wait
from fleet.core.waits import WaitReason

from coretools import GiB, node, scheduler, slot  # noqa: E402


def waits(decisions) -> list[Wait]:
    return [d for d in decisions if isinstance(d, Wait)]


def started(decisions) -> list[str]:
    return [d.step for d in decisions if isinstance(d, Start)]


def test_a_step_needing_more_cores_than_are_free_waits_for_cores_with_its_figures():
    sched, out = scheduler([node("n1", 2)], {"id": "a"}, {"id": "b", "cores": 2})
    (w,) = waits(out)
    assert w.why == WaitReason(W.CORES, cores=2, gpus=0, memory=None, free_cores=1, free_gpus=0)
    assert (w.step, w.behind, w.reason) == ("b", 0, "needs 2 cores, 1 free")


def test_a_step_needing_more_gpus_than_are_free_waits_for_gpus_with_its_figures():
    sched, out = scheduler([node("g1", 4, gpus=2)], {"id": "a", "gpus": 2}, {"id": "b", "gpus": 1})
    (w,) = waits(out)
    assert w.why == WaitReason(W.GPUS, cores=1, gpus=1, memory=None, free_cores=3, free_gpus=0)
    assert w.reason == "needs 1 GPU, 0 free"


def test_a_step_declaring_memory_whose_cores_are_free_only_across_nodes_waits_for_a_whole_node():
    # One core free on each node, memory plenty: no node has its 2 cores, memory or not.
    nodes = [node("m1", 3, memory=8 * GiB), node("m2", 3, memory=8 * GiB)]
    sched, out = scheduler(nodes, {"id": "a", "cores": 2, "memory": "1GiB"}, {"id": "b", "cores": 2, "memory": "1GiB"},
                           {"id": "c", "cores": 2, "memory": "2GiB"})
    (w,) = waits(out)
    assert started(out) == ["a", "b"] and w.step == "c", out
    assert w.why == WaitReason(W.WHOLE_NODE, cores=2, gpus=0, memory=2 * GiB, free_cores=2, free_gpus=0)


def test_a_step_whose_cores_and_gpus_are_free_only_on_different_nodes_waits_for_a_whole_node():
    nodes = [node("g1", 2, gpus=1), node("g2", 2, gpus=1)]
    sched, out = scheduler(nodes, {"id": "cpu", "cores": 2}, {"id": "gpu1", "gpus": 1}, {"id": "gpu2", "gpus": 1})
    (w,) = waits(out)
    assert w.why == WaitReason(W.WHOLE_NODE, cores=1, gpus=1, memory=None, free_cores=1, free_gpus=1)
    assert w.reason == "no node has 1 core, 1 GPU free together (the step may not span nodes)"


def test_a_step_whose_memory_is_not_free_beside_its_free_cores_waits_for_memory_naming_the_bytes():
    # (it was a whole node it waited for: on a one-node fleet, whose free core it could have had)
    sched, out = scheduler([node("m1", 4, memory=4 * GiB)], {"id": "a", "memory": "3GiB"}, {"id": "b", "memory": "2GiB"})
    (w,) = waits(out)
    assert w.why == WaitReason(W.MEMORY, cores=1, gpus=0, memory=2 * GiB, free_cores=3, free_gpus=0)
    assert w.reason == "no node has 1 core, 2GiB of memory free together (the step may not span nodes)"
    assert sched.view("b").why == w.why and sched.view("b").wait_reason == w.reason


def test_a_step_without_memory_whose_cores_share_is_taken_by_a_bigger_declaration_waits_naming_its_share():
    # 2 cores, 8 GiB: "a" declares 6 GiB for one core (its share is 4 GiB), so the other
    # core is free and its 4 GiB share is not. Not "no node has 1 core free": one is.
    sched, out = scheduler([node("m1", 2, memory=8 * GiB)], {"id": "a", "memory": "6GiB"}, {"id": "b"})
    (w,) = waits(out)
    assert w.why == WaitReason(W.MEMORY, cores=1, gpus=0, memory=None, free_cores=1, free_gpus=0)
    assert w.reason == ("no node has 1 core free together with the cores' share of its memory (the step "
                        "declares no memory, so it takes that share; it may not span nodes)")
    # Cores short on every node (one free on each of two): still a whole node it lacks.
    sched, out = scheduler([node("n1", 3), node("n2", 3)], {"id": "a", "cores": 2}, {"id": "b", "cores": 2},
                           {"id": "c", "cores": 2})
    assert [x.why.cause for x in waits(out)] == [W.WHOLE_NODE]


def test_a_spanning_step_whose_pieces_do_not_fit_across_the_nodes_waits_for_span():
    # Two ranks of two threads: 4 cores are free, but 1 of them on n1 holds no rank.
    sched, out = scheduler([node("n1", 3), node("n2", 3)], {"id": "a", "cores": 2},
                           {"id": "m", "mpi": True, "ranks": 2, "threads": 2})
    assert out[0] == Start("a", 1, (slot("n1", [0, 1], memory=2 * GiB),))
    (w,) = waits(out)
    assert w.why == WaitReason(W.SPAN, cores=4, gpus=0, memory=None, free_cores=4, free_gpus=0)
    assert w.reason == "needs 4 cores with 0 GPUs and its memory across nodes"


def test_a_step_that_runs_alone_waits_naming_how_many_steps_still_run():
    sched, out = scheduler([node("n1", 4)], {"id": "a"}, {"id": "b"}, {"id": "alone", "concurrent": False})
    (w,) = waits(out)
    assert w.why == WaitReason(W.ALONE, detail="waiting for 2 running steps to finish")
    assert w.reason == "runs alone: waiting for 2 running steps to finish"


def test_a_step_held_by_another_fleet_waits_elsewhere_with_the_holders_words():
    sched, out = scheduler([node("n1", 1)], {"id": "a"})
    out = sched.handle(Elsewhere("a", 1, "claimed by fleet f2 on h2"), 1.0)
    (w,) = waits(out)
    assert (w.step, w.behind) == ("a", 0)
    assert w.why == WaitReason(W.ELSEWHERE, detail="claimed by fleet f2 on h2")
    assert w.reason == "claimed by fleet f2 on h2"  # the claim's own words, as 0.1 wrote them


def test_a_wait_is_said_again_only_when_its_words_change():
    # The free counts behind the words move with every start and exit: not a new wait.
    sched, out = scheduler([node("n1", 5), node("n2", 4)], {"id": "a", "cores": 2},
                           {"id": "m", "mpi": True, "ranks": 2, "threads": 3},
                           {"id": "c", "priority": 5}, {"id": "d", "priority": 5})
    assert [w.why for w in waits(out)] == [WaitReason(W.SPAN, 6, 0, None, 7, 0)]
    assert started(out) == ["a", "c", "d"]
    out = sched.handle(StepExited("c", 1, "succeeded"), 1.0)  # 6 free again: m is tried, and fails
    assert waits(out) == [] and sched.state("m") == "ready"
    assert sched.view("m").why.free_cores == 7


def test_every_cause_the_scheduler_writes_renders_its_figures_in_words_with_sizes_in_human_units():
    # 0.1 wrote these words without the figures; fleet.wire.events still reads its shapes back.
    cases = {
        WaitReason(W.CORES, 8, 0, None, 3, 0): "needs 8 cores, 3 free",
        WaitReason(W.GPUS, 1, 4, None, 9, 3): "needs 4 GPUs, 3 free",
        WaitReason(W.SPAN, 6, 2, 5 * GiB, 9, 4): "needs 6 cores with 2 GPUs and its memory across nodes",
        WaitReason(W.WHOLE_NODE, 2, 0, None, 4, 0):
            "no node has 2 cores free together (the step may not span nodes)",
        WaitReason(W.WHOLE_NODE, 2, 1, 7, 4, 1):
            "no node has 2 cores, 1 GPU, 7B of memory free together (the step may not span nodes)",
        WaitReason(W.ALONE, detail="waiting for 3 running steps to finish"):
            "runs alone: waiting for 3 running steps to finish",
    }
    for why, words in cases.items():
        assert Wait("s", why).reason == words
