"""The allocation's end in the pure core: steps that would not end before the drain
point are not started (a DEADLINE wait, once), the drain stops the running ones and
starts nothing more, their exits are interrupted (no attempt, nothing blocked), and
`fleet simulate` models the same with the same core."""

from __future__ import annotations

import json

from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.deadline import AllocationEnds, DrainNow
from fleet.core.durations import expected_s, recorded
from fleet.core.graph import build_graph
from fleet.core.scheduler import (Blocked, Finished, Kill, NodeJoined, NodeLost, Retry, Scheduler, Start, StepExited,
                                  Unrunnable, Wait)
from fleet.core.scheduler import submission
from fleet.core.simulate import pretend_nodes, simulate

from coretools import node, suite


def ended_scheduler(end: float, drain_at: float, *tables, cores: int = 4, durations=None):
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", cores)), 0.0)
    sched.handle(AllocationEnds(end, drain_at), 0.0)
    sub = submission(suite(*tables).steps)
    if durations:
        from dataclasses import replace
        sub = replace(sub, durations=durations)
    return sched, sched.handle(sub, 0.0)


def test_a_step_whose_estimate_does_not_fit_before_the_drain_point_waits_for_the_deadline_and_the_rest_start():
    sched, out = ended_scheduler(100.0, 60.0, {"id": "long", "estimate": 90}, {"id": "short", "estimate": 10},
                                 {"id": "unknown"})
    assert sorted(d.step for d in out if isinstance(d, Start)) == ["short", "unknown"]
    (w,) = [d for d in out if isinstance(d, Wait)]
    assert w.step == "long" and w.why.cause == W.DEADLINE
    assert w.reason == "expected to take 90 s (estimate), 60 s left before the drain point"
    # Time left only shrinks: it is never tried (nor said) again.
    out = sched.handle(StepExited("short", 1, S.SUCCEEDED), 10.0)
    assert not [d for d in out if isinstance(d, (Start, Wait)) and d.step == "long"]
    assert sched.state("long") == S.READY


def test_a_deadline_wait_shows_enough_digits_that_the_time_left_reads_shorter_than_the_step():
    sched, out = ended_scheduler(100.0, 2.6, {"id": "long", "estimate": 3})
    (w,) = [d for d in out if isinstance(d, Wait)]
    assert w.reason == "expected to take 3.0 s (estimate), 2.6 s left before the drain point"
    sched, out = ended_scheduler(100.0, 2.9996, {"id": "long", "estimate": 3})
    assert [d for d in out if isinstance(d, Wait)][0].reason == (
        "expected to take 3.0000 s (estimate), 2.9996 s left before the drain point")


def test_a_recorded_duration_from_an_earlier_run_counts_when_the_step_has_no_estimate():
    sched, out = ended_scheduler(100.0, 60.0, {"id": "a"}, {"id": "b"}, durations={"a": 500.0, "b": 5.0})
    assert [d.step for d in out if isinstance(d, Start)] == ["b"]
    assert "(earlier run)" in [d for d in out if isinstance(d, Wait)][0].reason


def test_the_drain_kills_every_running_step_starts_nothing_more_and_their_exits_are_interrupted_not_attempts():
    sched, out = ended_scheduler(100.0, 60.0, {"id": "a", "retries": 3}, {"id": "b"}, {"id": "c", "cores": 4},
                                 {"id": "d", "deps": ["a"]})
    assert sorted(d.step for d in out if isinstance(d, Start)) == ["a", "b"]
    out = sched.handle(DrainNow("the drain point"), 60.0)
    assert sorted((d.step, d.attempt) for d in out if isinstance(d, Kill)) == [("a", 1), ("b", 1)]
    assert not [d for d in out if isinstance(d, Start)]
    out = sched.handle(StepExited("a", 1, S.INTERRUPTED), 61.0) + sched.handle(StepExited("b", 1, S.TERMINATED), 61.0)
    # No retry, nothing blocked, nothing finished: the next run runs them all.
    assert not [d for d in out if isinstance(d, (Retry, Blocked, Finished, Start))]
    assert sched.state("a") == sched.state("b") == S.INTERRUPTED
    assert sched.state("c") == S.READY and sched.state("d") == S.WAITING
    assert sched.running_count() == 0 and not sched.finished()
    assert sched.handle(DrainNow("again"), 62.0) == []


