"""Steps whose demands all differ (each its own class of demand, by its memory): a pass
looks at the classes that something freed could start, not at every class waiting, and
decides exactly what looking at every class decided (fleet.core.quiet)."""

from __future__ import annotations

import pytest

from fleet.core import resources
from fleet.core.graph import build_graph
from fleet.core.quiet import Quiet
from fleet.core.reservations import Reservations
from fleet.core.scheduler import NodeJoined, Scheduler, Start, StepExited, submission
from fleet.core.simulate import pretend_nodes, simulate
from fleet.core.suite import StepSpec

GiB, MiB = 2**30, 2**20


def distinct(n: int):
    return [StepSpec(id=f"s{i}", order=i, command="true", estimate=1 + i % 7, memory=(1000 + i) * MiB)
            for i in range(n)]


def work_per_pass(n: int, monkeypatch, exits: int = 40) -> tuple[int, int]:
    """The most fit checks and classes tried in one pass after a step ends, with n
    steps of distinct memory on a full allocation (16 cores)."""
    count = {"fits": 0, "tried": 0}
    fits, place = resources._Node.fits, Reservations.place

    def counted_fits(self, d):
        count["fits"] += 1
        return fits(self, d)

    def counted_place(self, *a, **kw):
        count["tried"] += 1
        return place(self, *a, **kw)

    monkeypatch.setattr(resources._Node, "fits", counted_fits)
    monkeypatch.setattr(Reservations, "place", counted_place)
    sched = Scheduler()
    for spec in pretend_nodes(2, 8, 64 * GiB):
        sched.handle(NodeJoined(spec), 0.0)
    running = [d.step for d in sched.handle(submission(distinct(n)), 0.0) if isinstance(d, Start)]
    assert len(running) == 16 and sched.counts()["ready"] == n - 16  # full: the rest wait
    most = [0, 0]
    for t in range(1, exits + 1):
        count["fits"] = count["tried"] = 0
        got = sched.handle(StepExited(running.pop(0), 1, "succeeded"), float(t))
        running += [d.step for d in got if isinstance(d, Start)]
        assert len(running) == 16  # the freed core went to the next step
        most = [max(most[0], count["fits"]), max(most[1], count["tried"])]
    return most[0], most[1]


def test_a_pass_after_a_step_ends_costs_the_same_with_twice_as_many_distinct_demands_waiting(monkeypatch):
    fits_300, tried_300 = work_per_pass(300, monkeypatch)
    fits_600, tried_600 = work_per_pass(600, monkeypatch)
    # The class that starts is the one tried; before, every waiting class was (284, 584).
    assert tried_300 <= 2 and tried_600 <= 2
    assert fits_300 <= 12 and fits_600 <= 12


def mixed(n: int):
    """Mixed cores, memory, GPUs, spanning MPI steps, priorities and dependencies."""
    import random
    rng = random.Random(5)
    out = []
    for i in range(n):
        kw: dict = {"estimate": rng.choice((None, 1.0, 3.0, 20.0, round(rng.uniform(1, 60), 1)))}
        r = rng.random()
        if r < 0.06:
            kw.update(cores=16, min_cores=16, span=True, mpi=True, threads=2, ranks=8, min_ranks=8)
        elif r < 0.15:
            kw.update(gpus=rng.choice((1, 2)), memory=rng.choice((None, 4 * GiB)))
        else:
            kw.update(cores=rng.choice((1, 1, 2, 4)), memory=rng.choice((None, (500 + i) * MiB)))
        if i and rng.random() < 0.3:
            kw["deps"] = (f"m{rng.randrange(max(0, i - 30), i)}",)
        out.append(StepSpec(id=f"m{i}", order=i, command="true", priority=rng.choice((1, 3, 3, 4)), **kw))
    return out


@pytest.mark.parametrize("steps,kw", [
    (distinct(400), dict(window=None)),
    (distinct(300), dict(window=0, reserve_after=5.0)),
    (mixed(500), dict(window=None)),
    (mixed(500), dict(window=0, reserve_after=20.0, order="critical-then-smallest")),
    (mixed(500), dict(window=None, reserve_after=None, order="critical-path")),
])
def test_skipping_the_quiet_classes_decides_exactly_what_trying_every_class_decides(steps, kw, monkeypatch):
    graph, _ = build_graph(steps)
    nodes = pretend_nodes(3, 16, 24 * GiB, 2)
    skipping = simulate(steps, graph, nodes, keep_log=True, **kw)
    monkeypatch.setattr(Quiet, "skipping", False)
    every = simulate(steps, graph, nodes, keep_log=True, **kw)
    assert skipping.log == every.log
