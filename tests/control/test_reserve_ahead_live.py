"""`fleet run --reserve-ahead N` reaches the live coordinator (fleet.core.lookahead):
real coordinator, agent, zygote and fork on one local pretend node."""

from __future__ import annotations

from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.wire import events as E

SUITE = """
[suite]
name = "ahead"
run_dir = "run"

[[steps]]
id = "setup"
command = ["true"]
estimate = 1

[[steps]]
id = "wide"
command = ["true"]
cores = 100000
min_cores = 1
estimate = 1
deps = ["setup"]
"""


def test_a_live_fleet_takes_reserve_ahead_and_says_so_in_its_settings(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    r = fleet("run", str(suite), "--nodes", "1", "--reserve-ahead", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {e.step for e in records(tmp_path / "run") if isinstance(e, E.Start)} == {"setup", "wide"}
    assert_nothing_left(tmp_path / "run")
    logs = list(tmp_path.rglob("coordinator.log"))
    assert logs and "(2 planned ahead)" in logs[0].read_text()