def test_losing_every_node_while_drained_makes_nothing_unrunnable_and_its_running_steps_are_interrupted():
    # The job ending under the fleet (fleet.control.jobend): its agents go, one by one.
    sched, out = ended_scheduler(100.0, 60.0, {"id": "a", "retries": 3}, {"id": "b", "cores": 4},
                                 {"id": "c", "deps": ["b"]})
    assert [d.step for d in out if isinstance(d, Start)] == ["a"]
    sched.handle(DrainNow("the batch job is ending"), 10.0)
    out = sched.handle(NodeLost("n1", "the agent stopped on its own"), 10.5)
    assert not [d for d in out if isinstance(d, (Unrunnable, Blocked, Retry, Finished, Start))], out
    assert sched.state("a") == S.INTERRUPTED and sched.state("b") == S.READY and sched.state("c") == S.WAITING


def test_a_step_that_succeeds_at_the_drain_point_still_succeeds():
    sched, _ = ended_scheduler(100.0, 60.0, {"id": "a"})
    sched.handle(DrainNow(), 60.0)
    out = sched.handle(StepExited("a", 1, S.SUCCEEDED), 60.1)
    assert [d.outcome for d in out if isinstance(d, Finished)] == [S.SUCCEEDED]


def test_past_the_drain_point_nothing_starts_even_with_no_estimate():
    sched, out = ended_scheduler(100.0, 0.0, {"id": "a"})
    assert not [d for d in out if isinstance(d, Start)]
    assert [d.why.cause for d in out if isinstance(d, Wait)] == [W.DEADLINE]


def test_expected_duration_is_the_estimate_else_the_recorded_work_seconds():
    (a, b) = suite({"id": "a", "estimate": 3}, {"id": "b"}).steps
    assert expected_s(a, {"a": 100.0}) == 3.0 and expected_s(b, {"b": 7.5}) == 7.5 and expected_s(b) is None
    assert recorded({"a": {"work_s": 4}, "b": None, "c": {"work_s": "x"}, "d": {"work_s": 2}}, {"d"}) == {"a": 4.0}


def test_simulate_models_the_end_of_the_allocation_with_the_same_core():
    s = suite({"id": "quick", "estimate": 5}, {"id": "long", "estimate": 500}, {"id": "first", "estimate": 30},
              {"id": "second", "estimate": 30, "deps": ["first"]}, {"id": "near", "estimate": 39.5},
              {"id": "unknown", "deps": ["near"]})
    r = simulate(s.steps, build_graph(s.steps)[0], pretend_nodes(1, 4, 4 * 2**30), end_s=60.0, drain_before_s=20.0)
    # "unknown" has no estimate (simulate gives it 1 s) and starts at 39.5: the drain stops it.
    assert r.drain_s == 40.0 and r.interrupted == {"unknown": 40.0}
    assert sorted(r.not_started) == ["long", "second"] and r.steps["quick"].end_s == 5.0
    assert r.to_json()["interrupted"] == {"unknown": 40.0}
    plain = simulate(s.steps, build_graph(s.steps)[0], pretend_nodes(1, 4, 4 * 2**30))
    assert plain.interrupted == {} and "end_s" not in plain.to_json() and len(plain.steps) == 6


def test_fleet_simulate_with_a_walltime_says_what_was_interrupted_and_not_started(tmp_path):
    from click.testing import CliRunner
    from fleet.cli import main
    p = tmp_path / "s.toml"
    p.write_text('[suite]\nname = "w"\n[[steps]]\nid = "a"\ncommand = "x"\nestimate = 30\n'
                 '[[steps]]\nid = "b"\ncommand = "x"\nestimate = 30\ndeps = ["a"]\n')
    r = CliRunner().invoke(main, ["simulate", str(p), "--nodes", "1", "--cores-per-node", "2",
                                  "--walltime", "1m", "--drain-before", "20s"])
    assert r.exit_code == 0, r.output
    assert "end                 60.0 s (drain point 40.0 s)" in r.output
    assert "not started            1 step(s)" in r.output, r.output
    j = CliRunner().invoke(main, ["simulate", str(p), "--nodes", "1", "--cores-per-node", "2", "--walltime", "1m",
                                  "--drain-before", "20s", "--json"])
    assert json.loads(j.output)["not_started"] == ["b"]


def test_a_drain_that_lets_running_steps_run_kills_nothing_starts_nothing_and_their_failures_are_no_attempts():
    # What a full run directory brings (fleet.control.drain): DrainNow(stop_running=False).
    sched, out = ended_scheduler(1e9, 1e9 - 60, {"id": "a", "retries": 3}, {"id": "b"}, {"id": "c", "cores": 4},
                                 {"id": "d", "deps": ["a"]})
    assert sorted(d.step for d in out if isinstance(d, Start)) == ["a", "b"]
    out = sched.handle(DrainNow("the run directory is full", stop_running=False), 5.0)
    assert not [d for d in out if isinstance(d, (Kill, Start))]
    assert sched.state("a") == sched.state("b") == S.RUNNING
    out = sched.handle(StepExited("b", 1, S.SUCCEEDED), 6.0)  # a running step still succeeds, and frees its cores
    assert [d.outcome for d in out if isinstance(d, Finished)] == [S.SUCCEEDED]
    assert not [d for d in out if isinstance(d, Start)]
    out = sched.handle(StepExited("a", 1, S.FAILED), 7.0)  # its failure uses no attempt: the next run runs it
    assert not [d for d in out if isinstance(d, (Retry, Blocked, Finished, Start))]
    assert sched.state("a") == S.INTERRUPTED and sched.state("c") == S.READY and sched.state("d") == S.WAITING
    assert sched.running_count() == 0 and not sched.finished()


