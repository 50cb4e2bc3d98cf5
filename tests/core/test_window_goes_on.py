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
