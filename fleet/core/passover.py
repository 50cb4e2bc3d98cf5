"""Who a reservation is for: the steps being passed over (fleet.core.reservations).

Why. A reservation keeps other steps off what one step needs, so it only helps a step
that cannot start while others keep taking what it lacks: a wide step among narrow
ones, a step of high priority that lower ones would crowd out. A narrow step that waits
only because every core is busy gains nothing: the next free core is its anyway. Given
one (and fleet has a single reservation at a time, as Slurm's EASY), it keeps the
reservation from the step that needs it: one-core steps ready with a wide step and
before it in setup order each took it in turn, and the wide step started after the last
of them, with `--reserve-after` or without.

The rule.

* A *candidate* is the first ready step of its class of demand once it has failed to
  start (not a step that runs alone), until it starts or is no longer ready. A
  reservation is its class's and goes to the class's first step, so a candidate that
  is no longer first (one of higher priority came) gives way to the one that is.
* It is *passed over* when another step starts while it waits - in a pass, just before
  that step takes what is free (so a reservation made then can still keep it off);
  from a node's window (fleet.core.window), as the window hands that step to a node or
  the node begins it - and either that step comes after it in order (priority, the
  longest wait - earliest ready -, setup order), or it has been ready for at least
  `reserve_after` and cannot start on what is free (counting what the starting step
  takes; held resources are not free). Not by a step before it in its own class (steps
  of one demand start in their order). So a step that could take what frees, and is
  only behind in order, is not passed over by the steps before it.
* It is *eligible* if its priority is higher than that of some ready step (the lowest
  of the classes' first steps at the pass's start, or the starting step's), or it has
  been ready for `reserve_after`.
* Of the eligible candidates a start passes over, the first in order that was tried
  in this pass (a blocked class is tried when something it could use came free, or it
  is new: fleet.core.scheduler) gets the reservation, if there is room for one or it
  comes before the last standing one in order (which then gives way); with room and
  none of them tried, the first in order. Trying first the steps that could use what
  came free keeps the reservation from waiting idle for a step that is far from
  starting (on the Aurora-sized what-if, benchmarks/README.md: p90 wait 1,682 s, not
  1,834 s as by order alone).
* Once passed over, a candidate takes its turn as the old rule gave it to every
  eligible step: when it fails to start again, it gets the reservation if there is
  room or it comes before the last standing one in order (EASY's head of the queue).

So a step of higher priority gets its reservation the first time a step of lower
priority would start instead of it, and a step that has waited `reserve_after` the first
time another step would take what it cannot use; a step that can take the next free
resources never does. Deterministic: candidates are kept by numbers (priority, ready
time, setup order) and looked at when a step starts. Cost: a failure notes a candidate
in O(log candidates) (once per step); a start with candidates looks at the first of each
priority (1 to 5) and past those it does not pass over (at most one per class of demand,
and while a reservation stands only those before it in order).
"""

from __future__ import annotations

import heapq
import math

from fleet.core import states as S


