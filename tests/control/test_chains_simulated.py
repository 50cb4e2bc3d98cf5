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
    # Except a step taken back unstarted at the run's tail (cores came free elsewhere
    # first: fleet.core.windowback): it starts elsewhere, waiting for nothing (seen once in a
    # loaded CI rehearsal: s/2945, Unqueued from behind s/2689 and started on another node
    # before s/2689 ended). Where it was Started is checked against where it was last sent.
    unqueued = {r.step: i for i, r in enumerate(recs) if isinstance(r, E.Unqueued)}
    stayed = [r for i, r in queued if unqueued.get(r.step, -1) < i]
    late = [r.step for r in stayed if started[r.step] < ended[r.after]]
    assert not late, f"started before the step they waited for ended: {late[:5]}"
    last_node = {r.step: r.node for r in recs if isinstance(r, E.Start)}
    assert all(r.node == last_node[r.step] for r in recs if isinstance(r, E.Started)), "started where not sent"
    assert_nothing_left(work / "run")
