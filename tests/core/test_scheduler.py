"""The pure scheduler: ready order, failures, steps that run alone, retries, skipped
steps, determinism, and properties that hold for any suite on any allocation."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.core.graph import build_graph
from fleet.core.resources import Capacity, NodeSpec, Slot
from fleet.core.scheduler import (Blocked, Cancel, Finished, Ignored, Kill, NodeJoined, NodeLost, Retry, Scheduler,
                                  Skipped, Start, StepExited, Submitted, submission)
from fleet.core.simulate import pretend_nodes, simulate
from fleet.core.suite import parse_suite

from coretools import GiB, WaitSaying, node, scheduler, slot, suite  # noqa: E402


def exit_(sched, step, now, outcome="succeeded", attempt=1, reason=""):
    return sched.handle(StepExited(step, attempt, outcome, reason), now)


def started(decisions):
    return [d.step for d in decisions if isinstance(d, Start)]


# --- ready order ------------------------------------------------------------------------------

def test_ready_steps_start_by_priority_then_setup_order():
    sched, out = scheduler([node("n1", 1)],
                           {"id": "a"}, {"id": "b", "priority": 1}, {"id": "c"}, {"id": "d", "priority": 2},
                           {"id": "e", "priority": 1}, {"id": "f", "priority": 5})
    assert out == [Start("b", 1, (slot("n1", [0]),)), WaitSaying("e", "needs 1 core, 0 free", 4)]
    order = ["b"]
    for t, step in enumerate(["b", "e", "d", "a", "c"], 1):
        out = exit_(sched, step, float(t))
        assert out[0] == Finished(step, 1, "succeeded")
        order += started(out)
    assert order == ["b", "e", "d", "a", "c", "f"]


def test_state_of_answers_as_state_does_and_none_for_a_step_the_scheduler_does_not_have():
    sched, _ = scheduler([node("n1", 1)], {"id": "a"}, {"id": "b", "deps": ["a"]})
    for sid in ("a", "b"):
        assert sched.state_of(sid) == sched.state(sid)
    assert sched.state_of("a") == "running" and sched.state_of("b") == "waiting"
    assert sched.state_of("nope") is None
    with pytest.raises(KeyError):
        sched.state("nope")


def test_priority_and_setup_order_hold_across_steps_of_different_sizes():
    sched, out = scheduler([node("n1", 4)],
                           {"id": "wide", "cores": 4}, {"id": "urgent", "cores": 2, "priority": 1},
                           {"id": "one", "priority": 2}, {"id": "two", "cores": 2})
    assert out == [
        Start("urgent", 1, (slot("n1", [0, 1], memory=2 * GiB),)),
        Start("one", 1, (slot("n1", [2]),)),
        WaitSaying("wide", "needs 4 cores, 1 free", 0),
        WaitSaying("two", "needs 2 cores, 1 free", 0),
    ]
    # Start each that fits: `two` (setup order 3) goes ahead of `wide` (0), which does not fit yet.
    assert exit_(sched, "urgent", 1.0) == [Finished("urgent", 1, "succeeded"),
                                           Start("two", 1, (slot("n1", [0, 1], memory=2 * GiB),))]


def test_steps_wait_for_their_dependencies_and_start_when_the_last_one_succeeds():
    sched, out = scheduler([node("n1", 4)], {"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["a", "b"]})
    assert started(out) == ["a", "b"]
    assert sched.state("c") == "waiting"
    assert exit_(sched, "b", 1.0) == [Finished("b", 1, "succeeded")]
    assert exit_(sched, "a", 2.0) == [Finished("a", 1, "succeeded"), Start("c", 1, (slot("n1", [0]),))]


def test_file_dependencies_given_in_the_submission_order_steps_too():
    s = suite({"id": "use", "inputs": ["mesh.nc"]}, {"id": "make", "outputs": ["mesh.nc"]})
    graph, problems = build_graph(s.steps)
    assert problems == []
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    assert started(sched.handle(Submitted(s.steps, graph.deps), 0.0)) == ["make"]
    assert started(exit_(sched, "make", 1.0)) == ["use"]


# --- failures -----------------------------------------------------------------------------------

def test_a_failure_blocks_its_descendants_and_nothing_else():
    sched, out = scheduler([node("n1", 8)],
                           {"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["b"]},
                           {"id": "d", "deps": ["a"]}, {"id": "e", "deps": ["d", "f"]}, {"id": "f"},
                           {"id": "g", "deps": ["f"]}, {"id": "h"})
    assert started(out) == ["a", "f", "h"]
    assert exit_(sched, "a", 1.0, "failed", reason="exit status 3") == [
        Finished("a", 1, "failed", "exit status 3"),
        Blocked("b", "a"), Blocked("d", "a"), Blocked("c", "a"), Blocked("e", "a"),
    ]
    assert exit_(sched, "f", 2.0) == [Finished("f", 1, "succeeded"), Start("g", 1, (slot("n1", [0]),))]
    exit_(sched, "g", 3.0)
    exit_(sched, "h", 3.0)
    assert sched.finished()
    assert {v.id: v.state for v in sched.views()} == {
        "a": "failed", "b": "blocked", "c": "blocked", "d": "blocked", "e": "blocked",
        "f": "succeeded", "g": "succeeded", "h": "succeeded"}


def test_a_step_killed_by_a_signal_ends_terminated_and_blocks_its_dependents():
    sched, out = scheduler([node("n1", 1)], {"id": "a"}, {"id": "b", "deps": ["a"]})
    assert exit_(sched, "a", 1.0, "terminated", reason="SIGKILL") == [
        Finished("a", 1, "terminated", "SIGKILL"), Blocked("b", "a")]
    assert sched.counts() == {"terminated": 1, "blocked": 1}


def test_a_step_submitted_after_its_dependency_failed_is_blocked_at_once():
    sched, out = scheduler([node("n1", 1)], {"id": "a"})
    exit_(sched, "a", 1.0, "failed")
    later = suite({"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["b"]}, {"id": "d"}).steps
    assert sched.handle(submission(later, {"b": ("a",), "c": ("b",), "d": ()}), 2.0) == [
        Blocked("b", "a"), Blocked("c", "a"), Start("d", 1, (slot("n1", [0]),))]


# --- steps that run alone ------------------------------------------------------------------------

def test_a_step_that_is_not_concurrent_waits_until_nothing_runs_and_nothing_starts_beside_it():
    sched, out = scheduler([node("n1", 4)], {"id": "a"}, {"id": "alone", "concurrent": False}, {"id": "b"})
    assert out == [Start("a", 1, (slot("n1", [0]),)),
                   WaitSaying("alone", "runs alone: waiting for 1 running step to finish", 0)]
    assert sched.state("b") == "ready"
    assert exit_(sched, "a", 1.0) == [Finished("a", 1, "succeeded"), Start("alone", 1, (slot("n1", [0]),))]
    assert sched.state("b") == "ready"
    assert exit_(sched, "alone", 2.0) == [Finished("alone", 1, "succeeded"), Start("b", 1, (slot("n1", [0]),))]


def test_a_step_that_is_not_concurrent_and_starts_first_keeps_everything_else_waiting():
    sched, out = scheduler([node("n1", 4), node("n2", 4)],
                           {"id": "alone", "concurrent": False}, {"id": "a"}, {"id": "b", "priority": 4})
    assert out == [Start("alone", 1, (slot("n1", [0]),))]
    late = suite({"id": "urgent", "priority": 1}).steps
    assert sched.handle(submission(late), 0.5) == []
    assert exit_(sched, "alone", 1.0) == [
        Finished("alone", 1, "succeeded"), Start("urgent", 1, (slot("n1", [0]),)),
        Start("a", 1, (slot("n1", [1]),)), Start("b", 1, (slot("n1", [2]),))]


def test_steps_that_run_alone_each_get_their_own_width():
    sched, out = scheduler([node("n1", 4)], {"id": "narrow", "concurrent": False},
                           {"id": "wide", "cores": 4, "concurrent": False},
                           {"id": "mid", "cores": 2, "concurrent": False})
    assert out == [Start("narrow", 1, (slot("n1", [0]),))]
    assert exit_(sched, "narrow", 1.0) == [Finished("narrow", 1, "succeeded"),
                                           Start("wide", 1, (slot("n1", range(4), memory=4 * GiB),))]
    assert exit_(sched, "wide", 2.0) == [Finished("wide", 1, "succeeded"),
                                         Start("mid", 1, (slot("n1", [0, 1], memory=2 * GiB),))]


def test_a_step_that_runs_alone_after_a_failure_still_runs():
    sched, out = scheduler([node("n1", 2)], {"id": "a"}, {"id": "alone", "concurrent": False})
    assert exit_(sched, "a", 1.0, "failed") == [Finished("a", 1, "failed"), Start("alone", 1, (slot("n1", [0]),))]


# --- retries ---------------------------------------------------------------------------------------

def test_a_failed_step_is_retried_up_to_its_limit_with_increasing_attempts_then_blocks_its_dependents():
    sched, out = scheduler([node("n1", 1)], {"id": "a", "retries": 2}, {"id": "b", "deps": ["a"]})
    assert out == [Start("a", 1, (slot("n1", [0]),))]
    assert exit_(sched, "a", 1.0, "failed", 1, "boom") == [
        Finished("a", 1, "failed", "boom", goes_on=True), Retry("a", 2, "attempt 1 failed"), Start("a", 2, (slot("n1", [0]),))]
    assert exit_(sched, "a", 2.0, "terminated", 2, "SIGTERM") == [
        Finished("a", 2, "terminated", "SIGTERM", goes_on=True), Retry("a", 3, "attempt 2 terminated"),
        Start("a", 3, (slot("n1", [0]),))]
    assert exit_(sched, "a", 2.5, "failed", 2) == [
        Ignored("exit of 'a' attempt 2: not running (now running, attempt 3)")]
    assert exit_(sched, "a", 3.0, "failed", 3, "boom") == [Finished("a", 3, "failed", "boom"), Blocked("b", "a")]
    assert sched.finished()


def test_a_failure_said_to_be_final_is_not_retried_whatever_the_steps_retries():
    # (the coordinator's word for a step that killed its node's zygote: fleet.control.jobend)
    sched, out = scheduler([node("n1", 1)], {"id": "a", "retries": 2}, {"id": "b", "deps": ["a"]})
    assert sched.handle(StepExited("a", 1, "failed", "killed its zygote", final=True), 1.0) == [
        Finished("a", 1, "failed", "killed its zygote"), Blocked("b", "a")]
    assert sched.state("a") == "failed" and sched.finished()


def test_a_retried_step_that_then_succeeds_releases_its_dependents():
    sched, out = scheduler([node("n1", 1)], {"id": "a", "retries": 1}, {"id": "b", "deps": ["a"]})
    exit_(sched, "a", 1.0, "failed")
    assert exit_(sched, "a", 2.0, attempt=2) == [Finished("a", 2, "succeeded"), Start("b", 1, (slot("n1", [0]),))]


def test_a_retry_keeps_its_own_place_in_priority_order():
    sched, out = scheduler([node("n1", 1)], {"id": "a", "priority": 2, "retries": 1}, {"id": "b", "priority": 3})
    assert out == [Start("a", 1, (slot("n1", [0]),)), WaitSaying("b", "needs 1 core, 0 free", 0)]
    urgent = suite({"id": "urgent", "priority": 1}).steps
    # Nothing was released since its kind last failed to fit: not even tried (so no Wait yet).
    assert sched.handle(submission(urgent), 0.5) == []
    assert sched.state("urgent") == "ready"
    assert exit_(sched, "a", 1.0, "failed") == [
        Finished("a", 1, "failed", goes_on=True), Retry("a", 2, "attempt 1 failed"),
        Start("urgent", 1, (slot("n1", [0]),)), WaitSaying("a", "needs 1 core, 0 free", 1)]
    assert exit_(sched, "urgent", 2.0) == [Finished("urgent", 1, "succeeded"), Start("a", 2, (slot("n1", [0]),))]
    assert exit_(sched, "a", 3.0, attempt=2) == [Finished("a", 2, "succeeded"), Start("b", 1, (slot("n1", [0]),))]


# --- timeouts and cancelling ------------------------------------------------------------------------

def test_a_timed_out_step_is_retried_like_a_failure_and_then_blocks_its_dependents():
    sched, out = scheduler([node("n1", 1)], {"id": "a", "retries": 1}, {"id": "b", "deps": ["a"]})
    assert exit_(sched, "a", 1.0, "timed_out", 1, "ran past its timeout") == [
        Finished("a", 1, "timed_out", "ran past its timeout", goes_on=True), Retry("a", 2, "attempt 1 timed_out"),
        Start("a", 2, (slot("n1", [0]),))]
    assert exit_(sched, "a", 2.0, "timed_out", 2) == [Finished("a", 2, "timed_out"), Blocked("b", "a")]
    assert sched.state("a") == "timed_out" and sched.finished()


def test_cancelling_a_running_step_kills_it_and_its_cancelled_exit_is_never_retried_and_blocks_its_dependents():
    sched, out = scheduler([node("n1", 2)], {"id": "a", "retries": 3}, {"id": "b", "deps": ["a"]}, {"id": "c"})
    assert started(out) == ["a", "c"]
    assert sched.handle(Cancel(("a",)), 1.0) == [Kill("a", 1, "cancelled")]
    assert sched.state("a") == "running"  # until its exit says so
    assert exit_(sched, "a", 2.0, "cancelled", 1, "cancelled") == [
        Finished("a", 1, "cancelled", "cancelled"), Blocked("b", "a")]
    assert sched.state("a") == "cancelled"
    assert exit_(sched, "c", 3.0) == [Finished("c", 1, "succeeded")]
    assert sched.finished()


def test_a_cancelled_running_step_that_fails_or_is_lost_before_its_kill_lands_still_ends_cancelled():
    sched, out = scheduler([node("n1", 1), node("n2", 1)], {"id": "a", "retries": 2}, {"id": "b", "retries": 2})
    sched.handle(Cancel(("a", "b")), 1.0)
    assert exit_(sched, "a", 2.0, "failed", 1, "exit status 1") == [Finished("a", 1, "cancelled", "exit status 1")]
    assert sched.handle(NodeLost("n2"), 3.0) == [Finished("b", 1, "cancelled", "cancelled (node lost)")]
    assert sched.finished()


def test_cancelling_steps_not_yet_started_ends_them_at_once_blocks_their_dependents_and_frees_nothing():
    sched, out = scheduler([node("n1", 1)], {"id": "a"}, {"id": "ready"}, {"id": "waiting", "deps": ["a"]},
                           {"id": "after", "deps": ["waiting"]}, {"id": "other"})
    assert started(out) == ["a"]
    assert sched.handle(Cancel(("ready", "waiting")), 1.0) == [
        Finished("ready", 1, "cancelled", "cancelled", ran=False),
        Finished("waiting", 1, "cancelled", "cancelled", ran=False), Blocked("after", "waiting")]
    # The queue no longer holds the cancelled one: the next start is `other`.
    assert exit_(sched, "a", 2.0) == [Finished("a", 1, "succeeded"), Start("other", 1, (slot("n1", [0]),))]
    exit_(sched, "other", 3.0)
    assert sched.finished()
    assert sched.counts() == {"succeeded": 2, "cancelled": 2, "blocked": 1}


def test_a_cancelled_step_named_with_its_dependency_ends_cancelled_not_blocked():
    sched, out = scheduler([node("n1", 1)], {"id": "a"}, {"id": "w1", "deps": ["a"]}, {"id": "w2", "deps": ["w1"]},
                           {"id": "w3", "deps": ["w2"]})
    assert sched.handle(Cancel(("w1", "w2")), 1.0) == [
        Finished("w1", 1, "cancelled", "cancelled", ran=False), Finished("w2", 1, "cancelled", "cancelled", ran=False), Blocked("w3", "w2")]


def test_cancelling_a_step_that_ended_or_is_unknown_is_ignored():
    sched, out = scheduler([node("n1", 1)], {"id": "a"})
    exit_(sched, "a", 1.0)
    assert sched.handle(Cancel(("a", "nope")), 2.0) == [
        Ignored("cancel of 'a': it is succeeded"), Ignored("cancel of 'nope': unknown step")]


def test_a_step_cancelled_before_any_node_joined_never_starts():
    sched = Scheduler()
    sched.handle(submission(suite({"id": "a"}, {"id": "b", "deps": ["a"]}).steps), 0.0)
    assert sched.handle(Cancel(("a",)), 0.5) == [Finished("a", 1, "cancelled", "cancelled", ran=False), Blocked("b", "a")]
    assert sched.handle(NodeJoined(node("n1", 1)), 1.0) == []
    assert sched.finished()


# --- skipped steps ------------------------------------------------------------------------------------

def test_steps_given_as_done_are_skipped_and_count_as_success_for_their_dependents():
    sched, out = scheduler([node("n1", 2)], {"id": "mesh"}, {"id": "init", "deps": ["mesh"]},
                           {"id": "run", "deps": ["init"]}, done={"mesh", "init"})
    assert out == [Skipped("mesh"), Skipped("init"), Start("run", 1, (slot("n1", [0]),))]
    assert sched.state("mesh") == "skipped"
    assert exit_(sched, "mesh", 1.0) == [Ignored("exit of 'mesh' attempt 1: not running (now skipped, attempt 1)")]
    exit_(sched, "run", 1.0)
    assert sched.finished()
    assert sched.counts() == {"skipped": 2, "succeeded": 1}


def test_a_dependency_done_outside_the_submission_is_met():
    s = suite({"id": "b", "deps": ["elsewhere"]}, {"id": "c"})
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    assert started(sched.handle(Submitted(s.steps, {"b": ("elsewhere",), "c": ()}, frozenset({"elsewhere"})), 0.0)) == ["b", "c"]
    with pytest.raises(ValueError):
        Scheduler().handle(Submitted(suite({"id": "x", "deps": ["ghost"]}).steps, {"x": ("ghost",)}), 0.0)


# --- submissions and events ------------------------------------------------------------------------------

def test_steps_submitted_before_any_node_joins_start_when_nodes_join():
    sched = Scheduler()
    assert sched.handle(submission(suite({"id": "a", "cores": 2}, {"id": "b"}).steps), 0.0) == []
    assert sched.state("a") == "waiting"
    assert sched.handle(NodeJoined(node("n1", 2)), 1.0) == [Start("a", 1, (slot("n1", [0, 1], memory=2 * GiB),)),
                                                            WaitSaying("b", "needs 1 core, 0 free", 0)]


def test_a_shared_step_submitted_twice_while_it_runs_runs_once():
    sched, out = scheduler([node("n1", 2)], {"id": "mesh"}, {"id": "a", "deps": ["mesh"]})
    assert started(out) == ["mesh"]
    again = suite({"id": "mesh"}, {"id": "b", "deps": ["mesh"]}).steps
    assert sched.handle(submission(again), 0.5) == []
    assert exit_(sched, "mesh", 1.0) == [Finished("mesh", 1, "succeeded"), Start("a", 1, (slot("n1", [0]),)),
                                         Start("b", 1, (slot("n1", [1]),))]


def test_events_that_make_no_sense_are_refused_or_ignored():
    sched, out = scheduler([node("n1", 1)], {"id": "a"})
    with pytest.raises(ValueError):
        exit_(sched, "a", 1.0, "exploded")
    assert exit_(sched, "nope", 1.0) == [Ignored("exit of 'nope' attempt 1: not running (unknown step)")]
    with pytest.raises(ValueError):
        sched.handle(NodeJoined(node("n1", 1)), 1.0)
    with pytest.raises(TypeError):
        sched.handle("tick", 1.0)
    assert sched.state("a") == "running"


def test_views_report_state_attempt_placement_start_time_and_wait_reason():
    sched, out = scheduler([node("n1", 1)], {"id": "a"}, {"id": "b"})
    a, b = sched.view("a"), sched.view("b")
    assert (a.state, a.attempt, a.placement, a.started_at, a.wait_reason) == ("running", 1, (slot("n1", [0]),), 0.0, None)
    assert (b.state, b.wait_reason) == ("ready", "needs 1 core, 0 free")
    assert [v.id for v in sched.running()] == ["a"]
    assert [v.id for v in sched.running_on("n1")] == ["a"]
    assert not sched.finished()


# --- determinism ------------------------------------------------------------------------------------------

def _busy_suite():
    tables = []
    for i in range(30):
        t = {"id": f"s{i}", "cores": 1 + (i * 7) % 5, "min_cores": 1, "priority": 1 + (i * 3) % 5,
             "estimate": float(1 + (i * 11) % 7), "span": i % 4 == 0, "gpus": 1 if i % 9 == 0 else 0,
             "concurrent": i != 17}
        if i >= 3:
            t["deps"] = [f"s{(i * 5) % i}", f"s{i - 3}"]
        if i % 6 == 0:
            t["memory"] = f"{1 + i % 3}GiB"
        tables.append(t)
    return suite(*tables)


def test_the_same_suite_simulated_twice_gives_identical_decisions():
    s = _busy_suite()
    graph, problems = build_graph(s.steps)
    assert problems == []
    nodes = pretend_nodes(3, 6, 8 * GiB, 1)
    first = simulate(s.steps, graph, nodes, keep_log=True)
    second = simulate(s.steps, graph, nodes, keep_log=True)
    assert len(first.log) > 60
    assert first.log == second.log
    assert first == second
    assert set(first.steps) == {x.id for x in s.steps}


def test_the_same_events_give_the_same_decisions_from_a_fresh_scheduler():
    s = _busy_suite()
    graph, _ = build_graph(s.steps)

    def run():
        sched, log = Scheduler(), []
        for n in (node("n1", 4, 1), node("n2", 6, 1, 3 * GiB), node("n3", 2)):
            log += sched.handle(NodeJoined(n), 0.0)
        log += sched.handle(Submitted(s.steps, graph.deps), 0.0)
        t = 0.0
        while True:
            running = [v for v in sched.running()]
            if not running:
                break
            t += 1.0
            v = running[len(log) % len(running)]
            outcome = "failed" if v.id in ("s5", "s12") else "succeeded"
            log += sched.handle(StepExited(v.id, v.attempt, outcome), t)
            if t == 5.0:
                log += sched.handle(NodeLost("n2"), t)
        return log

    assert run() == run()


# --- properties ----------------------------------------------------------------------------------------------

@st.composite
def anything_suites(draw):
    """Random suites: sizes, GPUs, memory, spanning, MPI, priorities, steps that run alone, a DAG."""
    n = draw(st.integers(1, 12))
    tables = []
    for i in range(n):
        t = {"id": f"s{i}", "command": "x", "estimate": draw(st.sampled_from([0, 0.5, 1, 2, 3.25, 5, 8])),
             "priority": draw(st.integers(1, 5)), "gpus": draw(st.sampled_from([0, 0, 0, 1, 2, 3])),
             "concurrent": draw(st.sampled_from([True] * 6 + [False]))}
        if draw(st.booleans()):
            t["memory"] = draw(st.sampled_from([1, 512 * 2**20, GiB, 3 * GiB, 7 * GiB, 20 * GiB]))
        if draw(st.integers(0, 3)) == 0:
            ranks = draw(st.integers(1, 6))
            t.update(mpi=True, ranks=ranks, min_ranks=draw(st.integers(1, ranks)), threads=draw(st.integers(1, 3)))
            if draw(st.booleans()):
                t["span"] = False
        else:
            cores = draw(st.integers(1, 10))
            t.update(cores=cores, min_cores=draw(st.integers(1, cores)), span=draw(st.booleans()))
        if i:
            t["deps"] = [f"s{j}" for j in draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))]
        tables.append(t)
    return parse_suite({"steps": tables}, Path("/x/prop.toml"))


@st.composite
def any_allocation(draw):
    out = []
    for i in range(draw(st.integers(1, 4))):
        cores = draw(st.integers(1, 8))
        out.append(NodeSpec(f"n{i}", tuple(range(10, 10 + cores)), tuple(range(draw(st.integers(0, 3)))),
                            draw(st.sampled_from([0, 3, GiB, 4 * GiB, 16 * GiB, cores * GiB]))))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anything_suites(), any_allocation())
def test_no_node_is_ever_overcommitted_and_every_step_runs_or_is_reported(s, nodes):
    graph, problems = build_graph(s.steps)
    assert problems == []
    result = simulate(s.steps, graph, nodes, keep_log=True)
    spec = {n.name: n for n in nodes}
    step = {x.id: x for x in s.steps}
    cap = Capacity.of(nodes)
    held: dict[str, dict[str, Slot]] = defaultdict(dict)   # node -> step -> slot
    ended: dict[str, float] = {}
    alone: str | None = None
    for now, d in result.log:
        if isinstance(d, Start):
            x = step[d.step]
            assert alone is None, f"{d.step} started beside {alone}, which runs alone"
            if not x.concurrent:
                assert not any(held.values()), f"{d.step} runs alone but started beside others"
                alone = d.step
            for dep in graph.deps[d.step]:
                assert dep in ended and ended[dep] <= now
            # The width is the one decided from the whole allocation.
            assert d.cores == cap.width(x.cores, x.min_cores, x.threads if x.mpi else 1, x.gpus, x.memory, x.span)
            assert sum(len(sl.gpus) for sl in d.placement) == x.gpus
            if not x.span:
                assert len(d.placement) == 1
            if x.mpi:
                assert all(len(sl.cores) % x.threads == 0 and sl.cores for sl in d.placement)
            for sl in d.placement:
                assert d.step not in held[sl.node]
                held[sl.node][d.step] = sl
                n = spec[sl.node]
                taken_c = [c for h in held[sl.node].values() for c in h.cores]
                taken_g = [g for h in held[sl.node].values() for g in h.gpus]
                assert len(taken_c) == len(set(taken_c)) and set(taken_c) <= set(n.cores)
                assert len(taken_g) == len(set(taken_g)) and set(taken_g) <= set(n.gpus)
                assert sum(h.memory for h in held[sl.node].values()) <= n.memory
        elif isinstance(d, Finished):
            assert d.outcome == "succeeded"
            for name in list(held):
                held[name].pop(d.step, None)
            ended[d.step] = now
            if alone == d.step:
                alone = None
    assert not any(held.values())
    ids = {x.id for x in s.steps}
    assert set(result.steps) | set(result.unrunnable) | set(result.blocked) == ids
    assert not set(result.steps) & (set(result.unrunnable) | set(result.blocked))
    # Unrunnable exactly when the width says so; blocked exactly when an ancestor could not run.
    for x in s.steps:
        w = cap.width(x.cores, x.min_cores, x.threads if x.mpi else 1, x.gpus, x.memory, x.span)
        if x.id in result.unrunnable:
            assert isinstance(w, str) and result.unrunnable[x.id] == w
        elif isinstance(w, str):  # never tried: a dependency was already known not to run
            assert x.id in result.blocked
    for sid in result.blocked:
        assert any(d in result.unrunnable or d in result.blocked for d in graph.deps[sid])


@st.composite
def outcomes(draw):
    s = draw(anything_suites())
    fail = draw(st.sets(st.sampled_from([x.id for x in s.steps])))
    return s, fail


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(outcomes(), any_allocation())
def test_a_failure_blocks_exactly_the_descendants_of_failed_steps(case, nodes):
    s, fail = case
    graph, _ = build_graph(s.steps)
    sched = Scheduler()
    for n in nodes:
        sched.handle(NodeJoined(n), 0.0)
    log = list(sched.handle(Submitted(s.steps, graph.deps), 0.0))
    t = 0.0
    while sched.running():
        t += 1.0
        v = sched.running()[0]
        log += sched.handle(StepExited(v.id, v.attempt, "failed" if v.id in fail else "succeeded"), t)
    assert sched.finished()
    states = {v.id: v.state for v in sched.views()}
    bad = {sid for sid, st_ in states.items() if st_ in ("failed", "unrunnable")}
    assert {sid for sid, st_ in states.items() if st_ == "failed"} == {sid for sid in fail if states[sid] != "unrunnable"
                                                                       and states[sid] != "blocked"}
    # Blocked exactly when some ancestor failed or could never run.
    parents = graph.deps
    def ancestors(sid, seen=None):
        seen = set() if seen is None else seen
        for p in parents[sid]:
            if p not in seen:
                seen.add(p)
                ancestors(p, seen)
        return seen
    for sid, st_ in states.items():
        assert st_ in ("succeeded", "failed", "blocked", "unrunnable")
        if st_ != "unrunnable":  # an impossible step is reported as such whatever its ancestors do
            assert (st_ == "blocked") == bool(ancestors(sid) & bad), sid
    assert sum(isinstance(d, Blocked) for d in log) == sum(st_ == "blocked" for st_ in states.values())


# --- resubmissions to a live fleet --------------------------------------------------------------

def again(sched, now, *tables, done=()):
    """Submit these steps again to a scheduler that knows some of them."""
    return sched.handle(submission(suite(*tables).steps, done=done), now)


def test_a_step_that_failed_in_an_earlier_submission_runs_again_with_its_attempts_counted_from_one():
    sched, out = scheduler([node("n1", 1)], {"id": "a", "retries": 1}, {"id": "b", "deps": ["a"]})
    assert exit_(sched, "a", 1.0, "failed")[1] == Retry("a", 2, "attempt 1 failed")
    assert exit_(sched, "a", 2.0, "failed", attempt=2) == [Finished("a", 2, "failed"), Blocked("b", "a")]
    out = again(sched, 3.0, {"id": "a", "retries": 1}, {"id": "b", "deps": ["a"]}, {"id": "d"})
    assert out == [Start("a", 1, (slot("n1", [0]),)), WaitSaying("d", "needs 1 core, 0 free", 0)]
    assert sched.view("a").generation == 2 and sched.state("b") == "waiting"
    # The retry limit counts within this submission: attempt 1 failing is retried again.
    assert exit_(sched, "a", 4.0, "failed") == [Finished("a", 1, "failed", goes_on=True), Retry("a", 2, "attempt 1 failed"),
                                                Start("a", 2, (slot("n1", [0]),))]
    assert started(exit_(sched, "a", 5.0, attempt=2)) == ["b"]
    assert started(exit_(sched, "b", 6.0)) == ["d"]
    exit_(sched, "d", 7.0)
    assert sched.finished() and sched.counts() == {"succeeded": 3}


def test_a_resubmitted_success_is_skipped_while_its_marker_says_done_and_rerun_when_forced():
    sched, out = scheduler([node("n1", 1)], {"id": "a"})
    exit_(sched, "a", 1.0)
    assert again(sched, 2.0, {"id": "a"}, done=["a"]) == [Skipped("a")]
    assert sched.state("a") == "succeeded" and sched.finished()
    # --force: the submission counts no marker, so the step runs anew.
    assert again(sched, 3.0, {"id": "a"}) == [Start("a", 1, (slot("n1", [0]),))]
    assert sched.view("a").generation == 2
    assert exit_(sched, "a", 4.0) == [Finished("a", 1, "succeeded")]
    assert sched.finished() and sched.counts() == {"succeeded": 1}


def test_a_changed_waiting_step_is_replaced_by_its_new_definition():
    sched, out = scheduler([node("n1", 1)], {"id": "x"}, {"id": "y", "command": "old"})
    assert started(out) == ["x"] and sched.state("y") == "ready"
    assert again(sched, 1.0, {"id": "y", "command": "new"}) == [WaitSaying("y", "needs 1 core, 0 free", 0)]
    assert sched.counts() == {"running": 1, "ready": 1}
    assert exit_(sched, "x", 2.0) == [Finished("x", 1, "succeeded"), Start("y", 1, (slot("n1", [0]),))]
    assert sched.view("y").spec.command == "new"
    exit_(sched, "y", 3.0)
    assert sched.finished() and sched.counts() == {"succeeded": 2}


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_changed_running_step_is_let_finish_then_its_new_definition_runs(outcome):
    sched, out = scheduler([node("n1", 2)], {"id": "a", "command": "old", "retries": 2},
                           {"id": "b", "deps": ["a"]})
    assert started(out) == ["a"]
    assert again(sched, 1.0, {"id": "a", "command": "new"}) == []
    assert sched.view("a").spec.command == "old" and sched.state("a") == "running"
    # The old attempt's end is said, but not retried and not passed on to b: the new one runs.
    assert exit_(sched, "a", 2.0, outcome) == [Finished("a", 1, outcome, goes_on=True),
                                               Start("a", 1, (slot("n1", [0]),))]
    assert sched.view("a").spec.command == "new" and sched.view("a").generation == 2
    assert sched.state("b") == "waiting"
    assert exit_(sched, "a", 3.0) == [Finished("a", 1, "succeeded"), Start("b", 1, (slot("n1", [0]),))]
    exit_(sched, "b", 4.0)
    assert sched.finished() and sched.counts() == {"succeeded": 2}


def test_changing_a_step_reruns_its_dependents_even_where_markers_say_done_and_nothing_else():
    chain = [{"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["b"]}, {"id": "d"}]
    sched, out = scheduler([node("n1", 1)], *[dict(t) for t in chain])
    for t, step in enumerate(["a", "b", "c", "d"], 1):
        exit_(sched, step, float(t))
    assert sched.counts() == {"succeeded": 4}
    changed = [dict(chain[0], command="changed")] + [dict(t) for t in chain[1:]]
    out = again(sched, 5.0, *changed, done=["b", "c", "d"])
    assert out == [Skipped("d"), Start("a", 1, (slot("n1", [0]),))]
    assert sched.state("b") == sched.state("c") == "waiting"
    assert started(exit_(sched, "a", 6.0)) == ["b"]
    assert started(exit_(sched, "b", 7.0)) == ["c"]
    exit_(sched, "c", 8.0)
    assert sched.finished() and sched.counts() == {"succeeded": 4}
    assert {v.id: v.generation for v in sched.views()} == {"a": 2, "b": 2, "c": 2, "d": 1}


def test_a_queued_dependent_of_a_step_run_anew_goes_back_to_waiting_for_it():
    sched, out = scheduler([node("n1", 1)], {"id": "a", "priority": 1}, {"id": "hold", "priority": 2},
                           {"id": "b", "deps": ["a"]})
    assert started(out) == ["a"]
    assert started(exit_(sched, "a", 1.0)) == ["hold"]
    assert sched.state("b") == "ready"
    assert again(sched, 2.0, {"id": "a", "command": "changed", "priority": 1}) == [
        WaitSaying("a", "needs 1 core, 0 free", 0)]
    assert sched.state("b") == "waiting"
    assert exit_(sched, "hold", 3.0) == [Finished("hold", 1, "succeeded"), Start("a", 1, (slot("n1", [0]),))]
    assert started(exit_(sched, "a", 4.0)) == ["b"]
    exit_(sched, "b", 5.0)
    assert sched.finished() and sched.counts() == {"succeeded": 3}


def test_a_running_step_whose_new_definition_has_a_failed_dependency_ends_blocked_and_is_said_once():
    sched, out = scheduler([node("n1", 2)], {"id": "a"})
    assert started(out) == ["a"]
    assert started(again(sched, 1.0, {"id": "y"}, {"id": "a", "command": "new", "deps": ["y"]})) == ["y"]
    assert exit_(sched, "y", 2.0, "failed") == [Finished("y", 1, "failed")]
    assert exit_(sched, "a", 3.0) == [Blocked("a", "y")]
    assert sched.finished() and sched.counts() == {"failed": 1, "blocked": 1}


# --- shards submitted to one fleet --------------------------------------------------------------

def test_a_step_held_as_another_shards_runs_once_that_shard_is_submitted_with_its_own_deps():
    s = suite({"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["b"]})
    a, b, c = s.steps
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    # Shard 0 owns a and c; b is another shard's: waited for, never run here.
    out = sched.handle(Submitted((a, b, c), {"a": (), "b": (), "c": ("b",)}, foreign=frozenset({"b"})), 0.0)
    assert started(out) == ["a"] and sched.state("b") == "elsewhere"
    assert started(exit_(sched, "a", 1.0)) == []
    # Shard 1, submitted to the same fleet, owns b (and waits for a, done here): b is
    # renewed with its own deps and runs here, and c follows it.
    out = sched.handle(Submitted((a, b), {"a": (), "b": ("a",)}, frozenset({"a"}), foreign=frozenset({"a"}),
                                 takes=frozenset({"b"})), 2.0)
    assert started(out) == ["b"]
    assert started(exit_(sched, "b", 3.0)) == ["c"]
    exit_(sched, "c", 4.0)
    assert sched.finished() and sched.state("b") == "succeeded"


def test_a_shards_step_already_running_here_is_kept_when_the_other_shard_waits_for_it():
    s = suite({"id": "b", "command": "new"}, {"id": "c", "deps": ["b"]})
    b, c = s.steps
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    assert started(sched.handle(Submitted((b,), {"b": ()}), 0.0)) == ["b"]
    older = suite({"id": "b", "command": "old"}).steps[0]  # the other shard's view of it
    out = sched.handle(Submitted((older, c), {"b": (), "c": ("b",)}, foreign=frozenset({"b"})), 1.0)
    assert sched.state("b") == "running" and not [d for d in out if isinstance(d, Ignored)]
    assert started(exit_(sched, "b", 2.0)) == ["c"]


def test_a_running_step_submitted_again_with_nan_in_its_args_is_kept_not_run_again_after_its_attempt():
    # nan != nan: two readings of one suite compared as different definitions (before
    # 2026-12-07), and the running step was to run again after its attempt.
    def read():  # (a new float each reading, as two readings of one TOML file give)
        return parse_suite({"steps": [{"id": "a", "call": "m:f", "args": {"x": float("nan")}}]},
                           Path("/x/suite.toml")).steps
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 1)), 0.0)
    assert started(sched.handle(submission(read()), 0.0)) == ["a"]
    assert sched.handle(submission(read()), 1.0) == []
    assert exit_(sched, "a", 2.0) == [Finished("a", 1, "succeeded")]
    assert sched.finished() and sched.counts() == {"succeeded": 1}
