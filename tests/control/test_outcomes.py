"""How attempts end, through the real CLI: steps the fleet itself stops (`fleet down`,
Ctrl-C) are interrupted — no attempt counted, no neighbours blamed, run again next
time — and `fleet run` names a retry's real reason and counts each step once, when it
is final."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path


from fleetharness import finish, assert_nothing_left, events, fleet, spawn, wait_for, write_suite
from fleetharness import records as event_records

from fleet.wire import events as E
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "2"]


def waiting_suite(tmp_path: Path) -> tuple[Path, Path]:
    """Two steps on one node that run until a flag file exists (then end at once)."""
    flag = tmp_path / "flag"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "stoppable"
[[steps]]
id = "long"
command = "test -e {flag} || sleep 120"
retries = 2
[[steps]]
id = "beside"
command = "test -e {flag} || sleep 120"
[[steps]]
id = "after"
call = "fleet_steps:nap"
args = {{ seconds = 0.05 }}
deps = ["long"]
""")
    return suite, flag


def started(run_dir: Path, *steps: str) -> bool:
    ev = events(run_dir)
    return all(any(e["kind"] == "started" and e["step"] == s for e in ev) for s in steps)


def assert_interrupted_then_rerun(run_dir: Path, tmp_path: Path, suite: Path, flag: Path) -> None:
    exits = {e.step: e for e in event_records(run_dir) if isinstance(e, E.Exit)}
    for s in ("long", "beside"):
        assert exits[s].outcome == "interrupted", exits[s]
        assert exits[s].neighbours is None and "running beside it" not in exits[s].reason, exits[s]
        assert records.attempts(run_dir, s) == []          # not an attempt
        assert records.read_final(run_dir, s) is None      # nothing on disk stops a rerun
    assert not [e for e in event_records(run_dir) if isinstance(e, (E.Retry, E.Blocked))]
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["steps"]["long"]["status"] == "interrupted" and a["steps"]["long"]["attempts"] == 0, a
    # never started, its fleet down: not run, as report says (before 2026-12-06: missing)
    assert a["steps"]["after"]["status"] == "not run" and a["missing"] == [], a
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert rep["steps"]["long"]["outcome"] == "interrupted"
    assert any(p["step"] == "long" and p["outcome"] == "interrupted" for p in rep["problems"])
    assert_nothing_left(run_dir, tag=str(flag))
    # The next run runs them (with a limit of one attempt: the interrupted one was none).
    flag.touch()
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--max-attempts", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 0 and "already done" not in r.stdout, r.stdout + r.stderr
    assert "3 succeeded" in r.stdout, r.stdout
    assert_nothing_left(run_dir, tag=str(flag))


def test_fleet_down_during_running_steps_records_them_interrupted_with_no_attempt_and_no_neighbours_and_the_next_run_runs_them(
        tmp_path, background):
    run_dir = tmp_path / "run"
    suite, flag = waiting_suite(tmp_path)
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, check=True, timeout=60)
    try:
        runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(runner)
        wait_for(lambda: started(run_dir, "long", "beside"), 30, "both steps running")
    finally:
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    code, out, err = finish(runner)
    assert code == 1 and "went down" in err, out + err
    assert_interrupted_then_rerun(run_dir, tmp_path, suite, flag)


def test_ctrl_c_on_a_run_with_an_embedded_fleet_interrupts_its_steps_and_the_next_run_runs_them(tmp_path, background):
    run_dir = tmp_path / "run"
    suite, flag = waiting_suite(tmp_path)
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: started(run_dir, "long", "beside"), 60, "both steps running")
    os.killpg(runner.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's foreground group
    code, out, err = finish(runner)
    assert code == 130 and "interrupted" in err, out + err
    wait_for(lambda: any(e["kind"] == "fleet_down" for e in events(run_dir)), 30, "the embedded fleet down")
    assert_interrupted_then_rerun(run_dir, tmp_path, suite, flag)


def test_a_retried_step_names_the_real_reason_and_its_attempt_limit_and_is_counted_once_when_final(tmp_path):
    run_dir = tmp_path / "run"
    count = tmp_path / "count"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "flaky"
[[steps]]
id = "ok"
call = "fleet_steps:nap"
args = {{ seconds = 0.05 }}
[[steps]]
id = "flaky"
retries = 2
command = "n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}; test $n -ge 2"
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if re.match(r"\[\s*\d+/2\]", ln)]
    flaky = [ln for ln in lines if " flaky" in ln]
    assert len(flaky) == 3, r.stdout
    assert flaky[0].endswith("flaky: retry 2 of 3: exit status 1"), r.stdout
    assert flaky[1].endswith("flaky: retry 3 of 3: exit status 1"), r.stdout
    assert re.search(r"succeeded\s+flaky$", flaky[2]), r.stdout
    # The counter moves once per step, on its final line, and never past a retry.
    counts = [int(re.match(r"\[\s*(\d+)/2\]", ln).group(1)) for ln in lines]
    finals = [n for ln, n in zip(lines, counts) if "retry" not in ln]
    assert finals == [1, 2], r.stdout
    seen = 0
    for ln, n in zip(lines, counts):
        if "retry" in ln:
            assert n == seen, r.stdout
        else:
            seen += 1
            assert n == seen, r.stdout
    assert "2 succeeded" in r.stdout.splitlines()[-1], r.stdout
    assert_nothing_left(run_dir)


def test_fleet_run_names_the_log_of_a_step_that_failed_or_timed_out_and_of_no_other(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "logs"
[[steps]]
id = "a/bad"
command = "echo the reason it failed; exit 3"
[[steps]]
id = "slow"
command = "sleep 60"
timeout = 0.5
grace = 0
[[steps]]
id = "ok"
command = "true"
[[steps]]
id = "after"
command = "true"
deps = ["a/bad"]
""")
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = {ln.split()[2].rstrip(":"): ln for ln in r.stdout.splitlines() if re.match(r"\[\d/4\]", ln)}
    assert lines["a/bad"].endswith("a/bad: exit status 3 (log in the run directory: steps/a/bad/log)"), r.stdout
    assert lines["slow"].endswith(" (log in the run directory: steps/slow/log)"), r.stdout
    assert "log" not in lines["ok"] and "log" not in lines["after"], r.stdout  # (succeeded; blocked: never ran)
    assert "the reason it failed" in (run_dir / "steps" / "a" / "bad" / "log").read_text()
