"""`fleet status`'s lines on why ready steps wait and on the reservation, from the
coordinator's real status answer (fleet.control.status) of a scheduler brought to that
state through its handlers, laid out by fleet.control.statusview."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from fleet.control import status, statusview
from fleet.core.scheduler import NodeJoined, Scheduler, StepExited, submission

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))
from coretools import node, suite  # noqa: E402


def test_the_reservation_and_the_steps_it_holds_back_are_shown_with_the_expected_start():
    t0 = time.time() - 10  # the status answer's clock is the wall clock: the exit was just now
    sched = Scheduler(reserve_after=0.0)
    sched.handle(NodeJoined(node("n1", 4)), t0)
    sched.handle(submission(suite(*({"id": f"n{i}", "estimate": 10.0 if i < 2 else 600.0} for i in range(4))).steps), t0)
    sched.handle(submission(suite({"id": "wide", "cores": 4, "priority": 1, "estimate": 5},
                                  *({"id": f"late{i}", "estimate": 700} for i in range(3))).steps), t0 + 1)
    sched.handle(StepExited("n0", 1, "succeeded"), t0 + 10)
    st = status.answer(sched, [], up_since=t0, run_dir=Path("/run"), failures=[], dropped={}, submissions=[])
    text = statusview.render(st, now=t0 + 10)
    assert "ready, not started (4), the first of each kind of step:" in text, text
    assert re.search(r"\n  wide +ready (9|10)s  needs 4 cores, 0 free\n", text), text
    assert re.search(r"\n  late0 +ready (9|10)s  held back by a reservation for wide \(needs 1 core\)  \(\+2 more like it\)\n",
                     text), text
    expected = time.strftime("%H:%M:%S", time.localtime(t0 + 600))
    assert f"\nreservation for wide: 1 of 4 cores held, expected to start {expected} (in 9m50s)" in text, text


def test_the_steps_line_counts_every_state_steps_are_in_cancelled_and_timed_out_too():
    # (cancelled, timed_out, stopped were counted in --json and left out of the text)
    t0 = time.time()
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 4)), t0)
    sched.handle(submission(suite(*({"id": f"s{i}"} for i in range(4))).steps), t0)
    sched.handle(StepExited("s0", 1, "succeeded"), t0 + 1)
    sched.handle(StepExited("s1", 1, "timed_out"), t0 + 1)
    sched.handle(StepExited("s2", 1, "cancelled"), t0 + 1)
    st = status.answer(sched, [], up_since=t0, run_dir=Path("/run"), failures=[], dropped={}, submissions=[])
    line = next(x for x in statusview.render(st, now=t0 + 2).splitlines() if x.startswith("steps:"))
    assert line == "steps:  running 1  succeeded 1  timed_out 1  cancelled 1", (line, st["counts"])
    st["counts"]["some_new_state"] = 2  # (a newer coordinator's: shown, not hidden)
    assert statusview.render(st, now=t0 + 2).count("some_new_state 2") == 1


def test_a_suites_progress_shows_100_percent_only_once_every_step_has_finished():
    # 2980 of 2986 was shown "(100%)" with six steps still running: rounded, not down.
    st = {"run_dir": "/run", "up_since": 0.0, "pid": 1, "nodes": [], "counts": {"running": 6},
          "submissions": [{"suite": "big", "steps": 2986, "finished": 2980},
                          {"suite": "done", "steps": 3, "finished": 3}, {"suite": "none", "steps": 0, "finished": 0}]}
    text = statusview.render(st, now=1.0)
    assert "  suite big: 2980/2986 finished (99%)\n" in text, text
    assert "  suite done: 3/3 finished (100%)\n" in text, text
    assert text.endswith("  suite none: 0/0 finished (100%)") or "  suite none: 0/0 finished (100%)\n" in text, text


def test_a_drained_fleet_whose_steps_left_all_need_a_longer_allocation_does_not_say_the_next_run_goes_on():
    # (before 2026-12-06 it said so of every drain, as `fleet run` exited 1: no job like this one runs them)
    from fleet.core.deadline import AllocationEnds, DrainNow
    t0 = time.time()
    sched = Scheduler()
    sched.handle(NodeJoined(node("n1", 1)), t0)
    sched.handle(AllocationEnds(t0 + 60, t0 + 30, "slurm"), t0)
    sched.handle(submission(suite({"id": "est", "estimate": 50}).steps), t0)
    sched.handle(DrainNow("the batch system's warning signal (SIGUSR1)"), t0 + 1)

    def said(longer_only: bool) -> str:
        st = status.answer(sched, [], up_since=t0, run_dir=Path("/run"), failures=[], dropped={}, submissions=[],
                           longer_only=longer_only)
        return next(x for x in statusview.render(st, now=t0 + 2).splitlines() if "DRAINED" in x)

    assert said(True) == ("  DRAINED (the batch system's warning signal (SIGUSR1)): nothing more starts; every step "
                          "left needs a longer allocation than this one")
    assert said(False).endswith("nothing more starts; the next run goes on")
