"""The control-plane load generator (benchmarks/control_scale.py with _simagents.py) at
a tiny size, against a real coordinator process: what it drives really happens, once."""

from __future__ import annotations

import json

from fleetharness import assert_nothing_left, control_scale, records

from fleet.wire import events as E

AGENTS, STEPS = 20, 200


def test_simulated_agents_run_every_step_of_a_suite_exactly_once_and_leave_no_process(tmp_path):
    work = tmp_path / "work"
    cp = control_scale(work, AGENTS, STEPS)
    assert cp.returncode == 0, f"stdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    run_dir = work / "run"
    recs = records(run_dir)

    joined = {r.node for r in recs if isinstance(r, E.NodeJoined)}
    assert len(joined) == AGENTS
    assert any(isinstance(r, E.FleetUp) for r in recs)
    starts: dict[str, int] = {}
    succeeded: dict[str, int] = {}
    for r in recs:
        if isinstance(r, E.Start):
            starts[r.step] = starts.get(r.step, 0) + 1
        elif isinstance(r, E.Exit):
            assert r.outcome == "succeeded", r
            succeeded[r.step] = succeeded.get(r.step, 0) + 1
    expected = {f"s/{i}" for i in range(1, STEPS + 1)}
    assert set(starts) == expected and set(starts.values()) == {1}
    assert set(succeeded) == expected and set(succeeded.values()) == {1}
    assert any(isinstance(r, E.FleetDown) for r in recs)

    # The load generator saw each Launch once, and its figures were computed from them.
    seen = json.loads((work / "agents0.json").read_text())
    assert seen["welcomed"] == AGENTS and seen["launches"] == STEPS and seen["duplicate_launches"] == 0
    result = json.loads(cp.stdout)
    assert result["events"]["each_step_once"] is True
    assert result["agents_seen"]["decision_to_agent"]["n"] == STEPS
    assert result["coordinator_cpu_us_per_step"] > 0 and result["join_s"] >= 0

    # Coordinator (fleet_starting) and load generator (node_joined) are gone.
    assert_nothing_left(run_dir)


def test_simulated_agents_hold_their_reports_as_real_agents_do_and_lose_none(tmp_path):
    work = tmp_path / "work"
    hold = 0.5
    # Steps of 0.2 s: an agent's second report comes before the hold after its first has passed.
    cp = control_scale(work, AGENTS, STEPS, args=("--duration", "0.2"),
                       environ={"FLEET_SIM_REPORT_HOLD": str(hold), "FLEET_SIM_WINDOW": "cores"})
    assert cp.returncode == 0, f"stdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    assert json.loads(cp.stdout)["events"]["each_step_once"] is True
    exits = [r for r in records(work / "run") if isinstance(r, E.Exit)]
    assert len(exits) == STEPS and {r.outcome for r in exits} == {"succeeded"}
    # An agent's first reports went at once; its exits, 0.2 s later, waited for the hold.
    assert max(r.t - r.ended_at for r in exits) >= hold / 2
    assert_nothing_left(work / "run")