def test_the_drain_point_after_a_drain_that_let_steps_run_stops_them():
    sched, _ = ended_scheduler(1e9, 1e9 - 60, {"id": "a"}, {"id": "b"})
    assert sched.handle(DrainNow("full", stop_running=False), 5.0) == []
    assert sched.handle(DrainNow("full again", stop_running=False), 6.0) == []
    out = sched.handle(DrainNow("the drain point"), 7.0)
    assert sorted((d.step, d.reason) for d in out if isinstance(d, Kill)) == [
        ("a", "drained: the drain point"), ("b", "drained: the drain point")]
    assert sched.handle(DrainNow("again"), 8.0) == []


def test_a_held_step_is_counted_and_listed_once_however_often_the_pass_and_the_window_ask():
    sched = Scheduler(window=None)
    sched.handle(NodeJoined(node("n1", 1)), 0.0)
    sched.handle(AllocationEnds(100.0, 60.0), 0.0)
    sched.handle(submission(suite({"id": "a", "estimate": 5}, {"id": "b", "estimate": 5},
                                  {"id": "long", "estimate": 90}).steps), 0.0)
    for t, step in ((5.0, "a"), (10.0, "b")):  # each exit brings a pass and the window's look again
        sched.handle(StepExited(step, 1, S.SUCCEEDED), t)
    assert sched.deadline.held == 1
    assert [s for s, _ in sched.deadline.held_first] == ["long"]


def test_held_only_says_when_nothing_left_can_start_before_the_drain_point():
    sched, out = ended_scheduler(100.0, 60.0, {"id": "quick", "estimate": 10}, {"id": "long", "estimate": 90},
                                 {"id": "after", "deps": ["long"]}, {"id": "free"}, cores=1)
    assert [d.step for d in out if isinstance(d, Start)] == ["quick"]
    assert not sched.held_only()  # quick runs; free is ready and fits
    out = sched.handle(StepExited("quick", 1, S.SUCCEEDED), 5.0)
    assert [d.step for d in out if isinstance(d, Start)] == ["free"]
    assert not sched.held_only()
    sched.handle(StepExited("free", 1, S.SUCCEEDED), 9.0)
    assert sched.held_only()  # long is held, after waits for it, nothing runs
    sched.handle(submission(suite({"id": "more", "estimate": 1}).steps), 10.0)
    assert not sched.held_only()  # a later submission that fits runs: not held


def test_a_drain_of_many_running_steps_says_its_kills_a_bounded_number_at_a_time_each_once(monkeypatch):
    # At a job's end a big fleet has hundreds of thousands of steps running: the Kills
    # come a chunk an event (then GoOn: the shell's next turn), not all in one.
    from fleet.core import deadline
    from fleet.core.scheduler import Exits, GoOn
    monkeypatch.setattr(deadline, "DRAIN_STOPS", 3)
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 8)), 0.0)
    sched.handle(submission(suite(*[{"id": f"s{i}"} for i in range(10)]).steps), 0.0)
    assert sched.running_count() == 8
    said, rounds = [], []
    out = sched.handle(DrainNow("the batch job is ending"), 5.0)
    while True:
        kills = [d for d in out if isinstance(d, Kill)]
        said += [k.step for k in kills]
        rounds.append(len(kills))
        if not [d for d in out if isinstance(d, GoOn)]:
            break
        if len(rounds) == 1:  # s5 and s6 end between two chunks: no Kill for them
            out = sched.handle(Exits((StepExited("s5", 1, S.TERMINATED), StepExited("s6", 1, S.SUCCEEDED))), 5.1)
        else:
            out = sched.handle(Exits(()), 5.2)
    assert said == ["s0", "s1", "s2", "s3", "s4", "s7"] and rounds[0] == 3
    assert all(r <= 3 for r in rounds) and not [d for d in out if isinstance(d, Start)]
    assert sched.state("s5") == S.INTERRUPTED and sched.state("s6") == S.SUCCEEDED and sched.state("s8") == S.READY


