"""The reports held for the turn's pass (fleet.control.early), against a real Scheduler
with a node window built through its handlers: a queued step's reports are kept until
the scheduler runs it, in order, a step's Exited never before its Started."""

from __future__ import annotations

import sys
from pathlib import Path

from fleet.control.early import Early
from fleet.core import states as S
from fleet.core.scheduler import NodeJoined, NodeLost, Scheduler, StepExited, submission
from fleet.wire import messages as P

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from coretools import node, suite  # noqa: E402


def windowed():
    """n1 and n2 of one core each, s0 and s1 running, s2 queued behind s0 on n1, s3
    behind s1 on n2."""
    sched = Scheduler(window=None)
    for n in (node("n1", 1), node("n2", 1)):
        sched.handle(NodeJoined(n), 0.0)
    sched.handle(submission(suite(*[{"id": f"s{i}"} for i in range(4)]).steps), 0.0)
    assert [sched.state(f"s{i}") for i in range(4)] == [S.RUNNING, S.RUNNING, S.QUEUED, S.QUEUED]
    return sched


def started(step, attempt=1):
    return P.Started(step=step, attempt=attempt, pid=100, pgid=100, at=1.0)


def exited(step, attempt=1):
    return P.Exited(step=step, attempt=attempt, pid=100, outcome="succeeded", returncode=0, signal=None,
                    decided_at=0.0, first_at=0.0, work_start=0.0, work_end=0.0, ended_at=1.0, utime=0.0, stime=0.0,
                    maxrss_kb=0, affinity=(0,), placement_ok=True, error=None)


def replayed(early, sched):
    seen = []
    handed = early.replay(sched, lambda n, m, t: seen.append(("started", m.step, n, t)),
                          lambda n, m, t: seen.append(("exited", m.step, n, t)), lambda: seen.append("failed"))
    return handed, seen


def test_a_queued_steps_reports_wait_for_the_pass_that_runs_it_and_come_out_in_order():
    sched, early = windowed(), Early()
    assert not early.hold(sched, "n1", exited("s0"), 1.0)  # a running step's: handled at once
    assert early.hold(sched, "n1", started("s2"), 1.1)
    assert early.hold(sched, "n1", exited("s2"), 1.2)
    assert early and replayed(early, sched) == (False, [])  # s0's exit is not handed yet: nothing comes out
    sched.handle(StepExited("s0", 1, S.SUCCEEDED), 1.3)
    assert sched.state("s2") == S.RUNNING
    assert replayed(early, sched) == (True, [("started", "s2", "n1", 1.1), ("exited", "s2", "n1", 1.2)])
    assert not early and early.steps == {}


def test_a_later_report_of_a_step_with_one_held_is_held_behind_it_even_once_the_step_runs():
    sched, early = windowed(), Early()
    assert early.hold(sched, "n1", started("s2"), 1.0)
    sched.handle(StepExited("s0", 1, S.SUCCEEDED), 1.1)  # s2 runs now, its Started still held
    assert early.hold(sched, "n1", exited("s2"), 1.2)  # so its Exited may not overtake it
    assert not early.hold(sched, "n2", exited("s1"), 1.3)  # another step's goes its way
    assert [s for _, s, _, _ in replayed(early, sched)[1]] == ["s2", "s2"]


def test_one_step_still_queued_holds_back_only_its_own_reports():
    sched, early = windowed(), Early()
    assert early.hold(sched, "n1", started("s2"), 1.0)
    assert early.hold(sched, "n2", started("s3"), 1.1)
    sched.handle(StepExited("s1", 1, S.SUCCEEDED), 1.2)  # s3 runs; s2 still waits for s0
    handed, seen = replayed(early, sched)
    assert handed and seen == [("started", "s3", "n2", 1.1)]
    assert [m.step for _, m, _ in early.held] == ["s2"] and early.steps == {"s2": 1}


def test_reports_that_do_not_match_the_queued_attempt_or_node_are_not_held():
    sched, early = windowed(), Early()
    assert not early.hold(sched, "n2", started("s2"), 1.0)  # s2 is queued on n1
    assert not early.hold(sched, "n1", started("s2", attempt=2), 1.0)
    assert not early.hold(sched, "n1", started("nosuch"), 1.0)
    assert not early


def test_a_held_report_of_a_step_whose_node_was_lost_is_handed_on_to_be_judged_stale():
    sched, early = windowed(), Early()
    assert early.hold(sched, "n1", started("s2"), 1.0)
    sched.handle(NodeLost("n1", "gone"), 1.1)
    assert sched.state("s2") != S.QUEUED  # back among the ready steps (or started elsewhere)
    handed, seen = replayed(early, sched)
    assert handed and seen == [("started", "s2", "n1", 1.0)] and not early


def test_a_handler_that_raises_loses_none_of_the_reports_after_it():
    sched, early = windowed(), Early()
    early.hold(sched, "n1", started("s2"), 1.0)
    early.hold(sched, "n1", exited("s2"), 1.1)
    sched.handle(StepExited("s0", 1, S.SUCCEEDED), 1.2)
    seen = []

    def boom(n, m, t):
        raise RuntimeError("a bug")
    assert early.replay(sched, boom, lambda n, m, t: seen.append(m.step), lambda: seen.append("failed"))
    assert seen == ["failed", "s2"] and not early


