"""A spanning step's GPUs go with its ranks: every node that takes ranks of a step with
a GPU per node or more gets GPUs, in proportion to its ranks (fleet.core.spangpus)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.core.resources import Capacity, Demand, NodeSpec, Pool
from fleet.core.shadow import _Room

from coretools import GiB, node


def test_a_spanning_step_does_not_put_its_gpus_on_one_node_and_its_other_ranks_on_a_node_without_any():
    # The audit's pool: a 1-GPU step on A, a 63-core step on B; B has every GPU free, A 3.
    pool = Pool()
    for n in (node("A", 64, gpus=4, memory=256 * GiB), node("B", 64, gpus=4, memory=256 * GiB)):
        pool.add(n)
    assert pool.place(Demand(cores=2, gpus=1)) is not None
    assert pool.place(Demand(cores=63)) is not None
    got = pool.place(Demand(cores=4, gpus=4, span=True))
    assert [(s.node, len(s.cores), len(s.gpus)) for s in got] == [("A", 3, 3), ("B", 1, 1)]


def test_a_node_without_free_gpus_takes_none_of_the_ranks_and_the_step_waits_for_gpus_beside_cores():
    pool = Pool()
    for n in (node("n1", 2, gpus=2), node("n2", 2, gpus=2)):
        pool.add(n)
    hold = pool.place(Demand(cores=1, gpus=2))   # n1: a core free, no GPU
    d = Demand(cores=2, gpus=2, span=True)
    assert [(s.node, len(s.cores), len(s.gpus)) for s in pool.place(d)] == [("n2", 2, 2)]
    assert not pool.fits(d) and pool.place(d) is None
    pool.release(hold)
    assert [(s.node, len(s.cores), len(s.gpus)) for s in pool.place(d)] == [("n1", 2, 2)]


def test_a_step_with_fewer_gpus_than_ranks_shares_them_out_by_ranks_one_at_least_on_each_node():
    pool = Pool()
    for n in (node("n1", 6, gpus=4), node("n2", 2, gpus=4)):
        pool.add(n)
    got = pool.place(Demand(cores=8, gpus=3, span=True))
    assert [(s.node, len(s.cores), len(s.gpus)) for s in got] == [("n1", 6, 2), ("n2", 2, 1)]


def test_the_allocation_that_can_never_hold_the_gpus_beside_the_ranks_makes_the_step_unrunnable():
    # 8 ranks with 4 GPUs: the GPU node holds 4 of them, the other node has no GPU for the rest.
    cap = Capacity.of([node("g", 4, gpus=4), node("c", 4)])
    assert cap.width(8, 8, 1, 4, None, True) == (
        "needs 4 GPUs for 8 ranks, each node holding its share of the GPUs with its ranks; "
        "the nodes hold 4 of the ranks so")
    assert cap.width(4, 4, 1, 4, None, True) == 4


@st.composite
def busy_pools(draw):
    """A pool of 1..5 nodes, some of it taken by one-node steps, and a spanning GPU demand."""
    pool, specs = Pool(), []
    for i in range(draw(st.integers(1, 5))):
        cores, gpus = draw(st.integers(1, 8)), draw(st.integers(0, 4))
        mem = draw(st.sampled_from([cores * GiB, cores * GiB // 2]))
        specs.append(NodeSpec(f"n{i}", tuple(range(cores)), tuple(range(gpus)), mem))
        pool.add(specs[-1])
    for _ in range(draw(st.integers(0, 6))):
        pool.place(Demand(cores=draw(st.integers(1, 4)), gpus=draw(st.integers(0, 2))))
    unit = draw(st.integers(1, 3))
    d = Demand(cores=unit * draw(st.integers(1, 8)), gpus=draw(st.integers(1, 12)), span=True, unit=unit,
               memory=draw(st.sampled_from([None, None, 4 * GiB])))
    return pool, specs, d


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_pools())
def test_every_node_with_ranks_holds_its_share_of_the_gpus_and_the_pool_says_so_before_placing(case):
    pool, specs, d = case
    free = {s.name: pool.free_on(s.name) for s in specs}
    fits = pool.fits(d)
    got = pool.place(d)
    assert fits == (got is not None)   # the cheap test is exactly the placement's failures
    if got is None:
        return
    ranks = d.cores // d.unit
    assert sum(len(s.cores) for s in got) == d.cores and sum(len(s.gpus) for s in got) == d.gpus
    for s in got:
        r = len(s.cores) // d.unit
        assert len(s.cores) == r * d.unit and r > 0
        assert len(s.gpus) <= free[s.node][1] and len(s.cores) <= free[s.node][0]
        assert len(s.gpus) <= -(-d.gpus * r // ranks)   # never more than its share, rounded up
        if d.gpus >= len(got):
            assert s.gpus, f"{s.node} has ranks and no GPU"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_pools())
def test_the_allocations_width_and_an_idle_pool_agree_on_whether_a_spanning_gpu_step_can_ever_run(case):
    _, specs, d = case
    idle = Pool()
    for s in specs:
        idle.add(s)
    w = Capacity.of(specs).width(d.cores, d.cores, d.unit, d.gpus, d.memory, True)
    assert (w == d.cores) == (idle.place(d) is not None)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_pools())
def test_a_reservations_plan_splits_the_gpus_as_the_pool_does(case):
    pool, specs, d = case
    proj = {s.name: list(pool.free_on(s.name)) for s in specs if pool.free_on(s.name)[0] >= d.unit}
    room = _Room(d, {s.name: s for s in specs}, proj)
    order = {s.name: i for i, s in enumerate(specs)}
    want = room.choose({}, order)
    got = pool.place(d)
    assert (want is None) == (got is None)
    if got is not None:
        assert sorted((n, c, g) for n, (c, g, _) in want.items()) == sorted(
            (s.node, len(s.cores), len(s.gpus)) for s in got)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_pools(), st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 3)), max_size=6))
def test_a_plans_room_says_enough_exactly_when_a_plan_can_be_chosen_as_the_walk_frees_resources(case, frees):
    # A walk stops at the first end where the room says enough and a plan is chosen; a
    # room that said enough where no plan could be chosen (free GPUs in all, not beside
    # the ranks) made every walk for a blocked wide GPU step run to its end (the
    # Aurora-sized what-if with reservations took 571 s instead of 24).
    pool, specs, d = case
    names = [s.name for s in specs]
    proj = {s.name: list(pool.free_on(s.name)) for s in specs if pool.free_on(s.name)[0] >= d.unit}
    room = _Room(d, {s.name: s for s in specs}, proj)
    order = {s.name: i for i, s in enumerate(specs)}
    for which, cores, gpus in [(None, 0, 0), *frees]:
        if which is not None:  # the walk frees what a running step held on a node
            name = names[which % len(names)]
            p = proj.setdefault(name, list(pool.free_on(name)))
            room.drop(name)
            p[0], p[1] = p[0] + cores, p[1] + gpus
            room.add(name)
        assert room.enough() == (room.choose({}, order) is not None), (proj, d)


def test_a_flexible_gpu_step_whose_target_ranks_cannot_hold_their_share_gets_fewer_ranks_down_to_its_minimum():
    # 3 nodes of 4 cores and 1 GPU: 10 ranks with 3 GPUs leave a node a rank short of its
    # share; 9 ranks (the step's minimum) fit, 3 a node (it was refused as never running).
    cap = Capacity.of([node(f"n{i}", 4, gpus=1) for i in range(3)])
    assert cap.width(10, 9, 1, 3, None, True) == 9
    assert Capacity.of([node("g", 4, gpus=4), node("c", 4)]).width(8, 4, 1, 4, None, True) == 4
    assert isinstance(Capacity.of([node("g", 4, gpus=4), node("c", 4)]).width(8, 5, 1, 4, None, True), str)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_pools(), st.integers(0, 6))
def test_a_flexible_spanning_gpu_steps_width_is_the_widest_an_idle_pool_places_within_its_range(case, less):
    _, specs, d = case
    lo = max(d.unit, d.cores - less * d.unit)

    def places(w: int) -> bool:
        idle = Pool()
        for s in specs:
            idle.add(s)
        return idle.place(Demand(cores=w, gpus=d.gpus, span=True, unit=d.unit, memory=d.memory)) is not None

    w = Capacity.of(specs).width(d.cores, lo, d.unit, d.gpus, d.memory, True)
    fitting = [c for c in range(d.cores, lo - 1, -d.unit) if places(c)]
    if isinstance(w, str):
        assert not fitting, (w, fitting)
    else:
        assert fitting and w == fitting[0], (w, fitting)


def test_placing_a_spanning_gpu_step_on_a_thousand_nodes_works_out_the_memory_room_of_the_few_it_takes(monkeypatch):
    # Counted, not timed: every live node's room (a memory loop) was worked out and every
    # node sorted for each placement, 3.4x the cost on 10,000 nodes.
    from fleet.core import resources
    pool = Pool()
    for i in range(1000):
        pool.add(node(f"n{i}", 64, gpus=4, memory=512 * GiB))
    d = Demand(cores=256, gpus=16, span=True, memory=64 * GiB)
    assert pool.fits(d)  # (the cheap test's tables, made once a kind of demand, kept up to date after)
    calls = []
    real = resources._Node.mem_for
    monkeypatch.setattr(resources._Node, "mem_for", lambda self, *a: calls.append(1) or real(self, *a))
    got = pool.place(d)
    assert got is not None and len(got) == 4 and all(len(s.gpus) == 4 for s in got)
    assert len(calls) < 40, len(calls)
