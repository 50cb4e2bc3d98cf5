"""A node's window (fleet.core.window), through the real Scheduler handlers: steps
handed to a node ahead of time, behind a running step whose resources they take."""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.scheduler import (Blocked, Cancel, Elsewhere, Finished, Kill, NodeJoined, NodeLost, Scheduler, Start,
                                  StepExited, Wait, submission)
from fleet.core.window import Begin, Queue, Unqueued, Withdraw

from coretools import node, slot, suite  # noqa: E402


def windowed(nodes, *tables, window=None):
    sched = Scheduler(window=window)
    for n in nodes:
        sched.handle(NodeJoined(n), 0.0)
    return sched, sched.handle(submission(suite(*tables).steps), 0.0)


def of(kind, decisions):
    return [d for d in decisions if isinstance(d, kind)]


def steps(n, **kw):
    return [dict(id=f"s{i}", **kw) for i in range(n)]


def test_steps_that_do_not_fit_are_queued_behind_running_steps_of_their_demand_one_each():
    sched, out = windowed([node("n1", 2)], *steps(6), window=None)
    assert [d.step for d in of(Start, out)] == ["s0", "s1"]
    assert of(Queue, out) == [Queue("s2", 1, (slot("n1", [0]),), "s0"), Queue("s3", 1, (slot("n1", [1]),), "s1")]
    assert sched.state("s2") == S.QUEUED and sched.state("s4") == S.READY
    assert sched.counts() == {S.RUNNING: 2, S.QUEUED: 2, S.READY: 2}
    # What an early report is checked against: a queued step's attempt and placement, none for others.
    assert sched.queued("s2") == (1, (slot("n1", [0]),)) and sched.queued("s0") is None
    assert sched.queued("s4") is None and sched.queued("nosuch") is None


def test_a_queued_step_runs_on_its_predecessors_cores_the_moment_that_one_ends():
    sched, _ = windowed([node("n1", 2)], *steps(6), window=None)
    out = sched.handle(StepExited("s0", 1, S.SUCCEEDED), 1.0)
    assert of(Begin, out) == [Begin("s2", 1, (slot("n1", [0]),), "s0")]
    assert of(Start, out) == []  # the freed core went to the queued step, not the pool
    assert sched.state("s2") == S.RUNNING and sched.view("s2").started_at == 1.0
    # ... and the next ready step is queued behind it at once.
    assert of(Queue, out) == [Queue("s4", 1, (slot("n1", [0]),), "s2")]
    assert sched.pool.free_cores == 0


def test_a_node_takes_at_most_its_window_of_queued_steps():
    sched, out = windowed([node("n1", 4)], *steps(10), window=1)
    assert len(of(Start, out)) == 4 and [d.step for d in of(Queue, out)] == ["s4"]
    out = sched.handle(StepExited("s1", 1, S.SUCCEEDED), 1.0)
    # s1 had nothing behind it: its core is free, and the pass starts s5 there.
    assert [d.step for d in of(Start, out)] == ["s5"] and of(Queue, out) == []
    out = sched.handle(StepExited("s0", 1, S.SUCCEEDED), 2.0)
    assert [d.step for d in of(Begin, out)] == ["s4"]
    assert [d.step for d in of(Queue, out)] == ["s6"]  # the window has room again


def test_a_window_of_zero_queues_nothing():
    sched, out = windowed([node("n1", 1)], *steps(3), window=0)
    assert of(Queue, out) == [] and sched.state("s1") == S.READY


def test_steps_of_another_demand_steps_that_run_alone_and_spanning_steps_are_not_queued():
    sched, out = windowed([node("n1", 2)], {"id": "a"}, {"id": "a2"}, {"id": "big", "cores": 2},
                          {"id": "alone", "concurrent": False}, window=None)
    assert [d.step for d in of(Start, out)] == ["a", "a2"]
    assert of(Queue, out) == []


