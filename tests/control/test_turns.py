"""A loop turn's exits reach the scheduler together (fleet.control.turns): one
scheduling pass places what they freed, so the starts it decides share that pass's
time. Driven through a real coordinator process by the simulated agents of the
control-plane benchmark (each step ends the moment it starts)."""

from __future__ import annotations

from collections import Counter

from fleetharness import assert_nothing_left, control_scale, records

from fleet.wire import events as E

AGENTS, STEPS = 2, 1000  # 128 cores: every start after the first pass is made by exits


def test_the_starts_that_a_turns_exits_make_room_for_are_decided_in_one_pass_each_step_once(tmp_path):
    work = tmp_path / "work"
    cp = control_scale(work, AGENTS, STEPS)
    assert cp.returncode == 0, f"stdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    recs = records(work / "run")
    starts = [r for r in recs if isinstance(r, E.Start)]
    exits = [r for r in recs if isinstance(r, E.Exit)]
    assert sorted(r.step for r in starts) == sorted(f"s/{i}" for i in range(1, STEPS + 1))
    assert len(exits) == STEPS and {r.outcome for r in exits} == {"succeeded"}

    # The submission's pass starts the first 128; each later start follows exits. Decided
    # one pass per exit, each had its own exit's time; one pass per turn, they share it.
    first = starts[0].t
    later = Counter(r.t for r in starts if r.t != first)
    assert sum(later.values()) >= STEPS - 2 * 64
    assert len(later) < sum(later.values()) / 2, f"{sum(later.values())} starts in {len(later)} passes"
    assert max(later.values()) > 1
    assert_nothing_left(work / "run")
