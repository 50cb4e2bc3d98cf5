"""What `fleet run` says when the fleet closed its suite early, not drained: nothing
left could end before the drain point, so the steps left ended `not_started` at once
(fleet.control.drain), the allocation still running. Before 2026-12-07 it said "the
allocation ended before the suite did", 1.2 s into a 2-minute job; `fleet report`
said it right (`closed early`). The exit status is as before: 3, or 1 where no
allocation as long as this one could finish what is left. A real drain still says
the allocation ended (tests/control/test_drain.py)."""

from __future__ import annotations

import re

from fleetharness import assert_nothing_left, events, fleet, write_suite

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
CLOSED = r"fleet: closed early: nothing left can end before the drain point at \d\d:\d\d:\d\d"


def test_a_suite_closed_early_with_steps_a_next_job_can_run_says_it_closed_early_and_exits_3(tmp_path):
    # The drain point 40 s after the start: `first` ends with under 32 s left, less than
    # `second`'s 35 s, which fits an allocation like this one (40 s): the next job runs it.
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "early"\n[[steps]]\nid = "first"\n'
                                             'command = "sleep 8"\nestimate = 8\n[[steps]]\nid = "second"\n'
                                             'command = "true"\nestimate = 35\ndeps = ["first"]\n')
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "60s",
              "--drain-before", "20s", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert re.search(CLOSED + r": 1 step interrupted or not started; run the suite again \(in the next allocation\) "
                     r"to finish it\n", r.stderr), r.stderr
    assert "the allocation ended" not in r.stderr, r.stderr
    assert not [e for e in events(run_dir) if e["kind"] == "drained"]  # (it closed, it did not drain)
    assert_nothing_left(run_dir)


def test_a_suite_closed_early_with_steps_too_long_for_any_allocation_like_this_one_says_it_closed_early_and_exits_1(
        tmp_path):
    # The audit's job: `-t 2`, a step with estimate = 100 and one that needs it.
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "est"\n[[steps]]\nid = "quick"\ncommand = "true"\n'
                                             'estimate = 1\n[[steps]]\nid = "bigrun"\ncommand = "true"\n'
                                             'estimate = 100\n[[steps]]\nid = "post"\ncommand = "true"\n'
                                             'deps = ["bigrun"]\n')
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "2m",
              "--drain-before", "1m", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(CLOSED + r", and no allocation as long as this one can finish it: the 2 steps left each needs a "
                     r"longer allocation \(first: (bigrun|post)\); give the job more time", r.stderr), r.stderr
    assert "the allocation ended" not in r.stderr, r.stderr
    assert not [e for e in events(run_dir) if e["kind"] == "drained"]
    assert_nothing_left(run_dir)
