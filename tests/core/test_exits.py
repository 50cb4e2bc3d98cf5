"""A loop turn's exits handed over as one Exits event: each applied as alone, then one
scheduling pass for what they freed (fleet.core.decisions.Exits)."""

from __future__ import annotations

from fleet.core.scheduler import Exits, Finished, Retry, Start, StepExited

from coretools import node, scheduler


def test_several_exits_in_one_event_end_their_steps_in_order_then_one_pass_starts_what_they_freed():
    sched, out = scheduler([node("n1", 2)], {"id": "a"}, {"id": "b", "retries": 1}, {"id": "c"}, {"id": "d"})
    assert [d.step for d in out if isinstance(d, Start)] == ["a", "b"]
    out = sched.handle(Exits((StepExited("a", 1, "succeeded"), StepExited("b", 1, "failed", "boom"))), 5.0)
    kinds = [(type(d).__name__, d.step) for d in out if isinstance(d, (Finished, Retry, Start))]
    # The exits' own decisions first, in the order they came; then the one pass: b's
    # retry keeps its place (setup order) ahead of c, and the two freed cores go to b and c.
    assert kinds == [("Finished", "a"), ("Finished", "b"), ("Retry", "b"), ("Start", "b"), ("Start", "c")]
    assert sched.state("a") == "succeeded" and sched.state("b") == sched.state("c") == "running"


def test_the_same_exits_one_by_one_or_together_leave_the_same_steps_done_and_are_deterministic():
    def run(together: bool):
        sched, _ = scheduler([node("n1", 2)], *({"id": f"s{i}"} for i in range(6)))
        ended = [StepExited("s0", 1, "succeeded"), StepExited("s1", 1, "succeeded")]
        outs = [sched.handle(Exits(tuple(ended)), 1.0)] if together else [sched.handle(e, 1.0) for e in ended]
        return sched.counts(), [d for o in outs for d in o]
    assert run(True)[0] == run(False)[0] == {"succeeded": 2, "running": 2, "ready": 2}
    assert run(True) == run(True)


def test_a_step_that_ended_holds_no_placement_so_a_long_run_does_not_keep_every_slot_it_gave():
    sched, out = scheduler([node("n1", 2)], {"id": "a"}, {"id": "b", "retries": 1}, {"id": "c"})
    assert sched.view("a").placement and sched.view("b").placement
    sched.handle(Exits((StepExited("a", 1, "succeeded"), StepExited("b", 1, "failed", "boom"))), 5.0)
    # a is done: nothing of the slot it ran on stays with it; b's retry runs on a new placement.
    assert sched.view("a").state == "succeeded" and sched.view("a").placement == ()
    assert sched.view("b").state == "running" and sched.view("b").placement
    sched.handle(StepExited("b", 2, "failed", "again"), 6.0)
    assert sched.view("b").state == "failed" and sched.view("b").placement == ()
