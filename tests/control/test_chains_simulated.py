"""Chains in the node window (`--window-depth`, fleet.core.windowchain) through a real
coordinator process and the control-plane benchmark's simulated agents, which keep a
chain as a zygote does (a launch held behind a held one starts when that one has run):
what benchmarks/chain_scale.py measures at 1,000 agents, checked here at 4."""

from __future__ import annotations

import json

from fleetharness import assert_nothing_left, control_scale, records

from fleet.wire import events as E

AGENTS, STEPS, DEPTH = 4, 3000, 8  # 256 cores: a chain of 8 behind each, more than the steps


def test_steps_chained_behind_queued_steps_start_after_them_and_each_runs_once(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out.json"
    cp = control_scale(work, AGENTS, STEPS, args=("--duration", "0.05", "--out", str(out)),
                       environ={"FLEET_SIM_WINDOW": "cores", "FLEET_SIM_WINDOW_DEPTH": str(DEPTH)})
    assert cp.returncode == 0, f"stdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    seen = json.loads(out.read_text())["agents_seen"]
    # A launch comes twice only after its node dropped it unstarted (withdrawn at the run's
    # tail, fleet.core.windowback: its attempt unused); each step starts once (below).
    assert seen["launches"] == STEPS + seen["duplicate_launches"], seen
    assert seen["duplicate_launches"] <= seen.get("dropped", 0), seen
    recs = records(work / "run")
    everyone = sorted(f"s/{i}" for i in range(1, STEPS + 1))
    assert sorted(r.step for r in recs if isinstance(r, E.Started)) == everyone
    exits = [r for r in recs if isinstance(r, E.Exit)]
    assert len(exits) == STEPS and {r.outcome for r in exits} == {"succeeded"}
    # A step queued behind one that was itself still queued when it was handed over (its
    # `start`, the pass that began it, came later): a chain. Each started only after the
    # one it waited for ended.
    began = {r.step: i for i, r in enumerate(recs) if isinstance(r, E.Start)}
    started = {r.step: i for i, r in enumerate(recs) if isinstance(r, E.Started)}
    ended = {r.step: i for i, r in enumerate(recs) if isinstance(r, E.Exit)}
    queued = [(i, r) for i, r in enumerate(recs) if isinstance(r, E.Queued) and r.after]
    chained = [r for i, r in queued if began[r.after] > i]
    assert len(chained) > STEPS / 4, f"{len(chained)} of {len(queued)} queued steps went behind a queued one"
    assert seen["held_behind_held"] > 0, seen
    late = [r.step for _, r in queued if started[r.step] < ended[r.after]]
    assert not late, f"started before the step they waited for ended: {late[:5]}"
    assert_nothing_left(work / "run")
