"""A node's window (fleet.core.window) on a run directory several fleets share, through
real `fleet run` processes: a step's `start` record means it ran here. A fleet that
starts a step another fleet holds (its claim refused: `elsewhere`) hands the step queued
behind it the cores at once; when that one's claim was refused too, its launch never
went to the node, and its `start` must not be written (before 2026-12-06 it was, with no
`exit` ever following: `fleet report` counted it running)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, wait_for, write_suite
from fleetharness import records as event_records

from fleet.wire import events as E


def suite_of(tmp_path: Path) -> Path:
    return write_suite(tmp_path / "s.toml", """
[suite]
name = "phantoms"
run_dir = "run"
[[steps]]
id = "x/{i}"
array = "0-119"
call = "fleet_steps:once"
args = { seconds = 0.05 }
[[steps]]
id = "y/{i}"
array = "0-29"
call = "fleet_steps:once"
args = { seconds = 0.05 }
deps = ["x/{i}", "x/119"]
""")


def test_fleets_sharing_a_run_directory_write_a_start_only_for_a_step_they_ran_and_each_step_runs_once(
        tmp_path, started):
    steps = [f"x/{i}" for i in range(120)] + [f"y/{i}" for i in range(30)]
    suite, run_dir = suite_of(tmp_path), tmp_path / "run"
    fleets = [started("run", str(suite), "--nodes", "1")]
    for n in (2, 3):  # each joins while the others run (as `fleet run` started a moment apart)
        wait_for(lambda: len([e for e in event_records(run_dir) if isinstance(e, E.FleetStarting)]) >= n - 1,
                 60, f"fleet {n - 1} to start")
        fleets.append(started("run", str(suite), "--nodes", "1"))
    outs = [p.communicate(timeout=150) for p in fleets]
    assert [p.returncode for p in fleets] == [0, 0, 0], outs
    recs = event_records(run_dir)
    assert len({e.fleet for e in recs if isinstance(e, E.FleetStarting)}) == 3
    # Every `start` has its `exit` (same fleet, step, attempt), and the other way round.
    starts = Counter((e.fleet, e.step, e.attempt) for e in recs if isinstance(e, E.Start))
    exits = Counter((e.fleet, e.step, e.attempt) for e in recs if isinstance(e, E.Exit))
    assert set(starts.values()) == {1}, [k for k, v in starts.items() if v > 1]
    assert set(starts) == set(exits), {"start without exit": sorted(set(starts) - set(exits))[:10],
                                       "exit without start": sorted(set(exits) - set(starts))[:10]}
    # Each step ran exactly once, here or in another fleet (its own evidence).
    lines = [line.split() for line in (run_dir / "evidence.txt").read_text().splitlines()]
    assert not [f for f in lines if f[0].startswith("overlap")]
    ran = Counter(f[1] for f in lines if f[0] == "start")
    assert ran == Counter(steps), {s: ran[s] for s in set(steps) | set(ran) if ran[s] != 1}
    assert sum(starts.values()) == len(steps)  # one `start` per step, in the fleet that ran it
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["ok"] and set(v["status"] for v in a["steps"].values()) == {"succeeded"}
    assert_nothing_left(run_dir)
