"""Clocks that disagree, through real processes: a node's agent whose wall clock is an hour
off from the coordinator's (the coordinator measures it from heartbeats,
fleet.control.nodeclock), and a host whose clock steps under a running fleet (status's
ages on the coordinator's monotonic clock, fleet.control.wallsteps). The clocks are
moved by tests/harness/clockshim (time.time() only; the monotonic clock is the true one)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from fleetharness import assert_nothing_left, finish, fleet, records, spawn, wait_for, write_suite

from fleet.wire import events as E

SHIM = Path(__file__).parents[1] / "harness" / "clockshim"
HOUR = 3600.0


def _shimmed(monkeypatch, **env: str) -> None:
    """Every fleet process the test starts loads the shim, with `env` (CLOCKSHIM_*)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SHIM), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def _suite(tmp_path: Path, run_dir: Path, steps: str) -> Path:
    return write_suite(tmp_path / "s.toml", f"""
[suite]
name = "clocks"
run_dir = "{run_dir}"

[defaults]
timeout = 120
cores = 1
{steps}""")


def _report(run_dir: Path, tmp_path: Path) -> str:
    r = fleet("report", str(run_dir), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_a_node_an_hour_ahead_gives_its_true_startups_and_the_report_names_its_clock_once(tmp_path, monkeypatch):
    _shimmed(monkeypatch, CLOCKSHIM_NODE="node2", CLOCKSHIM_S=str(HOUR))
    run_dir = tmp_path / "run"
    suite = _suite(tmp_path, run_dir, """
[[steps]]
id = "s/{i}"
array = "1-6"
command = ["sleep", "0.3"]
""")
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(run_dir)
    exits = [x for x in recs if isinstance(x, E.Exit)]
    assert len(exits) == 6 and {x.outcome for x in exits} == {"succeeded"}
    assert {x.node for x in exits} == {"node1", "node2"}, [(x.step, x.node) for x in exits]
    # Before: node2's first steps started "1.00 h" after their decision.
    assert all(0.0 <= x.startup_s < 60.0 for x in exits), [(x.step, x.node, x.startup_s) for x in exits]
    clocks = [x for x in recs if isinstance(x, E.NodeClock)]  # (a closer estimate may follow the first)
    assert clocks and {x.node for x in clocks} == {"node2"} and all(x.used for x in clocks), clocks
    assert all(abs(x.ahead_s - HOUR) < 60.0 for x in clocks), clocks
    text = _report(run_dir, tmp_path)
    assert "1.00 h" not in text, text  # (before: "startup 1.00 h total", "with startup the chain is 1.00 h")
    assert len(re.findall(r"node2 (3599\.9|3600\.0)\d* s ahead", text)) == 1, text
    assert "began their work before" not in text, text
    assert_nothing_left(run_dir)


def test_a_node_an_hour_behind_raises_no_behind_alarm_and_no_clamped_startup(tmp_path, monkeypatch):
    _shimmed(monkeypatch, CLOCKSHIM_NODE="node1", CLOCKSHIM_S=str(-HOUR))
    run_dir = tmp_path / "run"
    suite = _suite(tmp_path, run_dir, """
[[steps]]
id = "quick"
command = ["true"]

[[steps]]
id = "long"
command = ["sleep", "60"]
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=90)
    p = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        def status() -> dict | None:
            r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
            st = json.loads(r.stdout) if r.returncode == 0 else {}
            # (the quick step's end read: the last report, and within REPORT_FRESH_S)
            return st if st.get("counts", {}).get("succeeded") and st.get("loop", {}).get("report_age_s") is not None \
                else None
        st = wait_for(status, timeout=60, what="the quick step's end read")
        # Before: "BEHIND: the last step end read came 3600.0s after the step ended on its node".
        assert st["loop"]["report_age_s"] < 60.0, st["loop"]
        r = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0 and "BEHIND" not in r.stdout, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        finish(p, timeout=60)
    recs = records(run_dir)
    quick = [x for x in recs if isinstance(x, E.Exit) and x.step == "quick"]
    assert len(quick) == 1 and quick[0].outcome == "succeeded" and quick[0].node == "node1"
    clocks = [x for x in recs if isinstance(x, E.NodeClock)]
    assert clocks and all(x.used and abs(x.ahead_s + HOUR) < 60.0 for x in clocks), clocks
    text = _report(run_dir, tmp_path)
    assert "began their work before" not in text and re.search(r"node1 (3599\.9|3600\.0)\d* s behind", text), text
    assert_nothing_left(run_dir)


def test_status_shows_uptime_and_running_ages_by_the_monotonic_clock_across_a_step_of_the_hosts_clock(
        tmp_path, monkeypatch):
    skew = tmp_path / "skew"
    skew.write_text("0")
    _shimmed(monkeypatch, CLOCKSHIM_FILE=str(skew))
    run_dir = tmp_path / "run"
    suite = _suite(tmp_path, run_dir, """
[[steps]]
id = "long"
command = ["sleep", "60"]
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--heartbeat", "0.2", cwd=tmp_path, check=True,
          timeout=90)
    p = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        def status() -> dict:
            r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
            return json.loads(r.stdout) if r.returncode == 0 else {}
        wait_for(lambda: status().get("running"), timeout=60, what="the step running")
        skew.write_text(str(2 * HOUR))  # the whole host's wall clock, two hours on
        # (each coordinator beat looks at its clocks: the step is seen within one)
        st = wait_for(lambda: (s := status()) and s["running"] and s["running"][0]["elapsed_s"] < 60 and s,
                      timeout=30, what="a running age under a minute")
        assert st.get("up_s", HOUR) < 120.0, st
        r = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        # Before: "up 2h00m" and the step at 2h00m, seconds after they began.
        assert r.returncode == 0 and "2h" not in r.stdout, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        finish(p, timeout=60)
    assert_nothing_left(run_dir)
