"""A step handed ahead is not stuck behind a running step whose end is unknown
(fleet.core.windowpick, fleet.core.windowback), through the real Scheduler handlers:
an unknown end is not soon, a queued step is taken back when cores of its demand free
elsewhere first, and one queued near the allocation's end is counted from its
predecessor's end."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.deadline import AllocationEnds
from fleet.core.scheduler import (Cancel, Exits, Finished, NodeJoined, NodeLost, Scheduler, Start, StepExited, Wait,
                                  submission)
from fleet.core.window import Begin, Queue, Unqueued, Withdraw

from coretools import node, slot, suite  # noqa: E402

TWO = [node("n1", 1), node("n2", 1)]
DROPPED = "withdrawn before it started"  # what a node says of a launch it dropped when asked to


def windowed(nodes, *tables, ends=None):
    sched = Scheduler(window=None)
    for n in nodes:
        sched.handle(NodeJoined(n), 0.0)
    if ends is not None:
        sched.handle(AllocationEnds(*ends), 0.0)
    return sched, sched.handle(submission(suite(*tables).steps), 0.0)


def of(kind, decisions):
    return [d for d in decisions if isinstance(d, kind)]


def queued(decisions):
    return [(d.step, d.after) for d in of(Queue, decisions)]


def back(step: str, node_: str, pred: str) -> str:
    return f"taken back from {node_}: cores came free elsewhere before {pred!r} ended"


def deadline_waits(decisions):
    return [d for d in of(Wait, decisions) if d.why.cause == W.DEADLINE]


def the_audit_suite():
    """The audit's case: one step with no estimate, four short ones with one."""
    return [{"id": "long"}] + [{"id": f"short/{i}", "estimate": 1} for i in range(4)]


def test_a_short_step_is_not_queued_behind_a_running_step_with_no_estimate_while_a_known_slot_frees_sooner():
    sched, out = windowed(TWO, *the_audit_suite())
    assert [(d.step, d.placement[0].node) for d in of(Start, out)] == [("long", "n1"), ("short/0", "n2")]
    assert queued(out) == [("short/1", "short/0")]  # short/2 waits for that slot, not behind long
    log, t = [], 0.0
    for sid in ("short/0", "short/1", "short/2", "short/3"):
        t += 1
        log += sched.handle(StepExited(sid, 1, S.SUCCEEDED), t)
    assert [(d.step, d.placement[0].node) for d in of(Begin, log)] == [
        ("short/1", "n2"), ("short/2", "n2"), ("short/3", "n2")]
    assert not of(Withdraw, log) and sched.state("long") == S.RUNNING and sched.window.queued() == 0


def test_a_queued_step_is_taken_back_when_cores_free_elsewhere_before_its_predecessor_ends():
    sched, out = windowed(TWO, {"id": "long"}, {"id": "mid"}, {"id": "q"})
    assert queued(out) == [("q", "long")]  # no estimates: behind the first started, as ever
    out = sched.handle(StepExited("mid", 1, S.SUCCEEDED), 1.0)
    assert of(Withdraw, out) == [Withdraw("q", 1, back("q", "n1", "long"))]
    assert sched.state("q") == S.QUEUED and not of(Start, out)  # until its node says
    out = sched.handle(StepExited("q", 1, S.CANCELLED, DROPPED), 1.1)
    assert of(Unqueued, out) == [Unqueued("q", 1, back("q", "n1", "long"))]
    assert of(Start, out) == [Start("q", 1, (slot("n2", [0]),))] and not of(Finished, out)
    out = sched.handle(StepExited("q", 1, S.SUCCEEDED), 2.0)
    assert of(Finished, out) == [Finished("q", 1, S.SUCCEEDED, "")] and sched.state("long") == S.RUNNING


def test_a_step_its_node_started_before_the_withdrawal_came_runs_where_it_was_queued():
    sched, _ = windowed(TWO, {"id": "long"}, {"id": "mid"}, {"id": "q"})
    assert of(Withdraw, sched.handle(StepExited("mid", 1, S.SUCCEEDED), 1.0))
    out = sched.handle(StepExited("long", 1, S.SUCCEEDED), 1.05)  # its node started q first
    assert of(Begin, out) == [Begin("q", 1, (slot("n1", [0]),), "long")] and not of(Unqueued, out)
    assert sched.window.recalled == {} and sched.window.recalling == {}
    sched.handle(StepExited("q", 1, S.SUCCEEDED), 2.0)
    assert sched.finished() and sched.counts() == {S.SUCCEEDED: 3}


def test_the_steps_behind_the_latest_ends_are_taken_back_only_as_many_as_the_free_cores_hold():
    tables = [{"id": f"a{i}", "estimate": 10 * (i + 1)} for i in range(3)] + [{"id": "u"}]
    tables += [{"id": f"q{i}"} for i in range(4)]
    sched, out = windowed([node("n1", 4)], *tables)
    assert queued(out) == [("q0", "a0"), ("q1", "a1"), ("q2", "a2"), ("q3", "u")]
    out = sched.handle(NodeJoined(node("n2", 2)), 1.0)
    # Unknown end first, then the latest expected end.
    assert [d.step for d in of(Withdraw, out)] == ["q3", "q2"]
    assert not of(Withdraw, sched.handle(Exits(()), 1.1))  # the two asked for fill the free cores
    out = sched.handle(StepExited("q3", 1, S.CANCELLED, DROPPED), 1.2)
    assert [(d.step, d.placement[0].node) for d in of(Start, out)] == [("q3", "n2")]
    out = sched.handle(StepExited("q2", 1, S.CANCELLED, DROPPED), 1.3)
    assert [(d.step, d.placement[0].node) for d in of(Start, out)] == [("q2", "n2")]
    assert sched.state("q0") == sched.state("q1") == S.QUEUED


