"""What a drain says of the steps it stops: that the drain stopped them (not "cancelled",
which is `fleet cancel`'s word), and its drain point to a tenth of a second. Before
2026-12-06 a step stopped at the drain point of a short job read "drained: the allocation
ends at 11:53:54; the drain point, 58.8786 s before the end; cancelled; ended after
SIGTERM" (fleet.node.stopping.STOPPED_BY, fleet.control.coordinator_cli)."""

from __future__ import annotations

import re

from fleetharness import assert_nothing_left, events, fleet, write_suite


def test_a_step_stopped_at_a_short_job_s_drain_point_says_the_drain_stopped_it_and_the_seconds_are_rounded(tmp_path):
    run_dir = tmp_path / "run"
    # `long` starts after `first`, so it has not run nearly all of the time steps get (or
    # the drain would also say it needs a longer allocation, and fleet run exit 1: stuck.py).
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "words"\n[[steps]]\nid = "first"\ncommand = "sleep 2"\n'
                                             '[[steps]]\nid = "long"\ncommand = "sleep 60"\ndeps = ["first"]\n')
    # --drain-before longer than the walltime: half the time left, to a tenth of a second.
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "13s",
              "--drain-before", "30s", cwd=tmp_path, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "draining 6.5 s before the end instead (half the time left)" in r.stderr, r.stderr
    [long] = [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == "long"]
    assert long["outcome"] == "interrupted", long
    assert re.fullmatch(r"drained: the allocation ends at \d\d:\d\d:\d\d; the drain point, \d+(\.\d)? s before the "
                        r"end; stopped by the drain; ended after SIGTERM", long["reason"]), long["reason"]
    log = (run_dir / "coordinator.log").read_text()
    assert re.search(r"more than the \d+\.\d s left before the allocation ends: draining \d+(\.\d)? s before it", log), \
        log
    assert_nothing_left(run_dir)