def test_node_loss_returns_its_queued_steps_to_the_ready_set_as_their_next_attempt_counted_against_no_retry():
    sched, out = windowed([node("n1", 1), node("n2", 1)], *steps(4, retries=0), window=None)
    assert {d.step: d.placement[0].node for d in of(Queue, out)} == {"s2": "n1", "s3": "n2"}
    out = sched.handle(NodeLost("n1"), 1.0)
    # n1 may have started s2 (s0 ended there) before it was lost: attempt 1 is spent (fleet.core.unsure).
    assert Unqueued("s2", 1, "n1 was lost before its start was heard (node lost); it may have started there: it runs again as attempt 2", True) in out
    assert of(Finished, out) == [Finished("s0", 1, S.LOST, "node lost")]
    assert of(Begin, out) == []
    assert sched.state("s2") == S.READY and sched.view("s2").attempt == 2
    # With no retries left it would have been lost too, had it counted as a retry.
    out = sched.handle(StepExited("s1", 1, S.SUCCEEDED), 2.0)
    assert of(Begin, out) == [Begin("s3", 1, (slot("n2", [0]),), "s1")]
    assert of(Queue, out) == [Queue("s2", 2, (slot("n2", [0]),), "s3")]
    out = sched.handle(StepExited("s3", 1, S.SUCCEEDED), 3.0)
    out += sched.handle(StepExited("s2", 2, S.SUCCEEDED), 4.0)
    assert sched.finished() and sched.counts() == {S.SUCCEEDED: 3, S.LOST: 1}


