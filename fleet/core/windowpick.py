"""Which running step a step handed ahead goes behind (fleet.core.window), and which
running steps take none for now.

- Soonest end first: among the open running steps of a demand, the one expected to end
  soonest (its start + fleet.core.durations.expected_s; a step with no expectation
  counts as ending last, ties in start order) takes the next step in the pass's order.
  The open steps of each demand are a heap keyed so (`_Lazy`), not a scan.
- Not committed to a slot it could do without: when the class's head could run in full
  in a slot that already has a step queued (that step's predecessor's end + its
  expected duration + the head's) before the soonest-ending open step is expected to
  end, nothing more is queued for that demand in this pass; the head waits for that
  slot (it is handed ahead, or started, once the queued step begins). An unknown end
  is not soon: when the soonest open step's end is unknown and such a slot's is known,
  the head waits for that slot too, whatever its own expectation (a short step used to
  go behind a step with no estimate, on a node that then ran it only when that one
  ended). With no expectations at all the window queues as it always did (start
  order); a step stuck so is taken back when cores free elsewhere (fleet.core.windowback).
- The order of ready steps is kept: a running step is not given a step behind it while
  one of its dependents that waits for it alone (unmet 1) would come before that step
  in the pass's order (priority, then fleet.core.ranks' key) and fits its resources, or
  runs alone, or is wider and of a higher priority (its reservation keeps them then):
  when it ends, that dependent takes them (the pass starts it), as without a window.
  (One that waits for two or more is seen when it comes to wait for one alone:
  fleet.core.windoworder.awaited takes back what was queued behind that one meanwhile.)
  A parent waiting for its last pending child counts as such a dependent of that child:
  it resumes at the front of its priority when the child ends (fleet.core.phases).
  Such a step is HELD, keyed by the first such dependent's pass key, and opened again
  when a class head that comes before that dependent is to be placed (or never: it
  then ends with nothing behind it). Its dependents are walked once per look (it is
  cached), which its own exit costs anyway.
"""

from __future__ import annotations

import heapq
import math

from fleet.core import states as S
from fleet.core.durations import expected_s


class _Rev:
    """A key ordered backwards: the held step whose dependent comes LAST is on top."""

    __slots__ = ("k",)

    def __init__(self, k) -> None:
        self.k = k

    def __lt__(self, other: "_Rev") -> bool:
        return other.k < self.k

    def __eq__(self, other) -> bool:
        return isinstance(other, _Rev) and self.k == other.k


class _Lazy:
    """A heap of (key, id) with a live table: dropping an id is O(1) and leaves a stale
    entry that pops skip; the heap is rebuilt when stale entries outnumber live ones.
    Keys are unique (they end in a start number), so the order is deterministic."""

    __slots__ = ("heap", "live")

    def __init__(self) -> None:
        self.heap: list = []
        self.live: dict = {}  # id -> (its entry, its item)

    def __len__(self) -> int:
        return len(self.live)

    def put(self, key, sid: str, item) -> None:
        entry = (key, sid)
        self.live[sid] = (entry, item)
        heapq.heappush(self.heap, entry)

    def drop(self, sid: str) -> bool:
        if self.live.pop(sid, None) is None:
            return False
        if len(self.heap) > 2 * len(self.live) + 32:
            self.heap = [e for e, _ in self.live.values()]
            heapq.heapify(self.heap)
        return True

    def peek(self):
        """(key, item) of the first live entry, or None."""
        heap, live = self.heap, self.live
        while heap:
            entry = heap[0]
            cur = live.get(entry[1])
            if cur is not None and cur[0] is entry:
                return entry[0], cur[1]
            heapq.heappop(heap)
        return None

    def pop(self):
        """Take the first live entry off: (key, item)."""
        top = self.peek()
        entry = heapq.heappop(self.heap)
        del self.live[entry[1]]
        return top


