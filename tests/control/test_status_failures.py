"""`fleet status` lists every step that ended without success among its recent
failures: timed out and broken steps too, not only failed ones. A real fleet."""

from __future__ import annotations

import json

import rawpeer as R
from fleetharness import fleet, write_suite


def test_status_lists_timed_out_and_broken_steps_among_recent_failures_beside_failed_ones(tmp_path):
    # Before 2026-12-06 only failed, terminated, out_of_memory, lost and unrunnable
    # steps were kept: a timed-out or broken step was counted but never named.
    run_dir = tmp_path / "run"
    R.up(run_dir, tmp_path)
    try:
        suite = write_suite(tmp_path / "to.toml", '[suite]\nname = "to"\n'
                            '[[steps]]\nid = "timeout-me"\ncommand = "sleep 5"\ntimeout = 1\ngrace = 0\n'
                            '[[steps]]\nid = "fail-me"\ncommand = "exit 3"\n'
                            '[[steps]]\nid = "broken-me"\ncommand = "exit 5"\nprotocol = "steps"\n')
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 1, (r.stdout, r.stderr)
        r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert {k: st["counts"].get(k) for k in ("failed", "timed_out", "broken")} == \
            {"failed": 1, "timed_out": 1, "broken": 1}, st["counts"]
        assert sorted((f["outcome"], f["step"]) for f in st["failures"]) == \
            [("broken", "broken-me"), ("failed", "fail-me"), ("timed_out", "timeout-me")], st["failures"]
        text = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).stdout
        failures = text.split("recent failures:\n", 1)[1]
        for outcome, step in (("timed_out", "timeout-me"), ("failed", "fail-me"), ("broken", "broken-me")):
            assert f"  {outcome:<10} {step}: " in failures, text
    finally:
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)