def test_a_timeout_an_out_of_memory_and_a_fleet_cancel_the_drain_finds_keep_their_outcome():
    # Each was being stopped for its own reason (its zygote reports that outcome); the
    # drain's SIGTERM came after. An attempt each (a timeout with retries left: a retry,
    # which the next run makes); what the drain itself stopped is interrupted.
    from fleet.core.scheduler import Cancel
    sched, out = ended_scheduler(100.0, 60.0, {"id": "t", "retries": 1}, {"id": "m"}, {"id": "c"}, {"id": "d"})
    sched.handle(Cancel(("c",)), 10.0)
    sched.handle(DrainNow("the drain point"), 60.0)
    out = sched.handle(StepExited("t", 1, S.TIMED_OUT, "timed out after 4 s"), 61.0)
    assert [type(d) for d in out] == [Finished, Retry] and out[0].outcome == S.TIMED_OUT
    out = sched.handle(StepExited("m", 1, S.OUT_OF_MEMORY), 61.0)
    assert [(type(d), d.outcome) for d in out if isinstance(d, Finished)] == [(Finished, S.OUT_OF_MEMORY)]
    out = sched.handle(StepExited("c", 1, S.CANCELLED), 61.0)
    assert [(type(d), d.outcome) for d in out if isinstance(d, Finished)] == [(Finished, S.CANCELLED)]
    sched.handle(StepExited("d", 1, S.CANCELLED), 61.0)  # the drain's own Kill: interrupted
    assert sched.state("d") == S.INTERRUPTED and sched.state("t") == S.READY
    assert not [d for d in out if isinstance(d, Start)]  # (the retry waits for the next run)


def test_after_a_full_disk_drain_alone_a_timeout_is_interrupted_too():
    sched, _ = ended_scheduler(1e9, 1e9 - 60, {"id": "t", "retries": 1})
    sched.handle(DrainNow("full", stop_running=False), 5.0)
    assert not [d for d in sched.handle(StepExited("t", 1, S.TIMED_OUT), 6.0) if isinstance(d, (Finished, Retry))]
    assert sched.state("t") == S.INTERRUPTED


def test_the_drains_kill_cuts_a_grace_that_would_run_past_the_allocations_end():
    # End at 100, drain point at 60: the last SIGKILL comes 15 s before the end (at most
    # half the 40-s drain margin), so a step stopped at 60 has 25 s.
    from fleet.core.deadline import END_MARGIN_S, end_margin
    from fleet.core.scheduler import Cancel
    sched, _ = ended_scheduler(100.0, 60.0, {"id": "long", "grace": 30}, {"id": "short", "grace": 5},
                               {"id": "cancelled", "grace": 60})
    sched.handle(Cancel(("cancelled",)), 10.0)  # being stopped already: its grace is cut too
    out = sched.handle(DrainNow("the drain point"), 60.0)
    assert sorted((d.step, d.grace) for d in out if isinstance(d, Kill)) == [
        ("cancelled", 25.0), ("long", 25.0), ("short", None)]
    assert end_margin(40.0) == END_MARGIN_S and end_margin(10.0) == 5.0


def test_steps_held_back_by_the_end_are_counted_apart_from_the_ready_ones_as_they_come_and_go():
    from fleet.core.decisions import Cancel
    from fleet.core.deadline import as_counted
    sched, out = ended_scheduler(100.0, 60.0, {"id": "run", "estimate": 50}, {"id": "late/{i}", "array": "1-3",
                                 "estimate": 90}, {"id": "ready", "estimate": 10}, {"id": "after", "deps": ["late/1"]},
                                 cores=1)
    assert [d.step for d in out if isinstance(d, Start)] == ["run"]
    counted = lambda: as_counted(sched.counts(), sched.deadline.drained, sched.deadline.held_now)  # noqa: E731
    # (before, "ready 4": three of them will not start in this allocation)
    assert counted() == {"running": 1, "ready": 1, "held_back": 3, "waiting": 1}
    sched.handle(Cancel(("late/2",)), 1.0)
    assert counted() == {"running": 1, "ready": 1, "held_back": 2, "waiting": 1, "cancelled": 1}
    # A new definition that fits: a new generation of the step, which starts in its turn.
    sched.handle(submission(suite({"id": "late/3", "estimate": 5}).steps), 2.0)
    assert sched.deadline.held_now == 1 and counted()["held_back"] == 1
    sched.handle(StepExited("run", 1, S.SUCCEEDED), 50.0)
    sched.handle(StepExited("ready", 1, S.SUCCEEDED), 52.0)
    sched.handle(StepExited("late/3", 1, S.SUCCEEDED), 55.0)
    assert counted() == {"succeeded": 3, "held_back": 1, "waiting": 1, "cancelled": 1}
    assert sched.held_only()
    sched.handle(DrainNow(), 60.0)  # once drained, the held and the waiting are not_started
    assert counted() == {"succeeded": 3, "not_started": 2, "cancelled": 1}