def test_a_replay_past_its_time_keeps_the_rest_in_order_for_the_next_turn(monkeypatch):
    import fleet.control.early as early_mod
    sched, early = windowed(), Early()
    for i, (node, pred, step) in enumerate([("n1", "s0", "s2"), ("n2", "s1", "s3")]):
        early.hold(sched, node, started(step), 1.0 + i)
        early.hold(sched, node, exited(step), 1.5 + i)
    sched.handle(StepExited("s0", 1, S.SUCCEEDED), 3.0)
    sched.handle(StepExited("s1", 1, S.SUCCEEDED), 3.0)
    clock = iter([0.0, 5.0, 5.0, 5.0])  # the first look is in time, the next one past it
    monkeypatch.setattr(early_mod, "CHECK", 1)
    monkeypatch.setattr(early_mod, "time", type("Clock", (), {"monotonic": staticmethod(lambda: next(clock))}))
    seen = []
    handed = early.replay(sched, lambda n, m, t: seen.append(("started", m.step)),
                          lambda n, m, t: seen.append(("exited", m.step)), lambda: None, until=1.0)
    assert handed and early.cut and seen == [("started", "s2")]
    assert [(type(m).__name__, m.step) for _, m, _ in early.held] == [
        ("Exited", "s2"), ("Started", "s3"), ("Exited", "s3")]
    assert early.steps == {"s2": 1, "s3": 2}
    # The next turn hands the rest, in order.
    handed, rest = replayed(early, sched)
    assert handed and [(k, s) for k, s, _, _ in rest] == [("exited", "s2"), ("started", "s3"), ("exited", "s3")]
    assert not early and not early.cut


def test_reports_handed_over_many_cut_turns_come_out_in_order_with_the_queued_ones_kept_ahead(monkeypatch):
    import fleet.control.early as early_mod
    sched = Scheduler(window=None)
    for i in range(40):
        sched.handle(NodeJoined(node(f"n{i}", 1)), 0.0)
    sched.handle(submission(suite(*[{"id": f"s{i}"} for i in range(80)]).steps), 0.0)
    early = Early()
    for i in range(40, 80):  # s40..s79 queued, each behind s(i - 40) on n(i - 40)
        assert early.hold(sched, f"n{i - 40}", started(f"s{i}"), float(i))
        assert early.hold(sched, f"n{i - 40}", exited(f"s{i}"), i + 0.5)
    sched.handle(StepExited("s0", 1, S.SUCCEEDED), 1.0)  # s40 runs; the rest stay queued
    sched.handle(StepExited("s2", 1, S.SUCCEEDED), 1.0)  # s42 too
    monkeypatch.setattr(early_mod, "CHECK", 1)
    looks = []  # a turn's first look at the clock is in time, the next past it: one report a turn
    monkeypatch.setattr(early_mod, "time", type("Clock", (), {"monotonic": staticmethod(lambda: looks.pop())}))
    seen = []

    def turn():
        looks[:] = [5.0, 0.0]
        return early.replay(sched, lambda n, m, t: seen.append(("started", m.step)),
                            lambda n, m, t: seen.append(("exited", m.step)), lambda: None, until=1.0)
    turns = 0
    while turn():
        turns += 1
    assert turns == 4 and seen == [("started", "s40"), ("exited", "s40"), ("started", "s42"), ("exited", "s42")]
    assert [m.step for _, m, _ in early.held][:4] == ["s41", "s41", "s43", "s43"]  # still in the order they came
    assert len(early.held) == 76 and early.steps == {f"s{i}": 2 for i in range(40, 80) if i not in (40, 42)}
    for i in range(1, 40):
        if i != 2:
            sched.handle(StepExited(f"s{i}", 1, S.SUCCEEDED), 2.0)
    while turn():
        pass
    assert seen[4:] == [(k, f"s{i}") for i in range(40, 80) if i not in (40, 42) for k in ("started", "exited")]
    assert not early and early.steps == {}


def test_a_replay_looks_at_no_report_until_the_scheduler_has_applied_another_event():
    sched, early = windowed(), Early()

    class Counting:  # the real scheduler, its lookups counted
        looked = 0
        handled = property(lambda self: sched.handled)

        def state_of(self, step):
            Counting.looked += 1
            return sched.state_of(step)
    for step in ("s2", "s3"):
        assert early.hold(sched, "n1" if step == "s2" else "n2", started(step), 1.0)
    counting = Counting()
    assert not early.replay(counting, None, None, None) and Counting.looked == 2  # both still queued
    for _ in range(3):  # nothing applied since: not one look
        assert not early.replay(counting, None, None, None)
    assert Counting.looked == 2
    sched.handle(StepExited("s0", 1, S.SUCCEEDED), 1.1)  # s2 runs now
    seen = []
    assert early.replay(counting, lambda n, m, t: seen.append(m.step), None, None) and seen == ["s2"]
    assert [m.step for _, m, _ in early.held] == ["s3"]
