"""What `fleet report` says of the steps a drain left, from the drain's records: each not
started step's reason as the `not_started` record gives it (its own for a step no
allocation like this one could start either: fleet.control.closing), and whether the
next run goes on; a stream written before 2026-12-06, whose record holds the counts
alone, reads as it did."""

from __future__ import annotations

from test_report import Stream

import fleet.report as R
from fleet.wire import events as E

TOO_LONG = ("needs a longer allocation: it takes about 50 s, and an allocation like this one gives steps 29 s "
            "before its drain point")
AFTER = "needs a longer allocation: it needs est, which does"
WHY = "not started: the allocation ends at 11:53:54; the drain point, 29 s before the end"


def drained(not_started: E.NotStarted, fits: bool = False) -> Stream:
    """One node; `est` (and `after`, which needs it; and `fits`) never started, a drain."""
    s = Stream().fleet(0, [("n1", [0], [], 100)])
    steps = [("est", [], 1, None), ("after", ["est"], 1, None)] + ([("fits", [], 1, None)] if fits else [])
    s.submit(1, steps)
    s.add(E.AllocationEnd(t=1, end=60, drain_at=31, source="slurm"))
    s.add(E.Drained(t=2, reason="the batch system's warning signal (SIGUSR1)", running=0))
    return s.add(not_started).down(3)


def test_a_step_that_needs_a_longer_allocation_says_so_and_the_drain_says_no_job_like_this_one_finishes_the_suite():
    # (before 2026-12-06: "not started: the fleet drained before the allocation's end" for
    # each, and "the next run goes on")
    r = R.build(drained(E.NotStarted(t=2.5, steps=2, held=1, reason=WHY, longer={TOO_LONG: ["est"]},
                                     needs=["after", "est"], longer_only=True)).recs)
    assert (r.steps["est"].outcome, r.steps["est"].reason) == ("not run", TOO_LONG)
    assert r.steps["after"].reason == AFTER
    text = R.format_text(r)
    assert f"not run    est: {TOO_LONG}" in text, text
    assert "the next run goes on" not in text, text
    assert ("2 steps not started (1 would not have ended before the drain point): each needs a longer allocation "
            "than this one: give the job more time, or the steps shorter estimates") in text, text
    assert r.to_json()["allocation"]["longer_only"] is True


def test_a_step_another_job_could_start_takes_the_drains_reason_and_the_next_run_goes_on():
    r = R.build(drained(E.NotStarted(t=2.5, steps=3, held=1, reason=WHY, longer={TOO_LONG: ["est"]},
                                     needs=["after", "est"]), fits=True).recs)
    assert r.steps["fits"].reason == WHY and r.steps["est"].reason == TOO_LONG
    text = R.format_text(r)
    assert text.count("the next run goes on") == 1 and "each needs a longer allocation" not in text, text
    assert "longer_only" not in r.to_json()["allocation"]


def test_a_stream_from_before_the_not_started_reasons_reports_as_it_did():
    r = R.build(drained(E.NotStarted(t=2.5, steps=2, held=1)).recs)
    assert {s.reason for s in r.steps.values()} == {"not started: the fleet drained before the allocation's end"}
    assert "(1 would not have ended before the drain point): the next run goes on" in R.format_text(r)
    assert r.to_json()["allocation"] == {"end": 60, "drain_at": 31, "source": "slurm", "drained": 2,
                                         "reason": "the batch system's warning signal (SIGUSR1)", "running": 0, "interrupted": 0,
                                         "not_started": 2, "held": 1}


def test_a_full_disks_drain_counts_the_steps_it_interrupted_not_those_that_ran_on_and_succeeded():
    # (before 2026-12-07 "3 steps interrupted": the steps running when the drain began, which a
    # full disk's drain lets run; two of them succeeded)
    s = Stream().fleet(0, [("n1", [0, 1, 2], [], 100)])
    s.submit(1, [("a", [], 1, None), ("b", [], 1, None), ("c", [], 1, None), ("d", [], 1, None)])
    for i, step in enumerate("abc"):
        s.start(1, step, "n1", [i])
    s.add(E.Drained(t=2, reason="the run directory's file system is full (No space left on device: ...)", running=3))
    s.exit(3, "a", 0.0, 2.0)
    s.exit(3, "b", 0.0, 2.0)
    s.exit(3, "c", 0.0, 2.0, outcome="interrupted", reason="drained: the run directory's file system is full")
    r = R.build(s.add(E.NotStarted(t=3, steps=1, held=0, reason="not started: drained")).down(4).recs)
    text = R.format_text(r)
    assert "; 1 step interrupted, 1 step not started" in text, text
    assert r.to_json()["allocation"]["interrupted"] == 1 and r.to_json()["allocation"]["running"] == 3
