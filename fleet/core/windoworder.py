"""Taking a step handed ahead back for a step that comes before it (fleet.core.window).

A step is queued on a node when it is the first of the pass's order (priority, then
fleet.core.ranks) that has nowhere to start. A step that comes before it in that order
may become ready later (a priority-1 step whose dependencies end, a retry); with no
window it would start first, as the suite reference says of `priority`. So, whenever a
step that comes before a queued, not yet begun step cannot start, the queued one is
taken back (a Withdraw, the node decides as in fleet.core.windowback: dropped there,
it is ready again, its attempt unused; started there first, it runs where it was
queued). The step it yields to then takes its place: queued behind the same
predecessor, or behind whichever frees first, or started on the freed resources.

- Same demand (`_yield`, after the pass): a class's ready steps that come before the
  latest-ordered queued steps of their demand take one back each, latest in order first,
  with the steps queued behind it (a chain's from that step to its tail: never one from
  its middle, fleet.core.windowchain).
- Waiting for one step alone (`awaited`, when a dependency's success leaves a step
  waiting for one more): the steps queued behind that one that come after it in the
  order are taken back (a chain's from the first such to its tail), so that its
  resources come back when it ends, as without a window. Who counts
  (fleet.core.windowpick._takes): one that fits its resources; one that runs alone
  (nothing ordered after it starts while it waits, fleet.core.scheduler); and a wider
  one only against a lower priority (its reservation keeps those resources from a
  lower priority, fleet.core.reservations, but not from its own).
- A parent waiting for its last pending child alone (`resumes`, at the next pass): as
  `awaited`, with the parent as that child's dependent; it resumes at the front of its
  priority (fleet.core.phases), so it comes before every queued step of its priority.
- Runs alone (`alone`, when the pass stops at a step that must run alone): every queued
  step that comes after it is taken back (with the steps behind it in its chain), so the
  running steps drain without new ones.
- Reserved (`reserved`, after the pass): on the nodes a reservation takes, the queued
  steps that come after its step (a chain's from the first such to its tail); the plan
  counts only the ones before (fleet.core.reservations._queued_end). They are not
  queued again while its step waits (`barred`): made again as the nodes' answers come
  in, one a turn, its plan could be dropped, or move to other nodes, and come back, and
  those steps with it, for ever (before 2026-12-07: a simulation that never ended).

No back and forth: only a step that comes AFTER a ready (or nearly ready) one in the
order is taken back, and back in the ready steps it is queued again only after the
steps before it in its class; each taking back is paid for by one step that comes
before it. A step taken back for the order is not barred from slots with an unknown
end (as one taken back for free cores is: fleet.core.windowback), and may be taken
back again for another step that comes before it.

Cost: a step queued costs a comparison (`latest`, per demand, the latest-ordered step
queued since none of its demand was) until a ready step comes before that mark; then
that demand's queued steps are put once in a heap by order (O(queued of it), once per
demand while steps of it stay queued; 640,000 at 10,000 nodes x 64 cores is a second
once, not per pass) and kept (O(log queued) per step queued or leaving). A pass then
costs O(demands with queued steps), plus O(k log k) for the first k ready steps of a
class that each take one back; at most the pass's bound (Scheduler.pass_starts) are
taken back a pass. `awaited` costs O(deps + depth) when a dependency ends; `reserved`
O(steps running on the reserved nodes) once per reservation; `alone` the steps it takes
back (at most the pass's bound per pass).
"""

from __future__ import annotations

import heapq

from fleet.core import states as S
from fleet.core.windowback import Withdraw
from fleet.core.windowpick import _Lazy, _Rev


def order_key(job) -> tuple:
    """A ready or queued step's place in the pass's order: (priority, rank key, id)."""
    return (job.prio, job.qkey, job.spec.id)


def _firsts(heap: list):
    """A heap's entries in order, without taking them off (O(log k) each)."""
    if not heap:
        return
    todo = [(heap[0], 0)]
    n = len(heap)
    while todo:
        entry, i = heapq.heappop(todo)
        yield entry
        for c in (2 * i + 1, 2 * i + 2):
            if c < n:
                heapq.heappush(todo, (heap[c], c))