class WindowPick:
    """The window's choice of predecessor (a part of fleet.core.window.Window)."""

    def _chain(self, job, pred) -> None:
        """`job` is queued behind `pred`: their slot frees when `job` is expected to end."""
        exp = expected_s(job.spec, self.sched.deadline.recorded)
        end = self.ends.get(pred.spec.id, math.inf) + exp if exp is not None else math.inf
        chained = self.chained.get(pred.demand)
        if chained is None:
            chained = self.chained[pred.demand] = _Lazy()
        self._n += 1
        chained.put((end, self._n), pred.spec.id, None)

    def _later(self, demand, preds: _Lazy, head: tuple) -> bool:
        """Whether the head is to wait for a slot of `demand` that has a step queued: one
        whose end is known while the soonest open step's is not (an unknown end is not
        soon), or one the head could run in full in before that step is expected to end."""
        chained = self.chained.get(demand)
        if not chained:
            return False
        slot = chained.peek()[0][0]
        if slot == math.inf:
            return False
        end = preds.peek()[0][0]
        if end == math.inf:
            return True
        exp = expected_s(self.sched._jobs[head[2]].spec, self.sched.deadline.recorded)
        return exp is not None and slot + exp <= end

    def _overtaken(self, pred, head: tuple) -> bool:
        """Whether a dependent of `pred` waiting for it alone comes before `head` (a
        class heap entry: priority, rank key, id) and fits `pred`'s resources."""
        pid = pred.spec.id
        cached = self.blocker.get(pid)
        if cached is not None and cached[0] < head and self._takes(cached[1], pred) is not None:
            return True
        sched, best = self.sched, None
        for dj in sched._dependents(pred):
            off = self._takes(dj, pred)
            if off is not None:
                # ranks.key sets dj.qkey: it is set again when dj is queued; a waiting step is in no heap.
                k = (dj.prio + off, sched.ranks.key(dj), dj.spec.id)
                if best is None or k < best[0]:
                    best = (k, dj)
        resumes = self._resuming(pred) if sched._parent_of else None  # (fleet.core.windoworder)
        if resumes is not None and (best is None or resumes[0] < best[0]):
            best = resumes
        if best is None:
            self.blocker.pop(pid, None)
            return False
        self.blocker[pid] = best
        return best[0] < head

    @staticmethod
    def _takes(dj, pred) -> float | None:
        """Whether `dj` is made ready by `pred`'s end and keeps its resources then: 0 if
        it would start on them, or runs alone (nothing ordered after it starts while it
        waits); 0.5 if it is wider (its reservation keeps them from a lower priority
        only: its key counts half a priority later); None if not."""
        if dj.state != S.WAITING or dj.unmet != 1 or dj.demand is None:
            return None
        return WindowPick._offset(dj, pred)

    @staticmethod
    def _offset(dj, pred) -> float:
        """0 if `dj` would start on `pred`'s resources or runs alone; 0.5 if it is wider."""
        if dj.exclusive:
            return 0
        d, p = dj.demand, pred.demand
        if d.span or d.cores > p.cores or d.gpus > p.gpus:
            return 0.5
        return 0 if d.memory is None or p.memory is None or d.memory <= p.memory else 0.5

    def _hold(self, pred, entry) -> None:
        held = self.held.get(pred.demand)
        if held is None:
            held = self.held[pred.demand] = _Lazy()
        self._n += 1
        held.put((_Rev(self.blocker[pred.spec.id][0]), self._n), pred.spec.id, (entry, pred))

    def _unshelve(self, reserved) -> None:
        """Open again the steps set aside on nodes no reservation takes now."""
        for node in [n for n in self.shelved if n not in reserved]:
            for entry, pred in self.shelved.pop(node).values():
                self._reopen(entry, pred)

    def _reopen(self, entry, pred) -> None:
        preds = self.taking.get(pred.demand)
        if preds is None:
            preds = self.taking[pred.demand] = _Lazy()
        preds.put(entry, pred.spec.id, pred)

    def _release(self, demand, head: tuple) -> None:
        """Open again the held steps of `demand` whose dependent comes after `head`."""
        held = self.held.get(demand)
        while held:
            (rev, _), _item = held.peek()
            if not head < rev.k:
                break
            _, (entry, pred) = held.pop()
            self._reopen(entry, pred)
        if held is not None and not held:
            del self.held[demand]
