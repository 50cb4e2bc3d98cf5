"""A live fleet orders ready steps of equal priority as `--order` says (fleet.core.ranks):
real coordinator, agent, zygote and fork on one local pretend node, each step taking
the whole node so they run one at a time; the order is read from events.jsonl."""

from __future__ import annotations

import pytest
from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.node.probe import usable_cores
from fleet.wire import events as E

# "short" comes first in setup order; "head" leads a chain expected to take 101 s.
SUITE = """
[suite]
name = "ranks"
run_dir = "run"

[[steps]]
id = "short"
command = ["true"]
cores = 100000
min_cores = 1
estimate = 5

[[steps]]
id = "head"
command = ["true"]
cores = 100000
min_cores = 1
estimate = 1

[[steps]]
id = "tail"
command = ["true"]
cores = 100000
min_cores = 1
estimate = 100
deps = ["head"]
"""


def started(tmp_path, *order: str) -> list[str]:
    suite = write_suite(tmp_path / "s.toml", SUITE)
    # With the default node window: a running step whose dependent comes first in the
    # order takes no step behind it, so the dependent still overtakes (fleet.core.windowpick).
    r = fleet("run", str(suite), "--nodes", "1", *order, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    st = sorted((e.t, e.step) for e in records(tmp_path / "run") if isinstance(e, E.Start))
    assert_nothing_left(tmp_path / "run")
    return [sid for _, sid in st]


def test_a_live_fleet_with_critical_path_order_runs_the_longer_chain_first(tmp_path):
    assert started(tmp_path, "--order", "critical-path") == ["head", "tail", "short"]
    logs = list(tmp_path.rglob("coordinator.log"))
    assert logs and "order critical-path" in logs[0].read_text()


def test_a_live_fleet_keeps_setup_order_by_default(tmp_path):
    assert started(tmp_path) == ["short", "head", "tail"]


# "long" (the critical chain) holds one core for 15 s; twelve one-core spanning steps
# expected to take 4 s each (they end at once) are ready with it. defer-widest holds one
# of them, w0, their median 4 s: nothing else ends then, so only its own timer starts it.
HELD = """
[suite]
name = "held"
run_dir = "run"

[[steps]]
id = "long"
command = ["sleep", "15"]
estimate = 1000

[[steps]]
id = "w{i}"
array = "0-11"
command = ["true"]
span = true
estimate = 4
"""


@pytest.mark.skipif(len(usable_cores()) < 2, reason="needs two usable cores")
def test_a_live_fleet_starts_a_held_wide_step_when_its_hold_ends_not_when_the_next_step_does(tmp_path):
    suite = write_suite(tmp_path / "s.toml", HELD)
    r = fleet("run", str(suite), "--nodes", "1", "--order", "defer-widest", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(tmp_path / "run")
    (held,) = [e for e in recs if isinstance(e, E.Wait) and e.step == "w0"]
    assert held.reason.startswith("deferred for 4 s from when it became ready"), held.reason
    (start,) = [e.t for e in recs if isinstance(e, E.Start) and e.step == "w0"]
    (long_end,) = [e.t for e in recs if isinstance(e, E.Exit) and e.step == "long"]
    assert held.t + 4.0 <= start < long_end  # (before 2026-12-06 it started as "long" ended: none ended between)
    assert_nothing_left(tmp_path / "run")
