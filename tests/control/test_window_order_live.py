"""The node window keeps the pass's order through the real CLI (fleet.core.windoworder,
fleet.node.queued): a step that comes first (priority 1) and becomes ready after steps
that come after it were handed to the node ahead of time still starts before them, as
with `--window 0`. Order only, read from events.jsonl; nothing is left running after."""

from __future__ import annotations

import os

import pytest
from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.wire import events as E

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


def half() -> int:
    """Cores for a step so that two fill `fleet run --nodes 1` (a 2-core node's shape)."""
    return len(os.sched_getaffinity(0)) // 2


def suite(tag: str, *specs: str) -> str:
    """A suite of `specs` (TOML [[steps]] bodies), each taking half of the node."""
    text = '[suite]\nname = "order"\nrun_dir = "run"\n'
    for body in specs:
        text += f"[[steps]]\n{body}\ncores = {half()}\n"
    return text.replace("#TAG", f"# {tag}")


def starts(recs: list) -> list[str]:
    return [e.step for e in recs if isinstance(e, E.Start)]


@pytest.mark.skipif(half() < 1, reason="needs two usable cores")
def test_a_priority_1_step_that_becomes_ready_starts_before_the_lower_priority_steps_handed_ahead(tmp_path):
    # The audit's s11: S1 and S2 fill the node, priority-5 L steps are handed to it
    # behind them; H (priority 1) waits for both. Without taking back, H waited for L2
    # (queued behind S2, started by the node as S2 ended) and L3 (queued behind L1).
    tag = str(tmp_path)
    write_suite(tmp_path / "s.toml", suite(
        tag, 'id = "S1"\ncommand = "sleep 1 #TAG"\nestimate = 1',
        'id = "S2"\ncommand = "sleep 3 #TAG"\nestimate = 3',
        'id = "H"\ncommand = "sleep 1 #TAG"\nestimate = 1\npriority = 1\ndeps = ["S1", "S2"]',
        'id = "L{i}"\narray = "1-4"\ncommand = "sleep 4 #TAG"\nestimate = 4\npriority = 5'))
    r = fleet("run", "s.toml", "--nodes", "1", *HB, cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(tmp_path / "run")
    assert any(isinstance(e, E.Queued) and e.step.startswith("L") for e in recs)  # the window was used
    ready = max(i for i, e in enumerate(recs) if isinstance(e, E.Exit) and e.step in ("S1", "S2"))
    later = [e.step for e in recs[ready:] if isinstance(e, E.Start) and e.step.startswith("L")]
    order = starts(recs)
    assert later and all(order.index("H") < order.index(s) for s in later), order
    assert_nothing_left(tmp_path / "run", tag)


@pytest.mark.skipif(half() < 1, reason="needs two usable cores")
def test_a_step_going_on_to_its_next_stage_runs_it_before_the_step_queued_behind_it(tmp_path):
    # The audit's s19: P takes the node and goes on to stage "two" after a second; Q1..Q3
    # take the node too, Q1 handed to it behind P. Its node started Q1 the moment it
    # reaped P's first stage, before P's next one; now it drops Q1 (ready again, its
    # attempt unused) and P's next stage runs first, as `fleet.Next` says ("at once").
    tag = str(tmp_path)
    stage = 'if [ -z \\"$FLEET_STAGE\\" ]; then sleep 1; echo two > \\"$FLEET_NEXT_STAGE\\"; exit 2; fi; sleep 1 #TAG'
    write_suite(tmp_path / "s.toml", suite(
        tag, f'id = "P"\ncommand = "{stage}"\nprotocol = "steps"\nestimate = 1\ncores = {2 * half()}',
        f'id = "Q{{i}}"\narray = "1-3"\ncommand = "sleep 1 #TAG"\nestimate = 1\ncores = {2 * half()}')
        .replace(f"\ncores = {half()}\n", "\n"))
    r = fleet("run", "s.toml", "--nodes", "1", *HB, cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(tmp_path / "run")
    assert [(e.step, e.after) for e in recs if isinstance(e, E.Queued)][:1] == [("Q1", "P")]  # the window was used
    assert starts(recs)[:3] == ["P", "P", "Q1"], starts(recs)
    assert [(e.step, e.outcome, e.attempt) for e in recs if isinstance(e, E.Exit) and e.step == "Q1"] == [
        ("Q1", "succeeded", 1)]
    assert_nothing_left(tmp_path / "run", tag)
