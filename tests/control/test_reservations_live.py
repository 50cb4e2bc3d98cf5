"""A live fleet honours a reservation: real coordinator, agents, zygotes and fork on
two local pretend nodes; the order is read from the decisions in events.jsonl."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

import rawpeer as R
from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.wire import events as E

SUITE = """
[suite]
name = "reserve"
run_dir = "run"

[[steps]]
id = "gate"
call = "fleet_steps:nap"
args = { seconds = 0.3 }
priority = 1
estimate = 0.3

[[steps]]
id = "long"
call = "fleet_steps:nap"
args = { seconds = 3.0 }
estimate = 30

# Every core of the fleet, across both nodes, once the gate is through.
[[steps]]
id = "wide"
command = ["true"]
cores = 100000
min_cores = 2
span = true
priority = 1
deps = ["gate"]

# Ends long before the reservation's time: may use the held cores meanwhile.
[[steps]]
id = "quick"
call = "fleet_steps:nap"
args = { seconds = 0.1 }
estimate = 0.5
deps = ["gate"]

# No estimate: may not use the held cores.
[[steps]]
id = "narrow/{i}"
array = "1-3"
call = "fleet_steps:nap"
args = { seconds = 0.1 }
deps = ["gate"]
"""


def starts(run_dir: Path) -> dict[str, float]:
    return {e.step: e.t for e in records(run_dir) if isinstance(e, E.Start)}


def exits(run_dir: Path) -> dict[str, float]:
    return {e.step: e.t for e in records(run_dir) if isinstance(e, E.Exit)}


def test_a_live_fleet_holds_the_cores_for_a_wide_step_and_lets_only_a_short_one_use_them(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = tmp_path / "run"
    st, ex = starts(run_dir), exits(run_dir)
    # The wide step started when `long` released its core, before any narrow step...
    assert ex["long"] <= st["wide"], (st, ex)
    assert all(st["wide"] < st[f"narrow/{i}"] for i in (1, 2, 3)), st
    # ...and the short step ran on the held cores meanwhile, ended before it.
    assert st["quick"] < ex["quick"] <= st["wide"], (st, ex)
    # The narrow steps said what held them back.
    waits = [e for e in records(run_dir) if isinstance(e, E.Wait) and e.step.startswith("narrow/")]
    assert any(w.cause == "reserved" and "reservation for wide" in w.reason for w in waits), waits
    assert_nothing_left(run_dir)


def test_without_reservations_the_narrow_steps_go_first(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    r = fleet("run", str(suite), "--nodes", "2", "--no-reservations", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    st = starts(tmp_path / "run")
    assert any(st[f"narrow/{i}"] < st["wide"] for i in (1, 2, 3)), st
    assert_nothing_left(tmp_path / "run")


def test_fleet_up_passes_reserve_after_to_its_coordinator_which_logs_it(tmp_path):
    r = fleet("up", "--local", "--reserve-after", "90", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    try:
        argv = psutil.Process(R.conn_of(tmp_path).pid).cmdline()
        assert argv[argv.index("--reserve-after") + 1] == "90.0"
        log = (tmp_path / "coordinator.log").read_text()
        assert "reservations after 90 s" in log, log
    finally:
        fleet("down", cwd=tmp_path, timeout=60)
    R.assert_gone(tmp_path)


def crowd(priority: int) -> str:
    """The audit's case, live on one local node: `offset`, then one-core steps ready at
    once and set up before a step that needs every core of the node (sized from this
    machine's CPUs, so that the narrow steps outnumber the cores)."""
    narrow = 12 * max(1, len(os.sched_getaffinity(0)))
    return f"""
[suite]
name = "crowd"
run_dir = "run"

[[steps]]
id = "offset"
call = "fleet_steps:nap"
args = {{ seconds = 0.35 }}
estimate = 0.35
priority = 1

[[steps]]
id = "narrow/{{i}}"
array = "1-{narrow}"
call = "fleet_steps:nap"
args = {{ seconds = 0.4 }}
estimate = 0.4

[[steps]]
id = "wide"
command = ["true"]
cores = 100000
min_cores = 2
span = true
estimate = 1
priority = {priority}
"""


def test_a_live_fleet_reserves_for_a_wide_step_that_one_core_steps_set_up_before_it_keep_passing(tmp_path):
    suite = write_suite(tmp_path / "s.toml", crowd(priority=3))
    r = fleet("run", str(suite), "--nodes", "1", "--reserve-after", "1", cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    st = starts(tmp_path / "run")
    later = [s for s, t in st.items() if s.startswith("narrow/") and t > st["wide"]]
    # Once it has waited a second the next narrow step passes it over and it is reserved;
    # it once started after every narrow step, as without reservations.
    assert len(later) >= len([s for s in st if s.startswith("narrow/")]) // 4, st
    assert_nothing_left(tmp_path / "run")


def test_a_live_fleet_reserves_for_a_wide_step_of_higher_priority_in_its_first_pass(tmp_path):
    suite = write_suite(tmp_path / "s.toml", crowd(priority=1))
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    st = starts(tmp_path / "run")
    # Held for it from the first pass (no narrow step ends before `offset`): it starts as
    # `offset` ends, before any narrow step. It once started after all of them.
    assert all(st["wide"] <= t for s, t in st.items() if s.startswith("narrow/")), st
    assert_nothing_left(tmp_path / "run")
