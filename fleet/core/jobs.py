"""The scheduler's internal records: one per submitted step, one per class of
identical demand among ready steps (see fleet.core.scheduler)."""

from __future__ import annotations

import heapq

from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.resources import Demand, Placement
from fleet.core.suite import StepSpec


class Job:
    """One submitted step as the scheduler holds it."""

    __slots__ = ("spec", "deps", "state", "attempt", "generation", "unmet", "dependents", "demand", "placement",
                 "started_at", "why", "exclusive", "prio", "seq", "cancelled", "ready_at", "qkey", "unsure")

    def __init__(self, spec: StepSpec, deps: tuple[str, ...]):
        self.spec = spec
        self.deps = deps  # its effective dependencies (explicit and by files), as submitted
        self.state = S.WAITING
        self.attempt = 1  # within its generation: the retry limit counts these, but for the unsure
        self.unsure = 0  # attempts spent that may not have run (fleet.core.unsure): no retry counts them
        self.generation = 1  # how many times a submission made this step run anew in this fleet
        self.unmet = 0
        self.dependents: list[Job] | tuple = ()  # a list once it has one (most steps never do)
        self.demand: Demand | None = None
        self.placement: Placement = ()
        self.started_at: float | None = None
        self.why: W.WaitReason | None = None  # its last Wait, until it starts
        self.exclusive = not spec.concurrent
        self.prio = spec.priority
        self.seq = 0  # submission order across every suite submitted, set by the scheduler
        self.cancelled = False  # running, and to be killed: however it ends, it ends cancelled
        self.ready_at: float | None = None  # when it last became ready (the reservation's age)
        self.qkey = None  # its key in its class's heap after priority (fleet.core.ranks), once queued


class DemandClass:
    """Ready steps of one demand (or every step that runs alone), in a heap by priority and order."""

    __slots__ = ("key", "demand", "exclusive", "heap", "blocked_at", "quiet", "quiet_settled", "seen", "was")

    def __init__(self, key: tuple, demand: Demand, exclusive: bool):
        self.key = key
        self.demand = demand
        self.exclusive = exclusive
        self.heap: list[tuple] = []  # (priority, queue key (fleet.core.ranks), id)
        self.blocked_at: int | None = None  # pool.releases.end() when it last failed to fit
        self.quiet = 0  # its quiet period's stamp while quiet, else 0 (fleet.core.quiet)
        self.quiet_settled = False  # (while quiet) whether a try with nothing free says nothing
        self.seen = 0  # the last pass that looked at it (fleet.core.quiet)
        self.was = None  # (stamp, first step) of its last quiet period (fleet.core.quiet)


def take_out(classes: dict[tuple, DemandClass], jobs, changed=None) -> None:
    """Take many ready steps out of their classes' heaps at once: one rebuild per class
    touched, where one at a time costs a scan of the heap each (quadratic when a lost
    node or a cancel takes thousands). `changed(cls)`: said of each class first (its first
    step may change: fleet.core.quiet)."""
    gone: dict[tuple, set[str]] = {}
    for job in jobs:
        key = ("exclusive",) if job.exclusive else (job.demand,)
        gone.setdefault(key, set()).add(job.spec.id)
    missed: set[str] = set()
    if changed is not None:
        for key in gone:
            if key in classes:
                changed(classes[key])
    for key, ids in gone.items():
        cls = classes.get(key)
        n = len(cls.heap) if cls is not None else 0
        if cls is not None:
            _drop(classes, cls, ids)
        if n - (len(cls.heap) if cls is not None else 0) < len(ids):
            missed |= ids  # not where its demand says (never expected): look everywhere
    if missed:
        for cls in list(classes.values()):
            if changed is not None:
                changed(cls)
            _drop(classes, cls, missed)


def _drop(classes: dict[tuple, DemandClass], cls: DemandClass, ids: set[str]) -> None:
    heap = [e for e in cls.heap if e[2] not in ids]
    if len(heap) != len(cls.heap):
        heapq.heapify(heap)
        cls.heap = heap
        if not heap:
            classes.pop(cls.key, None)
