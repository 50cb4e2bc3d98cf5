"""A bounded scheduling pass through real processes: the coordinator feeds the rest of
a pass that stopped at its bound (fleet.core.decisions.GoOn) in its next turn, so the
steps it could not start in the first part still start at once, not at the next exit."""

from __future__ import annotations

from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.wire import events as E


def test_a_pass_bounded_to_one_start_still_starts_a_step_on_each_node_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_TEST_PASS_STARTS", "1")
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "bounded"
run_dir = "{run_dir}"

[[steps]]
id = "s/{{i}}"
array = "1-6"
command = ["sleep", "1"]
cores = 1
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(run_dir)
    start = {x.step: x for x in recs if isinstance(x, E.Start)}
    end = {x.step: x.t for x in recs if isinstance(x, E.Exit)}
    assert sorted(start) == sorted(end) == sorted(f"s/{i}" for i in range(1, 7))  # each once
    first, second = sorted(start.values(), key=lambda x: x.t)[:2]
    assert first.node != second.node
    assert second.t < end[first.step], (second.t, end[first.step])  # on the other node meanwhile
    assert_nothing_left(run_dir)
