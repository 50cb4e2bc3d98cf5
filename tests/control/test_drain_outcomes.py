"""What the drain makes of the steps it finds, through the real CLI and real processes:
a step's grace after the drain point is no part of the time it ran (fleet.control.stuck).
Each test checks the process table afterwards."""

from __future__ import annotations

from pathlib import Path

from fleetharness import assert_nothing_left, fleet, write_suite
from fleetharness import records as event_records

from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
# A step that ignores SIGTERM: only its SIGKILL ends it. Tagged with the test's directory
# (its argv), so that the process table can be searched for it.
STUBBORN = ('["python3", "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
            'time.sleep(100)", "{tag}"]')


def exits(run_dir: Path, step: str) -> list[E.Exit]:
    return [e for e in event_records(run_dir) if isinstance(e, E.Exit) and e.step == step]


def test_a_step_that_started_late_is_not_judged_by_its_grace_after_the_drain_point(tmp_path):
    # `late` starts after first's 3 s, runs to the drain point (12 s before a 24-s end)
    # and then takes its 6 s grace: it ran well under 90 % of the window before the drain,
    # so another job like this one may finish it (exit 3), though its exit came after
    # more than the window (counted so, it "needed a longer allocation": exit 1).
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[[steps]]
id = "first"
command = "sleep 3"
[[steps]]
id = "late"
deps = ["first"]
command = {STUBBORN.format(tag=tmp_path)}
grace = 6
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "24",
              "--drain-before", "12", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    [ex] = exits(run_dir, "late")
    assert ex.outcome == "interrupted" and "needs a longer allocation" not in ex.reason, ex
    assert "no allocation as long as this one" not in r.stderr, r.stderr
    assert records.attempts(run_dir, "late") == []
    assert_nothing_left(run_dir, tag=str(tmp_path))
