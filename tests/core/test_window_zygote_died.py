"""Queued steps named by a node whose zygote died and was restarted
(fleet.control.rezygote): a lost exit of a queued step takes it back, ready again as its
next attempt (it may have started unheard: fleet.core.unsure), as a node's loss does;
through the real Scheduler handlers."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.scheduler import Begin, Cancel, Exits, Finished, NodeJoined, Scheduler, Start, StepExited, submission
from fleet.core.window import Queue, Unqueued

from coretools import node, suite  # noqa: E402

DIED = "its node's fork server (zygote) was killed by SIGKILL before its start was heard"
AGAIN = "; it may have started there: it runs again as attempt 2"


def chain_of_four():
    sched = Scheduler(reserve_after=None, window=None, depth=3)
    sched.handle(NodeJoined(node("n1", 1)), 0.0)
    out = sched.handle(submission(suite(*[dict(id=f"s{i}") for i in range(4)]).steps), 0.0)
    assert [(d.step, d.after) for d in out if isinstance(d, Queue)] == [("s1", "s0"), ("s2", "s1"), ("s3", "s2")]
    return sched


def test_queued_steps_lost_with_their_zygote_are_ready_again_as_their_next_attempts_and_the_chain_goes_on():
    sched = chain_of_four()
    # As fleet.control.rezygote feeds them: the queued ones (tail first), then the one that ran, one pass.
    out = sched.handle(Exits((StepExited("s3", 1, S.LOST, DIED), StepExited("s2", 1, S.LOST, DIED),
                              StepExited("s0", 1, S.FAILED, "the zygote died", final=True))), 1.0)
    assert [(d.step, d.attempt, d.reason, d.may_have_started) for d in out if isinstance(d, Unqueued)] == [
        ("s3", 1, DIED + AGAIN, True), ("s2", 1, DIED + AGAIN, True)]
    assert [(d.step, d.outcome) for d in out if isinstance(d, Finished)] == [("s0", S.FAILED)]
    assert [d.step for d in out if isinstance(d, Begin)] == ["s1"]  # what the new zygote was handed
    # queued again behind it, in order (new launches, their next attempts)
    assert [(d.step, d.attempt, d.after) for d in out if isinstance(d, Queue)] == [("s2", 2, "s1"), ("s3", 2, "s2")]
    assert not [d for d in out if isinstance(d, Start)]


def test_a_queued_step_cancelled_and_then_lost_with_its_zygote_ends_cancelled_as_on_a_nodes_loss():
    sched = chain_of_four()
    sched.handle(Cancel(("s2",)), 1.0)
    out = sched.handle(StepExited("s2", 1, S.LOST, DIED), 1.0)
    assert [(d.step, d.outcome, d.ran) for d in out if isinstance(d, Finished)] == [("s2", S.CANCELLED, False)]
    assert not [d for d in out if isinstance(d, Unqueued)]
