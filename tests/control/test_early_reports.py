"""Reports of steps handed ahead that the coordinator reads before the pass that runs
them (fleet.control.early) wait for the turn's one pass: they neither force a pass of
their own nor get lost. Driven through a real coordinator process by the simulated
agents of the control-plane benchmark, which keep a node's window as a zygote does
(FLEET_SIM_WINDOW): a queued launch starts the moment its predecessor ends, and the
agent reports that Exited and the new Started in one batch."""

from __future__ import annotations

from collections import Counter

from fleetharness import assert_nothing_left, control_scale, records

from fleet.wire import events as E

AGENTS, STEPS = 2, 1200  # 128 cores and a window of 128: most steps are handed ahead


def test_queued_steps_whose_reports_came_early_begin_in_shared_passes_and_each_runs_once(tmp_path):
    work = tmp_path / "work"
    cp = control_scale(work, AGENTS, STEPS, args=("--duration", "0.3"), environ={"FLEET_SIM_WINDOW": "cores"})
    assert cp.returncode == 0, f"stdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    recs = records(work / "run")
    queued = {r.step for r in recs if isinstance(r, E.Queued)}
    starts = [r for r in recs if isinstance(r, E.Start)]
    started = [r for r in recs if isinstance(r, E.Started)]
    exits = [r for r in recs if isinstance(r, E.Exit)]
    everyone = sorted(f"s/{i}" for i in range(1, STEPS + 1))
    assert sorted(r.step for r in starts) == everyone
    assert sorted(r.step for r in started) == everyone
    assert len(exits) == STEPS and {r.outcome for r in exits} == {"succeeded"}
    assert len(queued) > STEPS / 2, f"only {len(queued)} of {STEPS} steps were handed ahead"

    # A queued step runs from the pass that hands the scheduler its predecessor's exit
    # (its `start` record has that pass's time). Each agent's batch of Exited and Started
    # forced a pass of its own before, one per early report: the times were all apart.
    begun = Counter(r.t for r in starts if r.step in queued)
    assert len(begun) < sum(begun.values()) / 4, f"{sum(begun.values())} queued steps began in {len(begun)} passes"
    # Each step's `started` follows its `start` (a held report is not handed before).
    at = {r.step: i for i, r in enumerate(recs) if isinstance(r, E.Start)}
    assert all(at[r.step] < i for i, r in enumerate(recs) if isinstance(r, E.Started))
    assert_nothing_left(work / "run")
