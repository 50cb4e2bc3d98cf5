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


def test_status_says_a_failure_that_was_retried_and_its_attempt_as_fleet_report_does(tmp_path):
    # Before 2026-12-07 a step that failed on attempt 1 and succeeded on its retry was
    # listed `failed  flaky: ...`, with neither its attempt nor that it was retried.
    run_dir, flag = tmp_path / "run", tmp_path / "flag"
    R.up(run_dir, tmp_path)
    try:
        suite = write_suite(tmp_path / "r.toml", '[suite]\nname = "r"\n'
                            f'[[steps]]\nid = "flaky"\ncommand = "test -e {flag} || {{ touch {flag}; exit 3; }}"\n'
                            'retries = 1\n'
                            '[[steps]]\nid = "bad"\ncommand = "exit 4"\nretries = 1\n')
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 1 and "succeeded  flaky" in r.stdout, (r.stdout, r.stderr)
        r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stderr
        said = sorted((f["step"], f["outcome"], f["attempt"], f["retried"]) for f in json.loads(r.stdout)["failures"])
        assert said == [("bad", "failed", 1, True), ("bad", "failed", 2, False), ("flaky", "failed", 1, True)], said
        text = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).stdout
        failures = text.split("recent failures:\n", 1)[1]
        assert "  failed     flaky (attempt 1, retried): " in failures, text
        assert "  failed     bad (attempt 1, retried): " in failures and "  failed     bad (attempt 2): " in failures, text
    finally:
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)