def test_nothing_is_taken_back_while_a_ready_step_of_its_demand_waits_for_the_free_cores():
    sched, out = windowed(TWO, {"id": "long"}, {"id": "mid"}, {"id": "q"}, {"id": "r"})
    assert queued(out) == [("q", "long"), ("r", "mid")]
    out = sched.handle(StepExited("mid", 1, S.SUCCEEDED), 1.0)
    assert of(Begin, out) == [Begin("r", 1, (slot("n2", [0]),), "mid")] and not of(Withdraw, out)


def test_a_step_taken_back_is_not_taken_back_again_nor_queued_behind_an_unknown_end_again():
    sched, _ = windowed(TWO, {"id": "long"}, {"id": "mid"}, {"id": "q", "priority": 4})
    assert of(Withdraw, sched.handle(StepExited("mid", 1, S.SUCCEEDED), 1.0))
    out = sched.handle(submission(suite({"id": "urgent", "priority": 1}).steps), 1.05)
    assert [d.step for d in of(Start, out)] == ["urgent"]  # the free core went to it meanwhile
    out = sched.handle(StepExited("q", 1, S.CANCELLED, DROPPED), 1.1)
    assert [d.step for d in of(Unqueued, out)] == ["q"] and not of(Queue, out)  # not behind long or urgent
    assert sched.state("q") == S.READY
    out = sched.handle(StepExited("urgent", 1, S.SUCCEEDED), 2.0)
    assert of(Start, out) == [Start("q", 1, (slot("n2", [0]),))] and sched.window.once == set()


def test_a_step_cancelled_or_whose_node_is_lost_while_it_is_taken_back_ends_as_ever():
    sched, _ = windowed(TWO, {"id": "long"}, {"id": "mid"}, {"id": "q"})
    assert of(Withdraw, sched.handle(StepExited("mid", 1, S.SUCCEEDED), 1.0))
    sched.handle(Cancel(("q",), "cancelled (fleet cancel)"), 1.05)
    out = sched.handle(StepExited("q", 1, S.CANCELLED, DROPPED), 1.1)
    assert of(Finished, out) == [Finished("q", 1, S.CANCELLED, "cancelled before it started", ran=False)]
    sched, _ = windowed(TWO, {"id": "long"}, {"id": "mid"}, {"id": "q"})
    assert of(Withdraw, sched.handle(StepExited("mid", 1, S.SUCCEEDED), 1.0))
    out = sched.handle(NodeLost("n1"), 1.1)
    assert Unqueued("q", 1, "n1 was lost before its start was heard (node lost); it may have started there: it runs again as attempt 2", True) in out
    assert [(d.step, d.placement[0].node) for d in of(Start, out)] == [("q", "n2")]
    assert sched.window.recalled == {} and sched.window.loose == {}


def test_near_the_drain_point_a_step_is_queued_only_where_it_is_expected_to_end_before_it():
    # Counted from its predecessor's expected end, not from now; unknown: not known to end in time.
    _, out = windowed([node("n1", 1)], {"id": "long"}, {"id": "q", "estimate": 1}, ends=(100.0, 10.0))
    assert queued(out) == [] and not deadline_waits(out)  # (without an allocation end: behind long)
    _, out = windowed([node("n1", 1)], {"id": "long"}, {"id": "q", "estimate": 1})
    assert queued(out) == [("q", "long")]
    sched, out = windowed([node("n1", 1)], {"id": "a", "estimate": 8}, {"id": "q", "estimate": 3}, ends=(100.0, 10.0))
    assert queued(out) == [] and not deadline_waits(out) and sched.deadline.held == 0  # 8 + 3 > 10: not yet said
    _, out = windowed([node("n1", 1)], {"id": "a", "estimate": 8}, {"id": "q", "estimate": 2}, ends=(100.0, 10.0))
    assert queued(out) == [("q", "a")]  # 8 + 2 <= 10


def test_the_same_events_give_the_same_decisions_when_steps_are_taken_back():
    def run():
        tables = [{"id": f"s{i}", **({"estimate": 1 + i % 4} if i % 3 else {})} for i in range(40)]
        sched, out = windowed([node("n1", 2), node("n2", 3)], *tables)
        log, t = list(out), 0.0
        while not sched.finished():
            t += 1
            asked = [d for d in log if isinstance(d, Withdraw) and sched.state(d.step) == S.QUEUED]
            if asked:  # the node drops what it was asked to take back, at once
                log += sched.handle(StepExited(asked[0].step, 1, S.CANCELLED, DROPPED), t)
                continue
            sid = sorted(sched.running_ids(), key=lambda s: (len(s) + int(s[1:]) * 7) % 5)[0]
            log += sched.handle(StepExited(sid, 1, S.SUCCEEDED), t)
        return log
    first = run()
    assert first == run() and of(Withdraw, first) and of(Begin, first)


def test_a_queued_step_returned_to_the_ready_steps_keeps_the_time_it_has_waited():
    # q is ready at 0 and queued behind long on n1 (r behind mid on n2: both windows
    # full); n1 is lost at 30 before q started. Back among the ready steps, q has waited
    # 40 s at 40, not 10: the age that status shows and that --reserve-after counts.
    sched, out = windowed(TWO, {"id": "long"}, {"id": "mid"}, {"id": "q"}, {"id": "r"})
    assert queued(out) == [("q", "long"), ("r", "mid")]
    out = sched.handle(NodeLost("n1", "gone"), 30.0)
    assert [d.step for d in of(Unqueued, out)] == ["q"] and sched.state("q") == S.READY
    assert {h.step: h.ready_s for h in sched.waiting_heads(now=40.0, limit=10)} == {"q": 40.0}
