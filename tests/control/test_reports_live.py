"""The per-step message path through real processes (`fleet up`, real agents, zygotes and
forked steps): the reports decoded by generated functions (fleet.wire.shapefast), the
Launch built as its fields (fleet.control.launching), heartbeats encoded once per round
(fleet.control.liveness), views filled directly (fleet.core.viewfill). Many short steps,
each run once, with what the agents reported recorded as they reported it."""

from __future__ import annotations

from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.wire import events as E

STEPS = 300


def test_many_short_steps_run_each_once_with_their_reports_recorded_as_sent_and_no_node_lost(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "reports"
run_dir = "{run_dir}"

[[steps]]
id = "s/{{i}}"
array = "1-{STEPS}"
command = ["true"]
cores = 1
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", "--heartbeat", "0.2", "--heartbeat-timeout", "30",
          cwd=tmp_path, check=True)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    recs = records(run_dir)
    want = {f"s/{i}" for i in range(1, STEPS + 1)}
    starts = [r for r in recs if isinstance(r, E.Start)]
    started = [r for r in recs if isinstance(r, E.Started)]
    exits = [r for r in recs if isinstance(r, E.Exit)]
    for kind in (starts, started, exits):
        assert sorted(r.step for r in kind) == sorted(want), type(kind[0]).__name__  # each once
    assert {r.outcome for r in exits} == {"succeeded"}
    start_of = {r.step: r for r in starts}
    for r in exits:  # the exit's figures are the agent's, its cores the step's placement
        s = start_of[r.step]
        assert r.attempt == s.attempt == 1 and r.node == s.node and r.cores == s.cores and len(r.cores) == 1
        assert r.returncode == 0 and r.decided_at <= r.first_at <= r.ended_at and r.work_s >= 0
    for r in started:
        assert r.pid > 0 and r.node == start_of[r.step].node
    assert not [r for r in recs if isinstance(r, E.NodeLost)]
    assert_nothing_left(run_dir)
