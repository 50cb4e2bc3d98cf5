"""The window's steps taken back for a reservation (fleet.core.windoworder.reserved) are
not queued again while its step waits with a plan. Its plan is made again as the
nodes' answers come in; it could move to other nodes and back, and the steps on them
with it: taken back, queued again, taken back... with no end. A live coordinator may
hand the scheduler each node's answer in a turn of its own; fed so, one answer a pass,
the scheduler went round for ever on this suite (the simulation never ended; a live
fleet would have sent withdrawals and launches back and forth until a step ended)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fleet.core import simulate as sm
from fleet.core import states as S
from fleet.core.decisions import Exits, GoOn
from fleet.core.graph import build_graph
from fleet.core.scheduler import StepExited, Withdraw
from fleet.core.simulate import pretend_nodes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from distinct_demands import mixed  # noqa: E402  (the suite of the decision comparison)

GiB = 1 << 30
MOST_PASSES = 3000  # a moment's passes, at most: the suite's steps are 800


class GoesRound(Exception):
    pass


def one_answer_a_pass(sched, decisions, now):
    """Each withdrawal answered on its own (as answers that come in turns of their own)."""
    out, passes = [], 0
    while decisions:
        passes += 1
        if passes > MOST_PASSES:
            raise GoesRound(f"{passes} passes at {now}: the window takes back and queues again for ever")
        more = []
        for d in decisions:
            if type(d) is not GoOn:
                out.append(d)
            if type(d) is Withdraw:
                more += sched.handle(StepExited(d.step, d.attempt, S.CANCELLED, "withdrawn before it started"), now)
        if any(type(d) is GoOn for d in decisions):
            more += sched.handle(Exits(()), now)
        decisions = more
    return out


# critical-then-smallest: the plan moved to other nodes and back; setup order: it was
# dropped by one pass and made again by the next (a bar while it had a plan, the first
# fix, did not hold there).
@pytest.mark.parametrize("order", ["critical-then-smallest", "setup"])
def test_steps_taken_back_for_a_reservation_are_not_queued_again_while_its_step_waits(monkeypatch, order):
    monkeypatch.setattr(sm, "_whole", one_answer_a_pass)
    steps = mixed(800, 9)
    graph, _ = build_graph(steps)
    result = sm.simulate(steps, graph, pretend_nodes(6, 64, 192 * GiB, 4), window=None, reserve_after=30.0,
                         order=order)
    assert len(result.steps) + len(result.unrunnable) + len(result.blocked) == len(steps)