class WindowOrder:
    """The window's taking back for the order (a part of fleet.core.window.Window)."""

    def _order_init(self) -> None:
        self.latest: dict = {}  # demand -> the latest order key queued since none of it was
        self.order: dict = {}  # demand -> _Lazy of its queued steps, latest in order on top (once needed)
        self.yielding: dict = {}  # demand -> taken back for the order, the node's answer to come
        self.yielded: set[str] = set()  # taken back for the order (not `once`: fleet.core.windowback)
        self.cleared: dict[str, object] = {}  # reserved step -> the plan whose nodes were cleared
        # taken back for a reservation -> its step: not queued again while that step waits
        # with a plan (`barred`): its plan, made again as the answers come, may move to other
        # nodes and back, and the steps with it (queued, taken back, queued...: no end)
        self.for_res: dict[str, str] = {}
        self._for_res_most = 4096  # then swept (`reserved`)
        self.stayed: dict[str, tuple] = {}  # dropped by their node as their predecessor went on -> (job, why, node, pred)
        self.went_on: dict[str, int] = {}  # such a predecessor -> how many drops of its node are to come
        self.early: set[str] = set()  # such a one whose drops came before its exit (_went_on_first)
        self.waits_one: list[str] = []  # parents left waiting for one child alone since the last pass (resumes)

    def _ordered(self, job) -> None:
        """`job` was queued: keep its place in the order (a mark, or the heap once made)."""
        key = order_key(job)
        heap = self.order.get(job.demand)
        if heap is not None:
            self._n += 1
            heap.put((_Rev(key), self._n), job.spec.id, job)
            return
        cur = self.latest.get(job.demand)
        if cur is None or cur < key:
            self.latest[job.demand] = key

    def _unordered(self, job, last: bool) -> None:
        """`job` is no longer queued (`last`: nor any of its demand)."""
        if last:
            self.latest.pop(job.demand, None)
            self.order.pop(job.demand, None)
            return
        heap = self.order.get(job.demand) if self.order else None
        if heap is not None:
            heap.drop(job.spec.id)

    def _order_of(self, demand) -> _Lazy:
        heap = self.order.get(demand)
        if heap is None:  # once per demand while steps of it stay queued (see the docstring)
            heap = self.order[demand] = _Lazy()
            for pred in self.behind.values():
                job = self.next[pred.spec.id]
                if job.demand == demand:
                    self._n += 1
                    heap.put((_Rev(order_key(job)), self._n), job.spec.id, job)
        return heap

    def _latest_after(self, demand, key: tuple):
        """The latest-ordered queued step of `demand` not yet taken back, if it comes after `key`."""
        if demand not in self.order:
            mark = self.latest.get(demand)
            if mark is None or not key < mark:
                return None  # (the common case: everything queued comes before)
        heap = self._order_of(demand)
        while True:
            got = heap.peek()
            if got is None:
                return None
            (rev, _), job = got
            if job.spec.id not in self.recalled:
                return job if key < rev.k else None
            heap.pop()  # taken back already (fleet.core.windowback): its answer is to come

    def _yield(self, out: list) -> None:
        """After a pass: the ready steps that come before queued steps of their demand
        take those back (latest first), one each, at most the pass's bound."""
        sched = self.sched
        left = sched.pass_starts
        for demand in list(self.queued_of):
            cls = sched._classes.get((demand,))
            if cls is None or not cls.heap:
                continue
            skip = self.yielding.get(demand, 0)  # the first ready ones have theirs coming
            for entry in _firsts(cls.heap):
                if skip:
                    skip -= 1
                    continue
                job = self._latest_after(demand, entry)
                if job is None or left <= 0:
                    break
                left -= self._back_from(job, f"{entry[2]!r} comes before it", out)

    def awaited(self, dj, out: list) -> None:
        """`dj` now waits for one step alone: the steps queued behind that one which come
        after `dj` (as fleet.core.windowpick._takes counts) are taken back."""
        if dj.state != S.WAITING or dj.demand is None:
            return
        jobs = self.sched._jobs
        pred = next((j for j in map(jobs.get, dj.deps) if j is not None and j.state not in S.GOOD), None)
        if pred is None or pred.spec.id not in self.next or pred.state != S.RUNNING:
            return
        off = self._takes(dj, pred)
        if off is None:
            return
        key = (dj.prio + off, self.sched.ranks.key(dj), dj.spec.id)
        self._from_first_after(pred, key, f"{dj.spec.id!r} comes before it and waits for {pred.spec.id!r}", out)

    def _resuming(self, pred) -> tuple | None:
        """The parent that waits for `pred` alone (its last pending child), to resume when
        it ends, as a dependent's (pass key, job): it comes then before every step of its
        priority (fleet.core.phases._again: a quarter of a priority earlier here), or a
        wider one before a lower priority only (windowpick._takes); None if none."""
        sched = self.sched
        link = sched._parent_of.get(pred.spec.id)
        fam = sched._families.get(link[0]) if link is not None else None
        if fam is None or not fam.suspended or fam.succeeded or len(fam.pending) != 1:
            return None  # (a parent that succeeded already ends with its children: it takes nothing)
        parent = sched._jobs.get(link[0])
        if pred.spec.id not in fam.pending or parent is None or parent.state != S.SUSPENDED or parent.demand is None:
            return None
        return (parent.prio + self._offset(parent, pred) - 0.25, 0, parent.spec.id), parent

    def resumes(self, out: list) -> None:
        """The parents left waiting for one child alone since the last pass: the steps
        queued behind that child that come after the parent are taken back (as `awaited`
        does for a dependent), so the parent resumes on its resources when it ends."""
        parents, self.waits_one = self.waits_one, []
        sched = self.sched
        for sid in parents:
            fam = sched._families.get(sid)
            if fam is None or len(fam.pending) != 1:
                continue
            child = sched._jobs.get(next(iter(fam.pending)))
            if child is None or child.state != S.RUNNING or child.spec.id not in self.next:
                continue
            got = self._resuming(child)
            if got is not None:
                self._from_first_after(child, got[0], f"{sid!r} comes before it and waits for its child "
                                       f"{child.spec.id!r} alone", out)

    def alone(self, head: tuple, out: list) -> None:
        """The pass stops at `head` (a class heap entry), which runs alone once nothing
        runs: every queued step after it is taken back (at most the pass's bound now)."""
        left = self.sched.pass_starts
        for demand in list(self.queued_of):
            while left > 0:
                job = self._latest_after(demand, head)
                if job is None:
                    break
                left -= self._back_from(job, f"{head[2]!r} runs alone and comes before it", out)

    def reserved(self, out: list) -> None:
        """On the nodes each reservation takes, the queued steps after its step are taken
        back (once per plan: its plan counted only the ones before)."""
        sched = self.sched
        for plan in sched._res.plans.values():
            sid = plan.job.spec.id
            if self.cleared.get(sid) is plan or plan.job.state != S.READY:  # (one planned ahead: not yet)
                continue
            self.cleared[sid] = plan
            key = order_key(plan.job)
            for node in plan.want:
                for pid in sorted(sched._on_node.get(node, ()), key=lambda s: sched._jobs[s].seq):
                    self._from_first_after(sched._jobs[pid], key, f"{sid!r} has a reservation there and "
                                           "comes before it", out, res=sid)
        if len(self.for_res) > self._for_res_most:  # (those that started meanwhile: never looked at again)
            jobs = sched._jobs
            ready = {sid for sid in {*self.for_res, *self.for_res.values()}
                     if sid in jobs and jobs[sid].state == S.READY}
            self.for_res = {s: r for s, r in self.for_res.items() if s in ready and r in ready}
            self._for_res_most = max(4096, 2 * len(self.for_res))
        if len(self.cleared) > len(sched._res.plans):
            self.cleared = {s: p for s, p in self.cleared.items() if p in sched._res.plans.values()}

    def barred(self, sid: str) -> bool:
        """`sid` was taken back for a reservation whose step still waits: it is not queued
        again (it may start in a pass as any ready step)."""
        res = self.for_res.get(sid)
        if res is None:
            return False
        job = self.sched._jobs.get(res)
        if job is not None and job.state == S.READY:  # (with a plan or not: one a pass may drop and make again)
            return True
        del self.for_res[sid]
        return False

    def _from_first_after(self, pred, key: tuple, why: str, out: list, res: str | None = None) -> None:
        """Take back, tail first, the steps queued behind `pred` from the first that comes
        after `key` on (what the reservation's plan leaves out, reservations._queued_end);
        `res`: the reserved step they are taken back for (`barred`)."""
        if pred.spec.id not in self.next:
            return
        chain = self._chain_of(self.next[pred.spec.id])
        first = next((i for i, j in enumerate(chain) if key < order_key(j)), None)
        if first is None:
            return
        for job in reversed(chain[first:]):
            if job.spec.id not in self.recalled:
                self._take_back(job, why, out)
                if res is not None:
                    self.for_res[job.spec.id] = res

    def _back_from(self, job, why: str, out: list) -> int:
        """Take back `job` and the steps queued behind it (tail first); how many. Never
        `job` alone from the middle of a chain: its node would hand its follower to its
        predecessor, and `job`, queued again behind that follower, would be a step the
        follower waits for no more (the waitwindow audit: a node hung so, depth 2)."""
        chain = self._chain_of(job)
        n = 0
        for j in reversed(chain):
            if j.spec.id not in self.recalled:
                self._take_back(j, why, out)
                n += 1
        return n

    def _take_back(self, job, why: str, out: list) -> None:
        sid = job.spec.id
        pred = self.behind[sid]
        why = f"taken back from {pred.placement[0].node}: {why}"
        self.recalled[sid] = why
        self.yielded.add(sid)
        self.yielding[job.demand] = self.yielding.get(job.demand, 0) + 1
        self._no_more(job)
        if self.loose:
            self._drop_from(self.loose, job)
        heap = self.order.get(job.demand)
        if heap is not None:
            heap.drop(sid)
        out.append(Withdraw(sid, job.attempt, why))

    def _stays(self, pred) -> None:
        """`pred` ended asking to run again at once (fleet.Next, fleet.Restart): it comes
        before every step queued at its priority (fleet.core.phases), so its node does not
        start the steps queued behind it but drops them (fleet.node.queued), each reported
        Dropped. They leave the window now (tail first, as for a lost node), QUEUED until
        that word comes (`stayed`), then ready again, their attempts unused (dropped);
        `pred`, started again meanwhile, takes no step behind it until then, lest one
        queued after them overtake them."""
        pid, node = pred.spec.id, pred.placement[0].node
        chain = self._chain_of(self.next[pid])
        whys = [self.recalled.get(j.spec.id) if self.recalled else None for j in chain]
        self.went_on[pid] = self.went_on.get(pid, 0) + len(chain)
        for job in reversed(chain):
            self._unlink(job)
        for job, why in zip(chain, whys):
            self.yielded.add(job.spec.id)  # (not barred from slots of unknown end: fleet.core.windowback)
            self.stayed[job.spec.id] = (job, why or f"dropped by {node}: {pid!r} went on before it", node, pred)

    def _answered(self, sid: str) -> str | None:
        """The word about `sid` dropped by its node (`_stays`) came (or its node was lost,
        or another fleet runs it): why it left, or None if it was not such a step. Its
        predecessor, running again, may take a step behind it once all of its came."""
        entry = self.stayed.pop(sid, None) if self.stayed else None
        if entry is None:
            return None
        pred = entry[3]
        pid = pred.spec.id
        left = self.went_on[pid] - 1
        if left:
            self.went_on[pid] = left
        else:
            del self.went_on[pid]
            if pred.state == S.RUNNING and pid not in self.early:
                self.started(pred)
        return entry[1]

    def _went_on_first(self, job, outcome: str) -> str | None:
        """Queued `job` was dropped by its node unasked (not cancelled, not taken back)
        while its predecessor runs: the node saw that one go on (fleet.node.queued), and
        its exit is still on its way (a parent's, with children to read, waits for them:
        fleet.control.children). As `_stays` then, now; the predecessor takes nothing
        behind it until its exit comes (`stop`). Why it left, or None if it was not so."""
        if outcome != S.CANCELLED or job.cancelled or (self.recalled and job.spec.id in self.recalled):
            return None
        pred = self.behind.get(job.spec.id)
        while pred is not None and pred.spec.id in self.behind:  # (a chain's: dropped tail first)
            pred = self.behind[pred.spec.id]
        if pred is None or pred.state != S.RUNNING:
            return None
        self.early.add(pred.spec.id)
        self._stays(pred)
        self._close(pred)  # (open still from its start: a pass would queue the dropped step behind it again)
        return self._answered(job.spec.id)
