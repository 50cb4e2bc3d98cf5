"""What `fleet report` and `fleet audit` say of a fleet found gone that was only held up
(fleet.control.foundgone; fleet.report.ingest, fleet.report.audit): real `fleet run`
processes on one run directory, one of them suspended for real (SIGSTOP of its process
tree) until another finds it gone and runs its steps, then resumed: it stops, and writes
its own `fleet_down` saying why after the finder's `fleet_gone`. Its end is one end: the
evidence is the report's and the audit's JSON (counts, notes, reasons), never seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fleetharness import assert_nothing_left, env, finish, wait_for
from test_found_gone import HB, bg, freeze, lease, lines, running_in, suite, taken, thaw  # noqa: F401 (bg: fixture)


def fleet_json(*args: str, cwd: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "fleet", *args, "--json"], cwd=cwd, env=env(),
                       capture_output=True, text=True, timeout=120)
    assert p.stdout, p.stderr
    return json.loads(p.stdout)


def found_gone_while_suspended(run_dir: Path, runs: Path, bg, s: Path, frozen_one: str):
    """Two fleets on the run directory (A takes the lease, B shares it); the one named
    `frozen_one` ("A" or "B") suspended until the other runs a step it had started, then
    resumed. (the fleet ids (gone, finder), their processes (gone, finder))."""
    a = bg("run", str(s), "--nodes", "1", "--stale-after", "5", *HB)
    wait_for(lambda: lease(run_dir).get("pid"), 60, "fleet A to take the lease")
    fa = lease(run_dir)["fleet"]
    b = bg("run", str(s), "--nodes", "1", "--stale-after", "5", *HB)
    wait_for(lambda: lease(run_dir).get("shared") and running_in(runs, fa)
             and any(ln[2] != fa for ln in lines(runs)), 60, "the run directory shared, both fleets running")
    fb = next(ln[2] for ln in lines(runs) if ln[2] != fa)
    gone, finder = (a, b) if frozen_one == "A" else (b, a)
    fg, ff = (fa, fb) if frozen_one == "A" else (fb, fa)
    frozen = freeze(gone.pid)
    try:
        ran = running_in(runs, fg)
        wait_for(lambda: taken(runs, fg, ran), 90, f"fleet {ff} to run the steps of {fg}")
    finally:
        thaw(frozen)
    return (fg, ff), (gone, finder)


def assert_its_end_counted_once(rep: dict, gone: str, finder: str, n: int) -> None:
    assert rep["sessions"] == 1 and not rep["in_progress"], (rep["sessions"], rep["notes"])
    assert rep["counts"] == {"succeeded": n}, rep["counts"]
    notes = " | ".join(rep["notes"])
    assert "records overlap" not in notes and "without fleet_down" not in notes, notes
    assert f"fleet {gone} was found gone by fleet {finder}" in notes, notes
    assert "this fleet was found gone by fleet" in notes, notes  # (its own fleet_down's reason, quoted)


def assert_its_lost_attempts_say_it_was_found_gone(aud: dict, gone: str, finder: str) -> None:
    lost = {s: a["reason"] for s, a in aud["steps"].items() if a["may_have_run"]}
    assert lost, aud["counts"]
    for reason in lost.values():
        assert f"was found gone by fleet {finder}" in reason and "the coordinator was killed" not in reason, reason


def test_a_held_up_lease_holder_found_gone_ends_once_in_the_report_though_a_third_fleet_starts_after_it(
        tmp_path, bg):
    # The reviewer's case: the report counted the holder's end twice (the finder's
    # fleet_gone, then its own fleet_down), cut a second session at a third fleet's start
    # with the finder's records in it, its steps `not run` in the first.
    n = 48
    s, run_dir, runs = suite(tmp_path, n, 1.0)
    (fa, fb), (a, b) = found_gone_while_suspended(run_dir, runs, bg, s, "A")
    ra = finish(a, 120)
    assert ra[0] == 1 and f"this fleet was found gone by fleet {fb}" in ra[2], ra
    assert b.poll() is None, "fleet B ended before a third fleet could start beside it"
    c = bg("run", str(s), "--nodes", "1", "--stale-after", "5", *HB)
    rb, rc = finish(b, 180), finish(c, 180)
    assert rb[0] == 0 and rc[0] == 0, (rb, rc)
    assert_its_end_counted_once(fleet_json("report", str(run_dir), cwd=tmp_path), fa, fb, n)
    assert_its_lost_attempts_say_it_was_found_gone(fleet_json("audit", str(run_dir), cwd=tmp_path), fa, fb)
    assert_nothing_left(run_dir)


def test_a_held_up_sharer_found_gone_ends_once_and_its_node_holds_no_more_than_it_offered(tmp_path, bg):
    # The finder's fleet_gone was about the sharer's registration's time, before its own
    # fleet_starting: its node ended before its steps, the core-seconds over 70 times
    # what it offered ("the records overlap").
    n = 24
    s, run_dir, runs = suite(tmp_path, n, 1.0)
    (fb, fa), (b, a) = found_gone_while_suspended(run_dir, runs, bg, s, "B")
    rb, ra = finish(b, 120), finish(a, 180)
    assert ra[0] == 0, ra
    assert rb[0] == 1 and f"this fleet was found gone by fleet {fa}" in rb[2], rb
    rep = fleet_json("report", str(run_dir), cwd=tmp_path)
    assert_its_end_counted_once(rep, fb, fa, n)
    assert not rep["utilization"].get("over_capacity"), rep["utilization"]
    assert_its_lost_attempts_say_it_was_found_gone(fleet_json("audit", str(run_dir), cwd=tmp_path), fb, fa)
    assert_nothing_left(run_dir)