def test_cancelling_a_queued_step_asks_its_node_to_drop_it_and_the_nodes_report_ends_it():
    sched, _ = windowed([node("n1", 1)], {"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["b"]}, window=None)
    assert sched.state("b") == S.QUEUED
    out = sched.handle(Cancel(("b",), "cancelled (fleet cancel)"), 1.0)
    assert out == [Kill("b", 1, "cancelled (fleet cancel)")]
    assert sched.state("b") == S.QUEUED  # until its node says
    out = sched.handle(StepExited("b", 1, S.CANCELLED, "cancelled before it started"), 2.0)
    assert of(Finished, out) == [Finished("b", 1, S.CANCELLED, "cancelled before it started", ran=False)]
    assert of(Blocked, out) == [Blocked("c", "b")]
    out = sched.handle(StepExited("a", 1, S.SUCCEEDED), 3.0)
    assert of(Begin, out) == [] and sched.pool.free_cores == 1 and sched.finished()


def test_a_cancel_drops_the_queued_steps_before_it_stops_the_running_ones_they_wait_for():
    # A node told to stop s0 first would start s2 the moment s0 ends on its SIGTERM
    # (tests/control/test_cancel_queued.py shows it with real processes).
    sched, _ = windowed([node("n1", 2)], *steps(6), window=None)
    assert sched.state("s2") == S.QUEUED and sched.state("s3") == S.QUEUED
    for named in (("s0", "s1", "s2", "s3", "s4", "s5"), ("s5", "s4", "s1", "s0", "s3", "s2")):
        sched, _ = windowed([node("n1", 2)], *steps(6), window=None)
        out = sched.handle(Cancel(named, "cancelled (fleet cancel)"), 1.0)
        kills = [d.step for d in of(Kill, out)]
        assert sorted(kills[:2]) == ["s2", "s3"] and sorted(kills[2:]) == ["s0", "s1"], kills
        assert [d.step for d in of(Finished, out)] == [s for s in named if s in ("s4", "s5")]


def test_a_queued_step_cancelled_after_its_node_started_it_ends_cancelled_by_its_own_exit():
    sched, _ = windowed([node("n1", 1)], {"id": "a"}, {"id": "b"}, window=None)
    sched.handle(Cancel(("b",)), 1.0)
    out = sched.handle(StepExited("a", 1, S.SUCCEEDED), 2.0)  # the node had started b already
    assert [d.step for d in of(Begin, out)] == ["b"]
    out = sched.handle(StepExited("b", 1, S.TERMINATED), 3.0)
    assert of(Finished, out) == [Finished("b", 1, S.CANCELLED, "")]


def test_node_loss_ends_a_queued_step_cancelled_meanwhile_as_cancelled():
    sched, _ = windowed([node("n1", 1), node("n2", 1)], *steps(3), window=None)
    sched.handle(Cancel(("s2",)), 1.0)
    out = sched.handle(NodeLost("n1"), 2.0)
    assert Finished("s2", 1, S.CANCELLED, "cancelled", ran=False) in out
    assert sched.state("s2") == S.CANCELLED


def test_a_queued_step_starts_when_its_predecessor_is_claimed_elsewhere_and_goes_elsewhere_itself_if_claimed():
    sched, _ = windowed([node("n1", 1)], *steps(3), window=None)
    out = sched.handle(Elsewhere("s0", 1, "claimed by fleet X"), 1.0)
    assert [d.step for d in of(Begin, out)] == ["s1"] and [d.step for d in of(Queue, out)] == ["s2"]
    out = sched.handle(Elsewhere("s2", 1, "claimed by fleet X"), 2.0)
    assert sched.state("s2") == S.ELSEWHERE and [d.step for d in of(Wait, out)] == ["s2"]
    assert sched.window.queued() == 0


def test_a_step_begun_behind_a_refused_predecessor_and_refused_itself_ends_elsewhere_owing_no_exit():
    """The shell claims each decision before the core hears more: when both a started step
    and the step queued behind it are refused, the core learns it in that order. The first
    refusal promotes the queued step (the node starts at once a launch whose predecessor
    never came); the second takes it back with nothing said of an end (no Finished: no
    `exit` is owed), and the shell writes no `start` for that Begin (fleet.control.launching
    .recorded). Its cores go on to what is queued behind it, or back to the pool."""
    sched, _ = windowed([node("n1", 1)], *steps(3), window=None)
    out = sched.handle(Elsewhere("s0", 1, "claimed by fleet X"), 1.0)
    assert of(Begin, out) == [Begin("s1", 1, (slot("n1", [0]),), "s0")]
    assert of(Queue, out) == [Queue("s2", 1, (slot("n1", [0]),), "s1")]
    out = sched.handle(Elsewhere("s1", 1, "claimed by fleet X"), 2.0)
    assert sched.state("s1") == S.ELSEWHERE and of(Finished, out) == []
    assert of(Begin, out) == [Begin("s2", 1, (slot("n1", [0]),), "s1")] and sched.pool.free_cores == 0
    out = sched.handle(Elsewhere("s2", 1, "claimed by fleet X"), 3.0)
    assert of(Finished, out) == [] and of(Begin, out) == [] and of(Start, out) == []
    assert sched.counts() == {S.ELSEWHERE: 3} and sched.window.queued() == 0 and sched.pool.free_cores == 1


def test_a_failed_predecessor_is_retried_behind_the_step_queued_after_it():
    sched, _ = windowed([node("n1", 1)], {"id": "a", "retries": 1}, {"id": "b"}, window=None)
    out = sched.handle(StepExited("a", 1, S.FAILED, "exit status 1"), 1.0)
    assert [d.step for d in of(Begin, out)] == ["b"]
    assert of(Queue, out) == [Queue("a", 2, (slot("n1", [0]),), "b")]


def test_the_same_events_give_the_same_decisions_with_a_window():
    def run():
        sched, out = windowed([node("n1", 2), node("n2", 3)], *steps(40), window=None)
        log, t = list(out), 0.0
        while not sched.finished():
            t += 1
            sid = sched.running(1)[0].id
            log += sched.handle(StepExited(sid, 1, S.SUCCEEDED), t)
        return log
    first = run()
    assert first == run()
    assert len(of(Begin, first)) == 35 and len(of(Start, first)) == 5


def test_a_queued_step_whose_launch_cannot_be_made_fails_and_is_not_queued_again():
    sched, _ = windowed([node("n1", 1)], {"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["b"]}, window=None)
    out = sched.handle(StepExited("b", 1, S.FAILED, "cannot launch the MPI step: x"), 1.0)
    assert of(Finished, out) == [Finished("b", 1, S.FAILED, "cannot launch the MPI step: x")]
    assert of(Blocked, out) == [Blocked("c", "b")] and of(Queue, out) == []


def test_a_wider_step_of_higher_priority_starts_as_without_a_window_its_node_s_queued_steps_taken_back():
    # One node of two cores; narrow steps of 3 s, and a 2-core step of priority 1 that
    # waits for `first` alone. Without a window: first and s0 at 0, wide at 3 (its
    # reservation keeps first's core from the narrow ones when first ends at 2).
    def run(window):
        sched, out = windowed([node("n1", 2)], {"id": "first", "priority": 1, "estimate": 2},
                              *steps(8, estimate=3), {"id": "wide", "cores": 2, "priority": 1, "estimate": 5,
                                                      "deps": ["first"]}, window=window)
        assert [d.step for d in of(Start, out)] == ["first", "s0"]
        assert [d.step for d in of(Queue, out)] == (["s1"] if window is None else [])  # not behind first
        log = []
        for t, sid in ((2.0, "first"), (3.0, "s0")):
            out = sched.handle(StepExited(sid, 1, S.SUCCEEDED), t)
            log += out
            for d in of(Withdraw, out):  # (its node drops it: it had not begun)
                log += sched.handle(StepExited(d.step, d.attempt, S.CANCELLED, "withdrawn before it started"), t)
        return sched, log
    sched, log = run(None)
    assert [d.step for d in of(Withdraw, log)] == ["s1"]  # at 2: on the node wide's reservation takes
    assert [(d.step, d.placement[0].cores) for d in of(Start, log)] == [("wide", (0, 1))]
    assert not of(Begin, log) and sched.state("s1") == S.READY
    _, log0 = run(0)
    assert of(Start, log0) == of(Start, log)


def test_without_a_reservation_the_window_keeps_queueing_behind_every_running_step():
    sched, _ = windowed([node("n1", 2)], *steps(8, estimate=3), window=None)
    out = sched.handle(StepExited("s0", 1, S.SUCCEEDED), 3.0)
    assert [d.step for d in of(Begin, out)] == ["s2"] and [d.step for d in of(Queue, out)] == ["s4"]


def test_once_every_step_has_ended_the_window_keeps_nothing_of_them():
    # 3 nodes of 4 cores, 400 steps of two demands, some failing and retried, one node lost
    # on the way: every table of the window is empty at the end (nothing is kept per step).
    sched, out = windowed([node("n1", 4), node("n2", 4), node("n3", 4)],
                          *steps(300, estimate=2, retries=1), *[dict(id=f"w{i}", cores=2, retries=1) for i in range(100)],
                          window=None)
    running, now, lost, seen = [], 0.0, False, []
    while not sched.finished():
        seen += [type(d).__name__ for d in out]
        running += [(d.step, d.attempt) for d in out if isinstance(d, (Start, Begin))]
        now += 1.0
        if not lost and now == 20.0:
            out, lost = sched.handle(NodeLost("n2", "gone"), now), True
            running = [(s, a) for s, a in running if sched.state(s) == S.RUNNING]
            continue
        assert running, "nothing runs and the suite is not finished"
        step, attempt = running.pop(0)
        outcome = S.FAILED if step.endswith("7") and attempt == 1 else S.SUCCEEDED
        out = sched.handle(StepExited(step, attempt, outcome), now)
    w = sched.window
    assert lost and sched.counts() == {S.SUCCEEDED: 400}
    assert seen.count("Begin") > 100 and seen.count("Unqueued") > 0 and seen.count("Retry") > 0, set(seen)
    assert not (w.next or w.behind or w.count or w.taking or w.ends or w.held or w.chained or w.shelved
                or w.blocker or w.parked or w.began)


def test_a_fill_queues_at_most_a_passes_bound_and_the_next_passes_queue_the_rest_in_the_same_order():
    from fleet.core.decisions import Exits, GoOn

    def run(bound):
        sched = Scheduler(window=None)
        sched.pass_starts = bound
        sched.handle(NodeJoined(node("n1", 8)), 0.0)
        outs = [sched.handle(submission(suite(*steps(30)).steps), 0.0)]
        while any(isinstance(d, GoOn) for d in outs[-1]):
            outs.append(sched.handle(Exits(()), 0.0))
        return outs

    bounded, whole = run(3), run(1000)
    assert len(whole) == 1 and len(of(Queue, whole[0])) == 8
    assert all(len(of(Queue, out)) <= 3 and len(of(Start, out)) <= 3 for out in bounded) and len(bounded) > 3
    # The same starts and the same queues, in the same order: only the turns they take differ.
    flat = [d for out in bounded for d in out if isinstance(d, (Start, Queue))]
    assert flat == [d for d in whole[0] if isinstance(d, (Start, Queue))]


def test_a_queued_step_its_node_drops_at_a_drain_is_ready_again_not_cancelled_and_uses_no_attempt():
    from fleet.core.deadline import DrainNow
    sched, _ = windowed([node("n1", 1)], {"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["b"]}, window=None)
    assert sched.state("b") == S.QUEUED
    out = sched.handle(DrainNow("the run directory is full", stop_running=False), 1.0)
    assert out == [Kill("b", 1, "drained: the run directory is full")]  # its node drops it; a lets run
    out = sched.handle(StepExited("b", 1, S.CANCELLED, "cancelled before it started"), 2.0)
    assert of(Unqueued, out) == [Unqueued("b", 1, "drained: the run directory is full")]
    assert not of(Finished, out) and not of(Blocked, out)
    assert sched.state("b") == S.READY and sched.state("c") == S.WAITING
    out = sched.handle(StepExited("a", 1, S.SUCCEEDED), 3.0)
    assert not of(Begin, out) and not of(Start, out) and sched.pool.free_cores == 1 and not sched.finished()


def test_a_queued_step_whose_node_is_lost_during_a_drain_is_not_started_not_cancelled_and_its_runner_interrupted():
    # The job ended under the fleet (fleet.control.jobend): the drain asked the node to drop
    # the queued step, and the node went before it answered.
    from fleet.core.deadline import DrainNow
    sched, _ = windowed([node("n1", 1)], {"id": "a"}, {"id": "b"}, window=None)
    assert sched.state("b") == S.QUEUED
    sched.handle(DrainNow("the batch job is ending"), 1.0)
    out = sched.handle(NodeLost("n1", "could not reach the agent on n1"), 2.0)
    assert not of(Finished, out) and not of(Begin, out), out
    assert sched.state("b") == S.READY and sched.state("a") == S.INTERRUPTED


class _Counted(dict):
    """A dict that counts the walks over all its values."""
    walks = 0

    def values(self):
        _Counted.walks += 1
        return super().values()


def test_losing_a_node_looks_only_at_the_steps_queued_there_not_at_every_queued_step():
    # A job's end loses every node at once: a walk over every queued step per lost node is
    # nodes x queued (10,000 x 640,000 at a full allocation).
    sched, _ = windowed([node(f"n{i}", 2) for i in range(50)], *steps(400), window=None)
    assert sched.counts()[S.QUEUED] == 100
    sched.window.next = _Counted(sched.window.next)
    for i in range(50):
        sched.handle(NodeLost(f"n{i}", "the agent stopped on its own"), 1.0 + i)
    assert _Counted.walks == 0
    assert sched.counts().get(S.QUEUED, 0) == 0 and sched.counts()[S.LOST] == 100


# A node reaps a step and, in the same write, says it dropped the step queued behind it
# (cancelled, drained, taken back): the coordinator hands the scheduler both in one batch
# (fleet.control.turns), the exit first, which promotes the queued step "lest its node
# started it". The drop then says it did not: it never ran, and nothing says it began.

def same_batch(sched, pred_outcome, now=10.0):
    from fleet.core.scheduler import Exits
    return sched.handle(Exits((StepExited("a", 1, pred_outcome),
                               StepExited("b", 1, S.CANCELLED, "cancelled before it started"))), now)


def test_a_queued_step_cancelled_and_dropped_as_its_predecessor_ends_never_began_and_its_cores_are_free():
    sched, out = windowed([node("n1", 1)], {"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["b"]}, {"id": "d"})
    assert of(Queue, out) == [Queue("b", 1, (slot("n1", [0]),), "a")]
    assert of(Kill, sched.handle(Cancel(("b",)), 5.0)) == [Kill("b", 1, "cancelled")]
    out = same_batch(sched, S.SUCCEEDED)
    assert not of(Begin, out)
    assert of(Finished, out) == [Finished("a", 1, S.SUCCEEDED, ""),
                                 Finished("b", 1, S.CANCELLED, "cancelled before it started", ran=False)]
    assert of(Blocked, out) == [Blocked("c", "b")] and sched.state("b") == S.CANCELLED
    assert of(Start, out) == [Start("d", 1, (slot("n1", [0]),))]  # a's core, free again


def test_a_queued_step_the_drain_dropped_as_its_predecessor_ended_is_ready_again_not_begun():
    from fleet.core.deadline import DrainNow
    sched, _ = windowed([node("n1", 1)], {"id": "a"}, {"id": "b"})
    assert sorted(d.step for d in of(Kill, sched.handle(DrainNow("the batch job is ending"), 5.0))) == ["a", "b"]
    out = same_batch(sched, S.INTERRUPTED)
    assert not of(Begin, out) and not of(Finished, out)
    assert of(Unqueued, out) == [Unqueued("b", 1, "drained: the batch job is ending")]
    assert sched.state("a") == S.INTERRUPTED and sched.state("b") == S.READY and sched.running_count() == 0


def test_a_queued_step_taken_back_and_dropped_as_its_predecessor_ends_is_ready_again_with_no_attempt_used():
    from fleet.core.window import Withdraw
    sched, out = windowed([node("n1", 1), node("n2", 1)], {"id": "a"}, {"id": "m"}, {"id": "b"})
    assert of(Queue, out) == [Queue("b", 1, (slot("n1", [0]),), "a")]
    (w,) = of(Withdraw, sched.handle(StepExited("m", 1, S.SUCCEEDED), 1.0))  # n2's core is free first
    out = same_batch(sched, S.SUCCEEDED, 2.0)
    assert not of(Begin, out) and not of(Finished, [d for d in out if d.step == "b"])
    assert of(Unqueued, out) == [Unqueued("b", 1, w.reason)]
    assert [(d.step, d.attempt) for d in of(Start, out)] == [("b", 1)]


def test_a_drain_tells_a_node_to_drop_its_queued_steps_before_it_stops_the_steps_they_wait_for():
    # Else the node, hearing "stop a" first (in an earlier message, when a drain's kills go
    # out in parts), may reap a and start b before it hears to drop b (seen on the real Slurm).
    from fleet.core.deadline import DrainNow
    sched, _ = windowed([node("n1", 2)], *steps(4), window=None)
    assert [sched.state(s) for s in ("s0", "s1", "s2", "s3")] == [S.RUNNING, S.RUNNING, S.QUEUED, S.QUEUED]
    out = sched.handle(DrainNow("the drain point"), 1.0)
    assert [d.step for d in of(Kill, out)] == ["s2", "s3", "s0", "s1"], out
