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
