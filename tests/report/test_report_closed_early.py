"""What `fleet report` and `fleet audit` say of the steps a fleet left when it closed
early, without a drain: nothing left could end before the drain point (fleet.control.drain),
so its `not_started` record (no `drained` record before it) gave them their reason. They
keep it, end at the close (the fleet may stay up), and a line says the fleet closed early.
Before 2026-12-06 they "went down before" they ran, and nothing said the fleet had closed."""

from __future__ import annotations

import json
from pathlib import Path

from test_report import Stream

import fleet.report as R
from fleet.wire import events as E
from fleetharness import assert_nothing_left, events, fleet, write_suite

WHY = "not started: it would not end before the drain point at 11:53:54"

CLOSES = """
[suite]
name = "closes"
[[steps]]
id = "A"
command = "sleep 12"
estimate = 12
[[steps]]
id = "B"
command = "true"
estimate = 40
deps = ["A"]
[[steps]]
id = "C"
command = "true"
estimate = 80
[[steps]]
id = "D"
command = "true"
deps = ["B"]
"""


def said(run_dir: Path, cwd: Path) -> tuple[dict, str, dict, str]:
    """(the report's --json, its text, the audit's --json steps, its text)."""
    j = fleet("report", str(run_dir), "--json", cwd=cwd, timeout=60)
    t = fleet("report", str(run_dir), cwd=cwd, timeout=60)
    aj = fleet("audit", str(run_dir), "--json", cwd=cwd, timeout=60)
    at = fleet("audit", str(run_dir), cwd=cwd, timeout=60)
    assert j.returncode == t.returncode == 0, j.stderr + t.stderr
    return json.loads(j.stdout), t.stdout, json.loads(aj.stdout)["steps"], at.stdout


def test_steps_a_fleet_closed_early_keep_its_reason_in_the_report_and_the_audit_while_it_is_up_and_after(tmp_path):
    suite = write_suite(tmp_path / "s.toml", CLOSES)
    run = tmp_path / "run"
    env = {"FLEET_RUN_DIR": str(run)}
    # The drain point 50 s after the fleet's start: A ends with less than B's 40 s left
    # before it, and C (80 s) needs a longer allocation; D needs B. (B fits an allocation
    # like this one while the fleet takes under 10 s to come up: a loaded machine's margin.)
    up = fleet("up", "--local", "--walltime", "70", "--drain-before", "20", cwd=tmp_path, timeout=120, environ=env)
    assert up.returncode == 0, up.stderr
    try:
        r = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ=env)
        assert r.returncode == 3, r.stdout + r.stderr
        [ns] = [e for e in events(run) if e["kind"] == "not_started"]
        why = ns["reason"]
        assert why.startswith("not started: it would not end before the drain point at "), ns
        assert not [e for e in events(run) if e["kind"] == "drained"]
        [(c_why, named)] = ns["longer"].items()
        assert named == ["C"], ns
        live = said(run, tmp_path)
    finally:
        down = fleet("down", cwd=tmp_path, timeout=120, environ=env)
    assert down.returncode == 0, down.stderr
    for j, text, audited, atext in (live, said(run, tmp_path)):
        steps = j["steps"]
        assert {s: (v["outcome"], v["reason"]) for s, v in steps.items() if s != "A"} == {
            "B": ("not run", why), "C": ("not run", c_why), "D": ("not run", why)}, steps
        assert f"not run    B: {why}\n" in text, text
        assert "the fleet went down before it ran" not in text + atext, text + atext
        line = next(x for x in text.splitlines() if x.startswith("  closed early  at "))
        assert line.endswith("before the drain point: nothing left could end before the drain point; 3 steps "
                             "not started (2 would not have ended before the drain point): the next run goes on"), line
        assert {s: (v["status"], v["reason"]) for s, v in audited.items() if s != "A"} == {
            "B": ("not run", why), "C": ("not run", c_why), "D": ("not run", why)}, audited
        # They waited until the close, not until the fleet went down (or until now, while it is up).
        closed = j["allocation"]["closed"] - j["t0"]
        assert steps["B"]["end"] == steps["D"]["end"] == round(closed, 6) and j["wall_s"] <= closed + 1e-6, j
    assert live[0]["in_progress"]
    assert_nothing_left(run)


def closed_then_more(drained: bool = False) -> Stream:
    """One node; `held` and `after` (which needs it) left by a close at 3 (or a drain);
    then a second submission, `later`, that had not run when the fleet went down at 9."""
    s = Stream().fleet(0, [("n1", [0], [], 100)])
    s.submit(1, [("held", [], 1, None), ("after", ["held"], 1, None)])
    s.add(E.AllocationEnd(t=1, end=60, drain_at=30, source="given"))
    if drained:
        s.add(E.Drained(t=2.5, reason="the drain point, 30 s before the end", running=0))
    s.add(E.NotStarted(t=3, steps=2, held=1, reason=WHY))
    s.submit(5, [("later", [], 1, None)], sub=2)
    return s.down(9)


def test_a_close_without_a_drain_names_the_steps_it_left_and_not_those_submitted_after_it():
    r = R.build(closed_then_more().recs)
    got = {sid: (s.outcome, s.reason, r.rel(s.end)) for sid, s in r.steps.items()}
    assert got == {"held": ("not run", WHY, 2.0), "after": ("not run", WHY, 2.0),
                   "later": ("not run", "the fleet went down before it ran", 8.0)}, got
    text = R.format_text(r)
    assert ("  closed early  at 2.00 s, 27.00 s before the drain point: nothing left could end before the drain "
            "point; 2 steps not started (1 would not have ended before the drain point): the next run goes on") in text
    assert r.to_json()["allocation"]["closed"] == 3


def test_a_drain_says_as_it_did_and_no_close_early():
    r = R.build(closed_then_more(drained=True).recs)
    assert {s.reason for s in r.steps.values()} == {WHY}
    text = R.format_text(r)
    assert "closed early" not in text and "  drained       at 1.50 s: the drain point" in text, text
    assert "closed" not in r.to_json()["allocation"]


def test_a_step_a_close_left_and_a_later_run_submitted_again_waits_from_each_submission_not_between():
    s = Stream().fleet(0, [("n1", [0], [], 100)])
    s.submit(1, [("held", [], 1, None)])
    s.add(E.AllocationEnd(t=1, end=60, drain_at=30, source="given"))
    s.add(E.NotStarted(t=3, steps=1, held=1, reason=WHY))
    s.submit(5, [("held", [], 1, None)], sub=2)
    s.start(6, "held", "n1", [0]).exit(7, "held", 0.1, 0.9)
    r = R.build(s.down(8).recs)
    assert r.steps["held"].outcome == "succeeded"
    assert [seg[:2] for seg in r.steps["held"].segments] == [(1, 3), (5, 6)]


def test_a_failed_step_submitted_again_twice_while_it_waits_counts_its_wait_once():
    s = Stream().fleet(0, [("n1", [0], [], 100)])
    s.submit(1, [("f", [], 1, None)]).start(1, "f", "n1", [0]).exit(2, "f", 0.1, 0.9, outcome="failed")
    s.submit(4, [("f", [], 1, None)], sub=2).submit(5, [("f", [], 1, None)], sub=3)
    s.start(6, "f", "n1", [0], attempt=2).exit(7, "f", 0.1, 0.9, attempt=2)
    r = R.build(s.down(8).recs)
    assert [seg[:2] for seg in r.steps["f"].segments] == [(4, 6)]
