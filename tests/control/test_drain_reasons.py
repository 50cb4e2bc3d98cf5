"""Why each step a drain left did not start, through the real CLI: `fleet run` prints
it, the drain's `not_started` record keeps it (fleet.control.closing), and `fleet
report` and `fleet audit` say it afterwards; a run directory of before 2026-12-06, whose
record holds the counts alone, reads as it did."""

from __future__ import annotations

import json
from pathlib import Path

from fleetharness import assert_nothing_left, events, fleet, write_suite

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
TOO_LONG = "needs a longer allocation: it takes about 50 s, and an allocation like this one gives steps "


def said(run_dir: Path, cwd: Path) -> tuple[dict, str, dict]:
    """(fleet report --json's steps, fleet report's text, fleet audit --json's steps)."""
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=cwd, timeout=60, check=True).stdout)
    text = fleet("report", str(run_dir), cwd=cwd, timeout=60, check=True).stdout
    aud = json.loads(fleet("audit", str(run_dir), "--json", cwd=cwd, timeout=60).stdout)
    return rep["steps"], text, aud["steps"]


def test_report_and_audit_say_why_each_step_the_drain_left_did_not_start_as_fleet_run_did(tmp_path):
    # (before 2026-12-06 the record held counts alone: the audit said `est` "went down before
    # it ran", the report that the fleet drained, though fleet run had said it needs a
    # longer allocation). `endless` starts after `first`'s 3 s: it has not had nearly all of the
    # 10-s window when the drain stops it, so another job like this one may finish it (exit 3).
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "drained"
[[steps]]
id = "first"
command = "sleep 3"
[[steps]]
id = "endless"
command = "sleep 120"
deps = ["first"]
[[steps]]
id = "after"
command = "true"
deps = ["endless"]
[[steps]]
id = "est"
command = "sleep 1"
estimate = 50
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "20", "--drain-before", "10",
              *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"not_started est: {TOO_LONG}" in r.stdout, r.stdout
    [ns] = [e for e in events(run_dir) if e["kind"] == "not_started"]
    why = ns["reason"]
    assert why.startswith("not started: the allocation ends at ") and f"not_started after: {why}\n" in r.stdout
    [(est_why, named)] = ns["longer"].items()
    assert named == ["est"] and est_why.startswith(TOO_LONG) and "longer_only" not in ns, ns
    steps, text, audited = said(run_dir, tmp_path)
    assert (steps["est"]["outcome"], steps["est"]["reason"]) == ("not run", est_why)
    assert steps["after"]["reason"] == why and steps["endless"]["outcome"] == "interrupted"
    assert f"not run    est: {est_why}\n" in text and text.count("the next run goes on") == 1, text
    assert (audited["est"]["status"], audited["est"]["reason"]) == ("not run", est_why)
    assert (audited["after"]["status"], audited["after"]["reason"]) == ("not run", why)
    assert_nothing_left(run_dir)

    # The same run directory as a fleet of before 2026-12-06 wrote it: as they said then.
    stream = run_dir / "events.jsonl"
    lines = [json.loads(line) for line in stream.read_text().splitlines()]
    stream.write_text("".join(json.dumps({k: v for k, v in e.items() if k not in ("reason", "longer")}
                                         if e["kind"] == "not_started" else e) + "\n" for e in lines))
    steps, text, audited = said(run_dir, tmp_path)
    drained = "not started: the fleet drained before the allocation's end"
    assert steps["est"]["reason"] == steps["after"]["reason"] == drained
    assert {audited[s]["reason"] for s in ("est", "after")} == {"the fleet went down before it ran"}
