"""The scheduler core's per-step shortcuts give what the plain way gives: shared
demands (fleet.core.demands) and their kept hash, records made without the frozen
__init__ (fleet.core.made, resources' Slot), and best fit over the sorted bucket keys."""

from __future__ import annotations

import dataclasses
import random

from fleet.core import made
from fleet.core.decisions import Finished, NodeJoined, NodeLost, Start, StepExited, submission
from fleet.core.demands import Demands
from fleet.core.resources import Capacity, Demand, Pool, Slot
from fleet.core.scheduler import Scheduler

from coretools import GiB, node, suite


def test_a_demand_hashes_as_its_fields_do_and_equals_one_made_anywhere_else():
    d = Demand(cores=3, gpus=1, memory=None, span=False, unit=1)
    assert hash(d) == hash((3, 1, None, False, 1))  # the generated hash's value: tables iterate alike
    assert d == Demand(3, 1) and hash(d) == hash(Demand(3, 1)) and d != Demand(3, 1, memory=GiB)
    assert {d: 1}[Demand(3, 1)] == 1
    assert dataclasses.replace(d, cores=4) == Demand(4, 1) and hash(dataclasses.replace(d, cores=4)) == hash(Demand(4, 1))
    assert dataclasses.asdict(d) == {"cores": 3, "gpus": 1, "memory": None, "span": False, "unit": 1, "blocks": False}
    assert repr(d) == "Demand(cores=3, gpus=1, memory=None, span=False, unit=1, blocks=False)"
    assert d != Demand(3, 1, blocks=True) and hash(Demand(3, 1, blocks=True)) == hash((3, 1, None, False, 1, True))


def test_steps_of_one_kind_share_one_demand_equal_to_what_the_width_says():
    specs = suite({"id": "a", "cores": 4}, {"id": "b", "cores": 4}, {"id": "c", "cores": 8, "min_cores": 2},
                  {"id": "d", "cores": 99, "min_cores": 99}).steps
    cap = Capacity.of([node("n1", 4), node("n2", 4)])
    ds = Demands()
    a, b, c, d = (ds.of(cap, s) for s in specs)
    assert a is b and a == Demand(cores=4) and c == Demand(cores=4) and c is a  # 8 reduced to the node's 4
    assert d == cap.width(99, 99, 1, 0, None, False) and isinstance(d, str)
    smaller = Capacity.of([node("n1", 2)])  # another allocation's shape is asked again
    assert ds.of(smaller, specs[2]) == Demand(cores=2)
    assert ds.of(smaller, specs[0]) == smaller.width(4, specs[0].min_cores, 1, 0, None, False)


def test_the_scheduler_s_steps_of_one_kind_hold_the_same_demand_object():
    s = Scheduler()
    s.handle(NodeJoined(node("n1", 2)), 0.0)
    s.handle(submission(suite({"id": "a"}, {"id": "b"}, {"id": "c"}).steps), 0.0)
    assert s._jobs["a"].demand is s._jobs["b"].demand is s._jobs["c"].demand == Demand(cores=1)


def test_starts_and_ends_made_directly_equal_their_constructors_field_for_field():
    placement = (Slot("n1", (0, 1), (), GiB),)
    for fast, plain in ((made.start("a", 2, placement), Start("a", 2, placement)),
                        (made.start("a", 2, placement, "r"), Start("a", 2, placement, "r")),
                        (made.finished("a", 1, "succeeded"), Finished("a", 1, "succeeded")),
                        (made.finished("a", 1, "failed", "why", False), Finished("a", 1, "failed", "why", False))):
        assert fast == plain and repr(fast) == repr(plain) and hash(fast) == hash(plain)
        assert list(fast.__dict__) == [f.name for f in dataclasses.fields(type(plain))]


def test_a_pool_s_slot_equals_its_constructor_s():
    pool = Pool()
    pool.add(node("n1", 4))
    (got,) = pool.place(Demand(cores=2))
    assert got == Slot("n1", (0, 1), (), 2 * GiB) and repr(got) == repr(Slot("n1", (0, 1), (), 2 * GiB))
    assert list(got.__dict__) == [f.name for f in dataclasses.fields(Slot)]


def _reference(pool: Pool, d: Demand):
    """Best fit by a scan: fewest free cores that holds d, lowest join order on ties."""
    fits = [n for n in pool._nodes if n.fits(d)]
    return min(fits, key=lambda n: (len(n.free_cores), n.idx)) if fits else None


def test_best_fit_over_the_sorted_bucket_keys_picks_what_a_scan_of_every_node_picks():
    rng = random.Random(5)
    pool = Pool()
    for i in range(12):
        pool.add(node(f"n{i}", rng.choice((4, 8, 16)), gpus=rng.choice((0, 2)), memory=rng.choice((8, 16)) * GiB))
    held, lost = [], set()
    for _ in range(3000):
        r = rng.random()
        if r < 0.5:
            d = Demand(cores=rng.choice((1, 2, 3, 5)), gpus=rng.choice((0, 0, 1)),
                       memory=rng.choice((None, None, 2 * GiB)))
            want = _reference(pool, d)
            got = pool.place(d)
            assert (got[0].node if got else None) == (want.spec.name if want else None)
            if got:
                held.append(got)
        elif r < 0.97 and held:
            pool.release(held.pop(rng.randrange(len(held))))
        elif r >= 0.97:
            name = f"n{rng.randrange(12)}"
            if pool.has(name):
                pool.remove(name)
                lost.add(name)
            elif name in lost:
                pool.add(node(name, 8))
        assert pool._keys == sorted(pool._buckets)  # the index holds every bucket, once, in order


class _Unshared(Demands):
    """Every step its own Demand object, as before fleet.core.demands."""

    def of(self, cap, spec):
        d = super().of(cap, spec)
        return dataclasses.replace(d) if isinstance(d, Demand) else d


def test_a_run_with_a_lost_node_decides_the_same_whether_demands_are_shared_or_not():
    def run(share: bool):
        s = Scheduler(window=None)
        if not share:
            s._demands = _Unshared()
        out = []
        for i in range(4):
            out += s.handle(NodeJoined(node(f"n{i}", 4)), 0.0)
        steps = suite(*({"id": f"s{i}", "cores": 1 + i % 3, "estimate": 1 + i % 5} for i in range(60))).steps
        out += s.handle(submission(steps), 0.0)
        now = 0.0
        while not s.finished():
            now += 1.0
            running = list(s.running_ids())
            if now == 3.0:
                out += s.handle(NodeLost("n1", "gone"), now)
                continue
            out += s.handle(StepExited(running[0], s.view(running[0]).attempt, "succeeded"), now)
        return out

    assert [repr(d) for d in run(True)] == [repr(d) for d in run(False)]
