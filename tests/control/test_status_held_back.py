"""`fleet status` and the report of a fleet whose allocation's end holds steps back (an
estimate that does not fit before the drain point: fleet.core.deadline): they are
counted `held_back` ("held back" in the report), not ready, since they will not start in
this allocation; `fleet cancel` of one counts it cancelled instead. Real fleet, real
processes."""

from __future__ import annotations

import json
from pathlib import Path

from fleetharness import assert_nothing_left, finish, fleet, spawn, wait_for, write_suite


def status(run_dir: Path, tmp_path: Path, *json_flag: str):
    r = fleet("status", "--run-dir", str(run_dir), *json_flag, cwd=tmp_path, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout) if json_flag else r.stdout


def report(run_dir: Path, tmp_path: Path) -> dict:
    r = fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_steps_the_allocations_end_holds_back_are_counted_held_back_not_ready_by_status_and_report(
        tmp_path, background):
    run_dir = tmp_path / "run"
    flag = tmp_path / "flag"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "40m", cwd=tmp_path, check=True, timeout=60)
    try:
        # busy runs until the flag; the three long ones would end after the drain point (35 min
        # away); after waits for long/1.
        suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "h"
[[steps]]
id = "busy"
command = "for i in $(seq 900); do test -e {flag} && exit 0; sleep 0.1; done; exit 1"
[[steps]]
id = "long/{{i}}"
array = "1-3"
command = "true"
estimate = 3600
[[steps]]
id = "after"
command = "true"
deps = ["long/1"]
""")
        runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(runner)
        st = wait_for(lambda: (s := status(run_dir, tmp_path, "--json"))["counts"].get("running") == 1
                      and (s["allocation"] or {}).get("held") == 3 and s, 60, "busy running, three held back")
        # (before: {"waiting": 1, "ready": 3, "running": 1}: "3 ready" that will not start here)
        assert st["counts"] == {"waiting": 1, "held_back": 3, "running": 1}, st["counts"]
        assert st["ready"] == [], st["ready"]
        text = status(run_dir, tmp_path)
        assert "\nsteps:  waiting 1  held_back 3  running 1\n" in text, text
        assert "\n  3 steps held back, not started: expected to end after the drain point\n" in text, text
        assert "ready" not in text, text
        # The report of the fleet up still says the same (before: "4 waiting").
        rep = report(run_dir, tmp_path)
        assert {k: v for k, v in rep["counts"].items() if v} == {"running": 1, "held back": 3, "waiting": 1}, \
            rep["counts"]
        assert all(rep["steps"][f"long/{i}"]["reason"].startswith("expected to take 3600 s (estimate), ")
                   for i in (1, 2, 3)), rep["steps"]
        r = fleet("report", str(run_dir), cwd=tmp_path, timeout=60)
        assert "  steps         5: 3 held back, 1 running, 1 waiting\n" in r.stdout, r.stdout
        # A held step cancelled is no longer held back.
        assert fleet("cancel", "long/2", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
        assert status(run_dir, tmp_path, "--json")["counts"] == {"waiting": 1, "held_back": 2, "running": 1,
                                                                 "cancelled": 1}
        flag.touch()
        code, out, err = finish(runner, 90)
        # (closed early: nothing left can end before the drain point, nor in an allocation like this one)
        assert code == 1 and "no allocation as long as this one can finish it" in out + err, out + err
        st = status(run_dir, tmp_path, "--json")
        assert st["counts"] == {"waiting": 1, "held_back": 2, "succeeded": 1, "cancelled": 1}, st["counts"]
    finally:
        flag.touch()
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    assert_nothing_left(run_dir)
