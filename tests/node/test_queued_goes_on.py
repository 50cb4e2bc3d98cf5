"""The zygote's held launches (fleet.node.queued) behind a step that goes on: dropped,
chain and all, never started; the outcomes that go on are the core's (AT_ONCE)."""

from __future__ import annotations

from fleet.core.states import AT_ONCE
from fleet.node.queued import GOES_ON, Queued
from fleet.wire import messages as P


def test_the_node_and_the_core_agree_on_which_exits_go_on():
    assert GOES_ON == AT_ONCE


def test_a_chain_behind_a_step_that_goes_on_is_dropped_tail_first_and_nothing_of_it_is_due():
    q = Queued()
    for step, after in (("a", "p"), ("b", "a"), ("c", "b"), ("x", "other")):
        msg = P.Launch.__new__(P.Launch)
        object.__setattr__(msg, "step", step)
        object.__setattr__(msg, "attempt", 1)
        object.__setattr__(msg, "after", after)
        q.hold(msg, None)
    assert q.behind("p") == [("c", 1), ("b", 1), ("a", 1)]
    assert q.due("p") == [] and q.due("a") == [] and len(q) == 1 and not q.holds("a")
    assert q.behind("nothing") == []
