"""Outputs that fleet's own files or another step's output stand in the way of, through
the real `fleet` command: refused before anything starts (exit 2), each naming file,
step and field. Before 2026-12-07 both passed `fleet validate`: a step overwrote the
run's events.jsonl, or one of two steps failed when it ran."""

from __future__ import annotations

from fleetharness import fleet, write_suite

SUITE = """
[suite]
name = "clash"
[[steps]]
id = "a"
command = "echo a > ../../d"
outputs = ["d"]
[[steps]]
id = "b"
command = "echo b > ../../d/x"
outputs = ["d/x"]
deps = ["a"]
[[steps]]
id = "c"
command = "echo junk > ../../events.jsonl"
outputs = ["events.jsonl"]
"""

SAID = [
    "error: s.toml: step 'b': field 'outputs': 'd/x' is inside 'd', an output of step 'a': an output is a file, "
    "so no other step's path can be inside it",
    "error: s.toml: step 'c': field 'outputs': may not be events.jsonl: fleet writes its own files at the top of "
    "the run directory (events.jsonl, coordinator.log, fleet.json and fleet-*.json, shards.json, agents/), "
    "got 'events.jsonl'",
    "2 problems found; nothing was started"]


def test_fleet_validate_and_fleet_run_refuse_an_output_inside_another_and_one_on_fleets_events(tmp_path):
    write_suite(tmp_path / "s.toml", SUITE)
    r = fleet("validate", "s.toml", cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == SAID, r.stderr
    r = fleet("run", "s.toml", "--nodes", "2", cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.replace(f"{tmp_path}/", "").strip().splitlines()[-3:] == SAID, r.stderr  # (it names the file whole)
    assert not (tmp_path / "runs").exists(), "nothing may start, not even the run directory"
