"""A step handed to a node ahead whose start cannot be ruled out (fleet.core.unsure):
its node lost, or its zygote dead, before its start was heard. Before 2026-12-07 it was
"lost before it started" and ran again as the same attempt, though it may have run
(the crashfuzz audit's F4). Through the real Scheduler handlers."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.scheduler import Finished, NodeJoined, NodeLost, Retry, Scheduler, Start, StepExited, submission
from fleet.core.window import Queue, Unqueued

from coretools import node, slot, suite  # noqa: E402

ZYGOTE = "its node's fork server (zygote) was killed by SIGKILL before its start was heard; n1 started a new one"


def queued_behind_a(retries: int):
    """n1 runs a with q queued behind it; n2 is free for what comes back."""
    sched = Scheduler(window=None)
    sched.handle(NodeJoined(node("n1", 1)), 0.0)
    out = sched.handle(submission(suite({"id": "a"}, {"id": "q", "retries": retries}).steps), 0.0)
    assert [(d.step, d.attempt, d.after) for d in out if isinstance(d, Queue)] == [("q", 1, "a")]
    sched.handle(NodeJoined(node("n2", 1)), 0.5)
    return sched


def of(kind, decisions):
    return [d for d in decisions if isinstance(d, kind)]


def test_a_queued_step_of_a_lost_node_runs_again_as_its_next_attempt_and_its_record_says_it_may_have_started():
    sched = queued_behind_a(retries=0)
    out = sched.handle(NodeLost("n1", "agent missed heartbeats"), 1.0)
    [back] = of(Unqueued, out)
    assert (back.step, back.attempt, back.may_have_started) == ("q", 1, True)
    assert back.reason == ("n1 was lost before its start was heard (agent missed heartbeats); "
                           "it may have started there: it runs again as attempt 2")
    assert "before it started" not in back.reason
    assert of(Start, out) == [Start("q", 2, (slot("n2", [0]),))]


def test_the_attempt_a_lost_node_may_have_run_counts_against_no_retry():
    sched = queued_behind_a(retries=0)  # no retry: its own failure ends it, its node's loss does not
    sched.handle(NodeLost("n1", "gone"), 1.0)
    out = sched.handle(StepExited("q", 2, S.FAILED, "exit 1"), 2.0)
    assert of(Finished, out) == [Finished("q", 2, S.FAILED, "exit 1")] and not of(Retry, out)
    sched = queued_behind_a(retries=1)  # one retry: still one, as attempt 3
    sched.handle(NodeLost("n1", "gone"), 1.0)
    out = sched.handle(StepExited("q", 2, S.FAILED, "exit 1"), 2.0)
    assert of(Retry, out) == [Retry("q", 3, "attempt 2 failed")]
    out = sched.handle(StepExited("q", 3, S.FAILED, "exit 1"), 3.0)
    assert of(Finished, out) == [Finished("q", 3, S.FAILED, "exit 1")] and not of(Retry, out)


def test_a_queued_step_its_dead_zygote_may_have_started_runs_again_as_its_next_attempt():
    sched = queued_behind_a(retries=0)
    out = sched.handle(StepExited("q", 1, S.LOST, ZYGOTE), 1.0)  # as fleet.control.rezygote.take_back feeds it
    assert of(Unqueued, out) == [Unqueued("q", 1, ZYGOTE + "; it may have started there: it runs again as attempt 2",
                                          True)]
    assert of(Start, out) == [Start("q", 2, (slot("n2", [0]),))]
    assert of(Finished, sched.handle(StepExited("q", 1, S.SUCCEEDED), 2.0)) == []  # the spent attempt's word: stale


def test_a_queued_step_its_node_dropped_when_taken_back_surely_did_not_start_and_keeps_its_attempt():
    sched = Scheduler(window=None)
    for n in (node("n1", 1), node("n2", 1)):
        sched.handle(NodeJoined(n), 0.0)
    out = sched.handle(submission(suite({"id": "long"}, {"id": "mid"}, {"id": "q"}).steps), 0.0)
    assert [(d.step, d.after) for d in of(Queue, out)] == [("q", "long")]
    sched.handle(StepExited("mid", 1, S.SUCCEEDED), 1.0)  # n2 is free: q is taken back (a Withdraw)
    out = sched.handle(StepExited("q", 1, S.CANCELLED, "withdrawn before it started"), 1.1)  # its node's Dropped
    assert [(d.attempt, d.may_have_started) for d in of(Unqueued, out)] == [(1, False)]
    assert of(Start, out) == [Start("q", 1, (slot("n2", [0]),))]
