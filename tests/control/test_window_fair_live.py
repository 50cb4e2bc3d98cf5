"""The node window keeps the order across demands through the real CLI
(fleet.core.windowfair): a ready step of one demand (a `memory` figure) that comes
before steps of another demand is not passed by them for good as the node's cores go
from one of those to the next (the reportscale audit's finding 4, small). Order only,
read from events.jsonl; nothing is left running after."""

from __future__ import annotations

import os

import pytest
from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.wire import events as E

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


def half() -> int:
    """Cores for a step so that two fill `fleet run --nodes 1` (a 2-core node's shape)."""
    return len(os.sched_getaffinity(0)) // 2


@pytest.mark.skipif(half() < 1, reason="needs two usable cores")
def test_a_ready_step_with_a_memory_figure_starts_before_the_later_steps_the_node_hands_its_cores_to(tmp_path):
    # X and L are one demand (half the node, default memory), O another (64 MiB); in
    # setup order X1-X4, O1-O2, L1-L6. X3 and X4 are handed ahead behind X1 and X2. Before,
    # L1 then went behind X3, L2 behind X4, and so on: the cores never came back to the
    # pool and O1, O2 started only after the last L had begun.
    tag = str(tmp_path)
    text = '[suite]\nname = "fair"\nrun_dir = "run"\n'
    for body in ('id = "X{i}"\narray = "1-4"', 'id = "O{i}"\narray = "1-2"\nmemory = "64MiB"',
                 'id = "L{i}"\narray = "1-6"'):
        text += f'[[steps]]\n{body}\ncommand = "sleep 2 # {tag}"\nestimate = 2\ncores = {half()}\n'
    write_suite(tmp_path / "s.toml", text)
    r = fleet("run", "s.toml", "--nodes", "1", *HB, cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(tmp_path / "run")
    assert any(isinstance(e, E.Queued) and e.step.startswith("X") for e in recs)  # the window was used
    order = [e.step for e in recs if isinstance(e, E.Start)]
    assert order.index("O1") < order.index("L1"), order
    assert order.index("O2") < order.index("L3"), order  # (behind O1, its own demand: the window's commitment)
    assert_nothing_left(tmp_path / "run", tag)
