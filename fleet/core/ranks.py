"""The order of ready steps of equal priority: setup order, or by the work after them.

A step's upward rank is its expected duration plus the longest chain of expected
durations after it (its dependents, theirs, ...): at least how long the suite still
needs once it starts. Orders (`Scheduler.ranks = Ranks(order)`, `fleet simulate
--order`):

- "setup" (the default): setup order, as ever.
- "critical-path": the longest upward rank first (the list-scheduling rule of HEFT),
  then setup order. It starts the heads of the longest chains first, and among
  independent steps the longest first, which trims the ragged tail.
- "critical-then-smallest": steps whose rank is at least CUT of the longest rank in
  their submission first, longest rank first; then the rest, the smallest work first
  (cores x estimate), so many small steps are not held up by a few big ones.
- "defer-widest": "critical-then-smallest", and the few biggest spanning steps that are
  not critical (the DEFER_SHARE of a submission's spanning steps with the most cores x
  estimate, none of them with a rank at least CUT of the longest) are held back, after
  they become ready, for the median expected duration of the submission's spanning
  steps (fleet.core.deferral): while the cores are short,
  they would hold, for hours, the cores that many smaller wide steps then queue for.

Measured on the benchmarks (benchmarks/README.md, "Reservations ... ordering"): the
default stays setup order because it is the documented tie-breaker users rely on, and
neither other order wins on every measured workload.

Ranks are computed once per submission, O(steps + dependencies), and folded into the
key a ready step is queued under (fleet.core.jobs.DemandClass.heap), so a pass costs
what it did: no sort per decision. A step with neither estimate nor recorded duration
counts 0 s. Keys are deterministic: ties go to setup order.
"""

from __future__ import annotations

from typing import Iterator, Mapping

from fleet.core import durations
from fleet.core.deferral import Deferral

MODES = ("setup", "critical-path", "critical-then-smallest", "defer-widest")
DEFAULT = "setup"
CUT = 0.8  # "critical-then-smallest": a chain this close to the longest goes first (0.9 measured worse)


def upward_ranks(steps, deps: Mapping[str, tuple[str, ...]],
                 recorded: Mapping[str, float] | None = None) -> dict[str, float]:
    """Each step's expected duration plus the longest chain of expected durations
    after it, among `steps` (dependencies on other ids are ignored; steps on or after
    a cycle count only themselves)."""
    rank: dict[str, float] = {}
    for _ in ranking(steps, deps, recorded, rank):
        pass
    return rank


def ranking(steps, deps: Mapping[str, tuple[str, ...]], recorded: Mapping[str, float] | None,
            rank: dict[str, float], chunk: int = 0) -> Iterator[None]:
    """upward_ranks into `rank`, pausing (a yield) after every `chunk` steps of each of
    its four walks (0: never), as a chunked submission is entered (Submitted.chunk)."""
    rec = recorded or {}
    own: dict[str, float] = {}
    for n, s in enumerate(steps, 1):
        own[s.id] = float(s.estimate) if s.estimate is not None else rec.get(s.id, 0.0)
        if chunk and n % chunk == 0:
            yield
    children: dict[str, list[str]] = {}
    indeg = dict.fromkeys(own, 0)
    for n, sid in enumerate(own, 1):
        for d in deps.get(sid, ()):
            if d in own:
                kids = children.get(d)
                if kids is None:
                    children[d] = [sid]
                else:
                    kids.append(sid)
                indeg[sid] += 1
        if chunk and n % chunk == 0:
            yield
    order = [k for k, v in indeg.items() if v == 0]
    i = 0
    while i < len(order):  # Kahn's order: every dependency before its dependents
        for c in children.get(order[i], ()):
            indeg[c] -= 1
            if indeg[c] == 0:
                order.append(c)
        i += 1
        if chunk and i % chunk == 0:
            yield
    rank.update(own)
    for n, sid in enumerate(reversed(order), 1):  # dependents first: each rank is final when read
        kids = children.get(sid)
        if kids:
            rank[sid] = own[sid] + max(rank[c] for c in kids)
        if chunk and n % chunk == 0:
            yield


class Ranks:
    """The scheduler's queue key for a ready step, after its priority."""

    def __init__(self, order: str = DEFAULT) -> None:
        if order not in MODES:
            raise ValueError(f"order must be one of {', '.join(MODES)}, not {order!r}")
        self.order = order
        # "critical-path": every step's minus rank; "critical-then-smallest": only the
        # critical steps' (the rest are keyed by their work when queued).
        self._first: dict[str, float] = {}
        self._recorded: Mapping[str, float] | None = None
        self.deferral = Deferral() if order == "defer-widest" else None  # fleet.core.deferral

    def learn(self, steps, deps: Mapping[str, tuple[str, ...]], recorded: Mapping[str, float] | None,
              chunk: int = 0) -> Iterator[None]:
        """A submission: rank its steps (a later submission's steps rank among
        themselves), pausing every `chunk` steps of each walk as its entering does."""
        if self.order == "setup":
            return
        self._recorded = recorded  # the scheduler's one table, kept up to date in place
        rank: dict[str, float] = {}
        yield from ranking(steps, deps, recorded, rank, chunk)
        if self.order == "critical-path":
            self._first.update((sid, -r) for sid, r in rank.items())
            return
        cut = CUT * max(rank.values(), default=0.0)
        self._first.update((sid, -r) for sid, r in rank.items() if r >= cut and r > 0)
        if self.deferral is not None:
            self.deferral.learn(steps, rank, cut, recorded)

    def key(self, job):
        """Setup order, or (minus the rank or the step's work, setup order): a critical
        step's key is negative, a step's work is not, so critical steps come first.
        Kept on the job (job.qkey) for taking it off its queue again."""
        job.qkey = self._key(job)
        return job.qkey

    def _key(self, job):
        if self.order == "setup":
            return job.seq
        first = self._first.get(job.spec.id)
        if first is None:
            if self.order == "critical-path":
                first = 0.0
            else:
                first = (durations.expected_s(job.spec, self._recorded) or 0.0) * job.demand.cores
        return (first, job.seq)


SETUP_ORDER = Ranks()  # stateless in setup order: learn() keeps nothing; shared as the default


def ordered(sched, order: str = DEFAULT):
    """Give a scheduler, before its first event, this order of ready steps; returns it."""
    if order != DEFAULT:
        sched.ranks = Ranks(order)
    return sched
