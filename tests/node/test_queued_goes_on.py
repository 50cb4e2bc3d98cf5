"""The zygote's held launches (fleet.node.queued) behind a step that goes on: dropped,
chain and all, never started; the outcomes that go on are the core's (AT_ONCE)."""

from __future__ import annotations

from fleet.core.states import AT_ONCE
from fleet.node.queued import GOES_ON, Queued
from fleet.wire import messages as P


def test_the_node_and_the_core_agree_on_which_exits_go_on():
    assert GOES_ON == AT_ONCE


def launch(step: str, after: str) -> P.Launch:
    msg = P.Launch.__new__(P.Launch)  # (only what Queued reads)
    for k, v in (("step", step), ("attempt", 1), ("after", after)):
        object.__setattr__(msg, k, v)
    return msg


def test_a_chain_behind_a_step_that_goes_on_is_dropped_tail_first_and_nothing_of_it_is_due():
    q = Queued()
    for step, after in (("a", "p"), ("b", "a"), ("c", "b"), ("x", "other")):
        q.hold(launch(step, after), None)
    assert q.behind("p") == [("c", 1), ("b", 1), ("a", 1)]
    assert q.due("p") == [] and q.due("a") == [] and len(q) == 1 and not q.holds("a")
    assert q.behind("nothing") == []


def test_a_launch_queued_behind_a_step_that_went_on_before_it_came_is_dropped_until_that_step_comes_again():
    # The coordinator queued q behind p's stage; p was reaped (going on) before q's launch
    # came: q is dropped as if it had been held (the coordinator expects its Dropped), and
    # r behind q too. p's next launch comes after every launch queued behind its stage.
    q = Queued()
    q.hold(launch("a", "p"), None)
    assert q.behind("p") == [("a", 1)]
    assert q.gone(launch("q", "p")) and q.gone(launch("r", "q")) and q.gone(launch("s", "a"))
    assert not q.gone(launch("p", "")) and not q.gone(launch("t", "p"))  # p runs again: behind it as ever
    assert not q.gone(launch("q", "other")) and not q.gone(launch("u", "q"))  # q launched anew


def test_steps_that_went_on_are_forgotten_after_a_while_so_a_long_run_of_stages_keeps_no_id_for_each(monkeypatch):
    # A step that goes on and then runs on another node is never launched here again;
    # remembered for ever, a node of a million-step run of stages would keep an id for each.
    import fleet.node.queued as queued
    clock = [1000.0]
    monkeypatch.setattr(queued.time, "monotonic", lambda: clock[0])
    q = Queued()
    for i in range(1000):
        q.behind(f"p{i}")
        clock[0] += 1.0
    assert len(q._went_on) <= queued.FORGET_S + 1
    assert q.gone(launch("late", "p999"))  # one a moment ago: still remembered
    assert not q.gone(launch("later", "p0"))  # long ago: forgotten