class Candidates:
    """The candidates for a reservation, by priority, then ready time and setup order."""

    def __init__(self) -> None:
        self.of: dict[tuple, object] = {}  # class key -> its candidate (its first step when it failed)
        self._levels: dict[int, list] = {}  # priority -> heap of (ready, setup order, n, job, class key)
        self._n = 0  # entries made (ties after setup order: the same step noted again)
        self._entries = 0
        self.passno = 0  # the scheduler's passes so far (Reservations.begin counts them)
        self.tried: dict[tuple, int] = {}  # class key -> the pass its first step last failed in
        self.passed: dict[tuple, object] = {}  # class key -> its candidate, once passed over
        # The scheduler's (fleet.core.quiet): told of a class whose candidacy changes, and
        # asked whether a class was tried in this pass without a look (its `tried` mark).
        self.changed = None
        self.tried_unseen = None

    def note(self, job, key) -> None:
        """The first step of class `key` failed to start: a candidate (from now)."""
        self.tried[key] = self.passno
        if self.of.get(key) is not job:
            self._push(job, key)
            if self._entries > 2 * len(self.of) + 64:
                self._compact()

    def _push(self, job, key) -> None:
        self.of[key] = job
        self._n += 1
        heapq.heappush(self._levels.setdefault(job.prio, []), (_ready(job), job.seq, self._n, job, key))
        self._entries += 1

    def starting(self, job, key) -> None:
        """A step starts: it is no longer a candidate."""
        if self.of.get(key) is job:
            del self.of[key]
            self.passed.pop(key, None)
            if self.changed is not None:
                self.changed(key)

    def starving(self, job, key) -> bool:
        """Whether this candidate has been passed over (and is still its class's)."""
        return self.passed.get(key) is job and self.of.get(key) is job

    def passed_over(self, starter, skey, lowest: int, now: float, reserve_after: float, fits, skip, head, before):
        """The first in order of the eligible candidates that `starter` (of class `skey`)
        passes over, as (job, class key), or None. `lowest`: the lowest priority ready;
        `fits(demand)`: whether a demand would place on what is free; `skip(key)`: a
        class with a reservation already; `head(key)`: its first step now (a candidate
        no longer first gives way to that one: a reservation is its class's, and goes
        to that step); `before`: only candidates before this order count (no room: the
        last reservation's order), None: any."""
        mine = (starter.prio, _ready(starter), starter.seq)
        spare = None  # the first passed over that was not tried in this pass (room only)
        for prio in sorted(self._levels):
            if before is not None and prio > before[0]:
                return None
            heap = self._levels[prio]
            kept: list = []
            try:
                while heap:
                    ready, seq, _, job, key = heap[0]
                    if self.of.get(key) is not job or job.state != S.READY or _ready(job) != ready:
                        heapq.heappop(heap)  # it started, left, or was noted again since
                        self._entries -= 1
                        continue
                    first = head(key)
                    if first is not job:  # another step came first in its class since
                        heapq.heappop(heap)
                        self._entries -= 1
                        del self.of[key]
                        if self.changed is not None:
                            self.changed(key)
                        if first is not None and first.state == S.READY:
                            self._push(first, key)
                        continue
                    if before is not None and (prio, ready, seq) >= before:
                        return None  # (no room: `spare` stays None)
                    aged = now - ready >= reserve_after
                    if prio >= lowest and not aged:
                        break  # nor any later one of this priority: they are younger
                    if (key == skey and _ahead(starter, job)) or skip(key) or (
                            (prio, ready, seq) > mine and not (aged and not fits(job.demand))):
                        kept.append(heapq.heappop(heap))
                        continue
                    if self.passed.get(key) is not job:
                        self.passed[key] = job
                        if self.changed is not None:
                            self.changed(key)
                    if self.tried.get(key) == self.passno or (self.tried_unseen is not None
                                                              and self.tried_unseen(key)):
                        return job, key
                    if spare is None and before is None:
                        spare = (job, key)
                    kept.append(heapq.heappop(heap))
            finally:
                for e in kept:
                    heapq.heappush(heap, e)
                if not heap:
                    del self._levels[prio]
        return spare

    def _compact(self) -> None:
        """Drop the entries of steps no longer candidates (once they outnumber them)."""
        levels: dict[int, list] = {}
        for key, job in list(self.of.items()):
            if job.state != S.READY:
                del self.of[key]
                continue
            self._n += 1
            levels.setdefault(job.prio, []).append((_ready(job), job.seq, self._n, job, key))
        for heap in levels.values():
            heapq.heapify(heap)
        self._levels, self._entries = levels, len(self.of)
        self.tried = {k: n for k, n in self.tried.items() if k in self.of}
        self.passed = {k: j for k, j in self.passed.items() if self.of.get(k) is j}


def _ahead(starter, job) -> bool:
    """Whether `starter` comes before `job` of its own class in the class's order (a step
    a node's window began may have been handed ahead before `job` became ready)."""
    if starter.qkey is None or job.qkey is None:
        return True
    return (starter.prio, starter.qkey) <= (job.prio, job.qkey)


def _ready(job) -> float:
    return job.ready_at if job.ready_at is not None else math.inf
