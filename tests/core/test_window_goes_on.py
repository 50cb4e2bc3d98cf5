"""A step that goes on (its next stage, a restart) runs again at once, before the step
queued behind it on its node (fleet.core.windoworder._stays), through the real
Scheduler handlers: its node drops what was queued behind it instead of starting it
(fleet.node.queued), and the core, told so by the exit itself, promotes nothing; the
node's Dropped makes each ready again, its attempt unused (the audit's s19)."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.scheduler import Cancel, Finished, NodeJoined, NodeLost, Scheduler, Start, StepExited, submission
from fleet.core.window import Begin, Queue, Unqueued

from coretools import node, suite  # noqa: E402

GONE_ON = "dropped: the step it waited for went on"


def of(kind, decisions):
    return [d for d in decisions if isinstance(d, kind)]


def staged(window, depth=1, qs=3):
    """s19: one 2-core node; P (2 cores) and Q1..Qn (2 cores) behind it."""
    sched = Scheduler(window=window, depth=depth)
    sched.handle(NodeJoined(node("n1", 2)), 0.0)
    tables = [{"id": "P", "cores": 2, "estimate": 1}] + [{"id": f"Q{i}", "cores": 2, "estimate": 1}
                                                          for i in range(1, qs + 1)]
    return sched, sched.handle(submission(suite(*tables).steps), 0.0)


def test_a_step_that_goes_on_starts_again_at_once_and_the_step_queued_behind_it_does_not_begin():
    sched, out = staged(None)
    assert [d.step for d in of(Start, out)] == ["P"] and [(d.step, d.after) for d in of(Queue, out)] == [("Q1", "P")]
    out = sched.handle(StepExited("P", 1, S.NEXT, "next stage 'two'", stage="two"), 1.0)
    assert not of(Begin, out)  # its node dropped Q1: nothing promoted
    assert [d.step for d in of(Start, out)] == ["P"]  # its next stage, at once, on the cores it freed
    assert sched.state("Q1") == S.QUEUED and sched.window.after("Q1") is None
    out = sched.handle(StepExited("Q1", 1, S.CANCELLED, GONE_ON), 1.1)  # the node's Dropped
    assert [(d.step, d.attempt) for d in of(Unqueued, out)] == [("Q1", 1)] and not of(Finished, out)
    assert [(d.step, d.after) for d in of(Queue, out)] == [("Q1", "P")]  # behind P's next stage
    out = sched.handle(StepExited("P", 1, S.SUCCEEDED), 2.0)
    assert [d.step for d in of(Begin, out)] == ["Q1"]


def test_with_the_window_the_stages_and_the_steps_start_as_without_it():
    def run(window):
        sched, out = staged(window)
        log, running, stages = [], [], {"P": 2}
        now = 0.0
        while True:
            todo = list(out)
            while todo:  # (each step its node dropped is answered at once, as a node does)
                d = todo.pop(0)
                if isinstance(d, (Start, Begin)):
                    log.append((now, d.step))
                    running.append(d.step)
                for sid in list(sched.window.stayed):
                    todo += sched.handle(StepExited(sid, 1, S.CANCELLED, GONE_ON), now)
            if not running:
                return log
            now += 1.0
            sid = running.pop(0)
            stages[sid] = stages.get(sid, 1) - 1
            out = sched.handle(StepExited(sid, 1, S.NEXT, "next", stage="two") if stages[sid]
                               else StepExited(sid, 1, S.SUCCEEDED), now)
    assert run(None) == run(0) == [(0.0, "P"), (1.0, "P"), (2.0, "Q1"), (3.0, "Q2"), (4.0, "Q3")]


def test_a_chain_behind_a_step_that_goes_on_is_dropped_whole_and_ready_again():
    sched, out = staged(None, depth=2)
    assert [(d.step, d.after) for d in of(Queue, out)] == [("Q1", "P"), ("Q2", "Q1")]
    out = sched.handle(StepExited("P", 1, S.RESTART, "restart in a fresh work directory"), 1.0)
    assert not of(Begin, out) and [d.step for d in of(Start, out)] == ["P"]
    for sid in ("Q2", "Q1"):  # the node's Dropped, tail first
        out = sched.handle(StepExited(sid, 1, S.CANCELLED, GONE_ON), 1.1)
        assert [(d.step, d.attempt) for d in of(Unqueued, out)] == [(sid, 1)]
    assert not sched.window.stayed and sched.window.after("Q1") == "P" and sched.window.after("Q2") == "Q1"


def test_a_step_dropped_as_its_predecessor_went_on_is_ready_again_if_its_node_is_lost_first():
    sched, _ = staged(None)
    sched.handle(StepExited("P", 1, S.NEXT, "next", stage="two"), 1.0)
    out = sched.handle(NodeLost("n1", "gone"), 1.1)
    assert [(d.step, d.attempt) for d in of(Unqueued, out)] == [("Q1", 1)] and not sched.window.stayed


def test_a_step_cancelled_while_its_node_drops_it_ends_cancelled_unstarted():
    sched, _ = staged(None)
    sched.handle(StepExited("P", 1, S.NEXT, "next", stage="two"), 1.0)
    sched.handle(Cancel(("Q1",)), 1.05)
    out = sched.handle(StepExited("Q1", 1, S.CANCELLED, GONE_ON), 1.1)
    assert [(d.step, d.outcome, d.ran) for d in of(Finished, out)] == [("Q1", S.CANCELLED, False)]
    assert sched.state("Q1") == S.CANCELLED and not sched.window.stayed


def test_a_drop_that_comes_before_the_exit_that_went_on_makes_the_step_ready_and_nothing_goes_behind_meanwhile():
    # A parent's wait exit reaches the scheduler only once its children are read
    # (fleet.control.children), so its node's Dropped of the step queued behind it may
    # come first; it was taken for a cancel (the step ended, never run: the waitwindow audit).
    sched, _ = staged(None)
    out = sched.handle(StepExited("Q1", 1, S.CANCELLED, GONE_ON), 1.0)
    assert [(d.step, d.attempt) for d in of(Unqueued, out)] == [("Q1", 1)] and not of(Finished, out)
    assert not of(Queue, out) and sched.state("Q1") == S.READY  # nothing behind P until its exit
    out = sched.handle(StepExited("P", 1, S.NEXT, "next stage 'two'", stage="two"), 1.1)
    assert [d.step for d in of(Start, out)] == ["P"] and [(d.step, d.after) for d in of(Queue, out)] == [("Q1", "P")]


def test_a_wait_goes_on_as_a_next_does_the_step_queued_behind_it_is_not_promoted():
    assert S.WAIT in S.AT_ONCE
    sched, out = staged(None)
    out = sched.handle(StepExited("P", 1, S.WAIT, "waiting for its children"), 1.0)
    assert not of(Begin, out)  # its node dropped Q1 (no children pending here: P runs again at once)
    assert [d.step for d in of(Start, out)] == ["P"]
    out = sched.handle(StepExited("Q1", 1, S.CANCELLED, GONE_ON), 1.1)
    assert [(d.step, d.attempt) for d in of(Unqueued, out)] == [("Q1", 1)] and not of(Finished, out)


def test_a_chain_dropped_tail_first_before_the_exit_that_went_on_is_ready_again_whole():
    sched, out = staged(None, depth=2)
    assert [(d.step, d.after) for d in of(Queue, out)] == [("Q1", "P"), ("Q2", "Q1")]
    out = sched.handle(StepExited("Q2", 1, S.CANCELLED, GONE_ON), 1.0)  # the tail's Dropped first
    out += sched.handle(StepExited("Q1", 1, S.CANCELLED, GONE_ON), 1.0)
    assert sorted(d.step for d in of(Unqueued, out)) == ["Q1", "Q2"] and not of(Finished, out) and not of(Queue, out)
    out = sched.handle(StepExited("P", 1, S.WAIT, "waiting for its children"), 1.1)
    assert [d.step for d in of(Start, out)] == ["P"]
    assert [(d.step, d.after) for d in of(Queue, out)] == [("Q1", "P"), ("Q2", "Q1")]


def test_a_parent_waiting_for_its_last_child_takes_its_cores_when_it_ends_before_a_step_handed_ahead():
    from test_phases import children_of  # (the same directory)
    from fleet.core.window import Withdraw
    sched = Scheduler(window=None)
    sched.handle(NodeJoined(node("n1", 1)), 0.0)
    out = sched.handle(submission(suite({"id": "p", "estimate": 1}, *({"id": f"i{k}", "estimate": 5}
                                                                       for k in range(3))).steps), 0.0)
    assert [d.step for d in of(Start, out)] == ["p"] and [(d.step, d.after) for d in of(Queue, out)] == [("i0", "p")]
    sched.handle(children_of("p", "a", "b"), 1.0)
    out = sched.handle(StepExited("p", 1, S.WAIT, "waiting for its children"), 1.0)
    out += sched.handle(StepExited("i0", 1, S.CANCELLED, GONE_ON), 1.0)  # its node dropped i0
    assert [d.step for d in of(Start, out)] == ["p/a"] and [(d.step, d.after) for d in of(Queue, out)] == [
        ("p/b", "p/a")]  # children first
    out = sched.handle(StepExited("p/a", 1, S.SUCCEEDED), 2.0)  # p/b begins; p waits for it alone
    assert [d.step for d in of(Begin, out)] == ["p/b"] and not of(Queue, out)  # not i0: p resumes first
    out = sched.handle(StepExited("p/b", 1, S.SUCCEEDED), 3.0)
    assert [d.step for d in of(Start, out)] == ["p"], out
    assert not of(Withdraw, out)
