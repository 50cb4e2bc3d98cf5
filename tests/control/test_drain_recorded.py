"""A step with no estimate is judged against the drain point by how long it took the
last time it succeeded (its done marker's work seconds, read at submission): through
the real CLI, a first run records it, a rerun of the same steps with a short walltime
does not start the one that would not end in time, and says why."""

from __future__ import annotations

from fleetharness import assert_nothing_left, events, fleet, write_suite

from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


def test_a_step_without_an_estimate_that_took_longer_last_time_than_the_time_left_is_not_started(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "recorded"
[[steps]]
id = "slow"
call = "fleet_steps:nap"
args = { seconds = 5 }
[[steps]]
id = "quick"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    [took] = [a["work_s"] for a in records.attempts(run_dir, "slow")]
    assert took >= 5
    # 8 s of allocation: the drain point is half of it away (the 5-minute margin, capped).
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--force", "--walltime", "8s", *HB,
              cwd=tmp_path, timeout=90)
    # (Exit 1, not 3: 5 s do not fit the ~4 s an 8-s job gives either: fleet.control.stuck.)
    assert r.returncode == 1 and "not_started slow: needs a longer allocation: it takes about 5 s" in r.stdout, \
        r.stdout + r.stderr
    second = events(run_dir)
    second = second[max(i for i, e in enumerate(second) if e["kind"] == "fleet_up"):]
    [w] = [e for e in second if e["kind"] == "wait" and e["step"] == "slow"]
    assert w["cause"] == "deadline", w
    assert w["reason"].startswith(f"expected to take {took:.0f} s (earlier run), "), w
    assert [e["step"] for e in second if e["kind"] == "start"] == ["quick"]
    assert [a["outcome"] for a in records.attempts(run_dir, "slow")] == ["succeeded"]  # no attempt counted
    assert_nothing_left(run_dir)
