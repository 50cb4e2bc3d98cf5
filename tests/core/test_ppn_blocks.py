"""An MPI step of a PALS fleet is placed as PALS mpiexec can launch it: every node but one
holding the same number of ranks, that one fewer (fleet.core.ppnblocks). Before
2026-12-07 the pool placed it on the nodes with the most free cores first: on nodes of
64, 32 and 32 cores, 128 ranks as 64 + 32 + 32, which no PALS launch can express."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

from fleet.core import ppnblocks
from fleet.core.graph import build_graph
from fleet.core.resources import Capacity, Demand, NodeSpec, Pool
from fleet.core.scheduler import Start
from fleet.core.simulate import simulate
from fleet.core.suite import suite_from_toml


def nodes(*cores: int) -> list[NodeSpec]:
    return [NodeSpec(f"x{i + 1}", tuple(range(c)), (), c << 30) for i, c in enumerate(cores)]


def mpi_suite(ranks: int):
    text = f'[suite]\nname = "whole"\n[[steps]]\nid = "model"\ncommand = ["ocean_model"]\nmpi = true\nranks = {ranks}\n'
    suite = suite_from_toml(text, Path("/suites/whole.toml"))
    return suite.steps, build_graph(suite.steps)[0]


def test_the_most_ranks_in_blocks_and_the_split_agree_with_every_placement_tried():
    rng = random.Random(7)
    for _ in range(400):
        rooms = [rng.randint(0, 6) for _ in range(rng.randint(1, 4))]
        held = {}
        for r in rooms:
            held[r] = held.get(r, 0) + 1
        best = max((sum(c) for a in itertools.product(*(range(r + 1) for r in rooms))
                    for c in [[x for x in a if x]] if c and ppnblocks.kept(c)), default=0)
        assert ppnblocks.most(held) == best, rooms
        for ranks in range(1, best + 2):
            got = ppnblocks.split(enumerate(rooms), ranks)
            if ranks > best:
                assert got is None
                continue
            assert sum(r for _, r in got) == ranks and ppnblocks.kept(r for _, r in got)
            assert all(0 < r <= rooms[k] for k, r in got) and len({k for k, _ in got}) == len(got)


def test_a_step_no_block_placement_holds_is_unrunnable_from_the_start_not_placed_to_fail():
    steps, graph = mpi_suite(128)
    r = simulate(steps, graph, nodes(64, 32, 32), keep_log=True, mpi_blocks=True)
    assert r.unrunnable["model"].startswith("needs 128 ranks placed as PALS mpiexec places them, in blocks of one "
                                            "count per node")
    assert r.unrunnable["model"].endswith("the nodes hold 96 so")
    assert not [d for _, d in r.log if isinstance(d, Start)]
    # (without the rule, as under srun, the same step runs on all three)
    assert simulate(steps, graph, nodes(64, 32, 32)).unrunnable == {}


def test_unequal_nodes_get_a_block_placement_where_most_free_first_would_break_the_rule():
    steps, graph = mpi_suite(120)
    r = simulate(steps, graph, nodes(64, 48, 32), keep_log=True, mpi_blocks=True)
    start = next(d for _, d in r.log if isinstance(d, Start))
    assert [(s.node, len(s.cores)) for s in start.placement] == [("x1", 48), ("x2", 48), ("x3", 24)]
    plain = simulate(steps, graph, nodes(64, 48, 32), keep_log=True)
    start = next(d for _, d in plain.log if isinstance(d, Start))
    assert [(s.node, len(s.cores)) for s in start.placement] == [("x1", 64), ("x2", 48), ("x3", 8)]


def test_on_a_busy_pool_a_blocks_demand_is_placed_in_blocks_and_known_short_when_it_cannot_be():
    pool = Pool()
    for n in nodes(8, 8, 8):
        pool.add(n)
    pool.take_on("x2", 2, 0, 0)
    pool.take_on("x3", 3, 0, 0)  # free: 8, 6, 5 (most free first: 8 + 6 + 3, which PALS cannot launch)
    got = pool.place(Demand(17, span=True, blocks=True))
    assert [(s.node, len(s.cores)) for s in got] == [("x1", 6), ("x2", 6), ("x3", 5)]
    pool.release(got)
    assert not pool.fits(Demand(18, span=True, blocks=True)) and pool.place(Demand(18, span=True, blocks=True)) is None
    assert pool.fits(Demand(18, span=True))  # (without the rule it fits: 8 + 6 + 4)
    assert pool.free_cores == 19
    cap = Capacity.of(nodes(64, 32, 32))
    assert cap.width(128, 96, 1, 0, None, True, True) == 96  # toward its minimum, as blocks hold it
    assert cap.width(128, 128, 1, 0, None, True) == 128
