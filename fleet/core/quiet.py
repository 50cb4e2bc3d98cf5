"""The classes of ready steps a pass need not look at, and why skipping them decides
exactly what looking at each would.

Why. A pass tries the first step of every class of demand that something released
since it last failed could hold (Pool.could_fit_since), in pass order. Steps whose
`memory` all differ are each their own class, and one core freed on a node with memory
to spare makes every class worth trying: the first starts, every other one fails at
once. Each pass cost O(classes), a suite O(steps ^ 2) (2,000 such steps: 73 s).

What a failed try does. It sets the class's `blocked_at` to the pool's release position,
notes its first step as a candidate for a reservation (its `tried` mark, and, once
passed over, maybe a reservation: fleet.core.passover), and says a Wait when the
reason's words change. After a whole pass every class left has the same `blocked_at`
(those not worth trying get it when the pass starts), unless the pass itself released
something (a reservation given back). And a try says nothing at all when nothing is
free (no core free, none held, no reservation standing) and the class's first step
already waits for "needs N cores, 0 free", is a candidate and was not passed over:
it *settled*.

The rule. A class is *quiet* while its `blocked_at` is the position recorded after the
last whole pass (`sweep_at`): the quiet classes sit in heaps in pass order, one pair per
shape of demand (cores, GPUs, spanning; memory apart), the settled apart from the
others; every other class is *odd* and is judged as ever at the start of each pass.
Whether a quiet class is worth trying is the same question for all of them (what grew
since `sweep_at`), asked of a snapshot of the nodes that grew, taken at the pass's start
(`worth`). The pass takes the classes in order from its own heap and the quiet heaps of
the shapes something grew for; once nothing is free it walks only the odd and unsettled
ones: each settled class worth trying is then tried in its turn without a word, and
what that try would record is answered when asked (`tried`, and `blocked_at` by the
sweep). Anything that could change what a quiet class's try says (its first step, its
wait, its candidacy) makes it odd first (`changed`), with what the passes so far did to
it made explicit. A pass that cannot be taken this way (a reservation standing, a
step that runs alone waiting, an allocation end, the defer-widest order) makes every
class odd and runs as before.

Cost: a pass costs O(odd classes + classes tried + shapes), plus O(log classes) a
quiet class taken; a pass that walks past more quiet classes not worth trying (memory)
than it tries takes the rest in one sweep, as before. Nothing here changes a decision
(benchmarks/distinct_demands.py compares the decisions with the base's).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort

from fleet.core import waits as W
from fleet.core.resources import _Node

_SKIPS = 64  # quiet classes walked past (not worth trying) before the rest are taken at once
_FEW = 32  # a shape's classes that could fit what grew, taken at once when this few (or a quarter)


class Quiet:
    """The quiet classes of one scheduler, the odd ones, and the pass being walked."""

    skipping = True  # False: every pass is taken as before (the tests compare the two)

    def __init__(self, sched) -> None:
        self.sched = sched
        self.odd: dict[tuple, object] = {}  # class key -> class, judged at the next pass's start
        self.all_odd = False  # every class is odd (a pass was taken as before): `odd` unused
        # shape (cores, GPUs, spanning) -> [settled heap, unsettled heap, by memory]: quiet classes
        self.shapes: dict[tuple, list] = {}
        self.prios: list = []  # (-priority, head, stamp, class) of quiet classes: the lowest priority
        self.nquiet = self.entries = 0
        self.sweep_at = 0  # every quiet class's blocked_at
        self._stamp = 0  # a class's quiet period (its entries carry it)
        self.pass_id = 0  # passes begun (a class's `seen`)
        self.lazy = -1  # the reservations' pass number whose settled classes were tried unseen
        self.in_loop = self.fast = self.walking = self.saturated = False
        self.heads: list = []  # the pass's own heap: (head, key)
        self.seen: list = []  # classes looked at in this pass (quiet or odd after it)
        self.skipped: list = []  # quiet entries walked past (not worth trying), back after the pass
        self.walks: list = []  # (heap, settled) of the shapes walked in this pass
        self.merge: list = []  # ((head, key), index in walks) of their first entries worth trying
        self.at: tuple | None = None  # the (head, key) tried last: where the pass is
        self.e0 = self.f0 = self.g0 = self.tries = self.skips = 0
        self.frontier: list | None = None

    def hook(self, res) -> None:
        """Before a pass: the reservations ask here (they may have been replaced)."""
        res.heads_lowest, res.waiting.changed, res.waiting.tried_unseen = self.lowest, self.changed_key, self.tried

    # -- changes --------------------------------------------------------------------------
    def changed(self, cls) -> None:
        """The class's first step, its wait or its candidacy may change: judge it at the
        next pass's start (and, mid-pass, try it when its turn comes, as before)."""
        cls.was = None
        if self.sched.window.size != 0:  # (the window's order across demands: fleet.core.windowfair)
            self.sched.window.headed(cls)
        if cls.quiet:
            self._unquiet(cls, self.at)
        if not self.all_odd:
            self.odd[cls.key] = cls

    def changed_key(self, key) -> None:
        cls = self.sched._classes.get(key)
        if cls is not None:
            self.changed(cls)

    def _unquiet(self, cls, at) -> None:
        """A quiet class leaves its heaps: what the passes did to it, made explicit."""
        cls.quiet = 0
        self.nquiet -= 1
        if not self.in_loop:  # between passes: the sweep's position, and the pass's try
            cls.blocked_at = self.sweep_at
            if self.lazy == self.sched._res.waiting.passno and self.worth(cls):
                self._mark_tried(cls)
            return
        cls.seen = self.pass_id
        self.seen.append(cls)
        if not self.worth(cls):
            cls.blocked_at = self.e0  # (what the pass's start gives a class not worth trying)
        elif self.saturated and at is not None and (cls.heap[0], cls.key) < at and cls.quiet_settled:
            cls.blocked_at = self.e0  # tried unseen in its turn, nothing free (e0: nothing released since)
            self._mark_tried(cls)
        else:
            cls.blocked_at = self.sweep_at  # still to come: tried in its turn, as every class worth it
            heapq.heappush(self.heads, (cls.heap[0], cls.key))

    def _mark_tried(self, cls) -> None:
        res = self.sched._res
        if res.enabled:
            res.waiting.tried[cls.key] = res.waiting.passno

    def _take(self, cls) -> None:
        """A quiet class tried in this pass, as any other."""
        cls.quiet = 0
        self.nquiet -= 1
        cls.blocked_at = self.sweep_at
        cls.seen = self.pass_id
        self.seen.append(cls)

    # -- the pass ---------------------------------------------------------------------------
    def worth(self, cls) -> bool:
        """Whether a quiet class is worth trying in this pass: Pool.could_fit_since(its
        demand, sweep_at) as of the pass's start."""
        d = cls.demand
        if d.cores > self.f0 or d.gpus > self.g0:
            return False
        if d.span or self.frontier is None:
            return True
        return any(n.fits(d) for n in self.frontier)

    def start(self, now: float) -> list:
        """The pass begins: the reservations' begin (it may free holds), then the odd
        classes worth trying in a heap, as the walk of every class made it before; the
        quiet ones follow in next(), or, a shape with few worth it, join the heap now."""
        s = self.sched
        pool, res, classes = s.pool, s._res, s._classes
        self.hook(res)
        res.begin(pool, now, classes)
        self.pass_id += 1
        self.in_loop, self.at, self.tries, self.skips = True, None, 0, 0
        self.seen, self.skipped, self.walks, self.merge = [], [], [], []
        self.e0 = end = pool.releases.end()
        self.fast = (self.skipping and not res.plans and ("exclusive",) not in classes and s.deadline.drain_at is None
                     and s.ranks.deferral is None)
        self.walking = self.saturated = False
        heads = self.heads = []
        if not self.fast:  # as before: every class judged
            if self.nquiet:
                self._all_odd()
            self.all_odd, self.odd = True, {}
            for cls in classes.values():
                if not cls.heap:
                    continue
                if cls.blocked_at is not None and not cls.exclusive and not res.revisit(cls, now, s._jobs):
                    if not pool.could_fit_since(cls.demand, cls.blocked_at):
                        cls.blocked_at = end
                        continue
                heads.append((cls.heap[0], cls.key))
            heapq.heapify(heads)
            return heads
        self.f0, self.g0 = pool.free_cores, pool.free_gpus
        if self.nquiet:  # (else nothing to judge by it)
            grown = pool.releases.since(self.sweep_at)
            self.frontier = None if grown is None else _snapshot(pool, grown)
        odd = classes if self.all_odd else self.odd
        self.all_odd, self.odd = False, {}
        for key, cls in odd.items():
            if classes.get(key) is not cls or not cls.heap or cls.seen == self.pass_id or cls.quiet:
                continue
            cls.seen = self.pass_id
            self.seen.append(cls)
            if cls.blocked_at is not None and not cls.exclusive and not res.revisit(cls, now, s._jobs):
                if not pool.could_fit_since(cls.demand, cls.blocked_at):
                    cls.blocked_at = end
                    continue
            heads.append((cls.heap[0], key))
        if self.nquiet:
            self._live()
            self.walking = True
            self._merge_init()
            self.check()
        heapq.heapify(heads)
        return heads

    def _live(self) -> None:
        """Of the shapes something that grew could hold (as of now), the quiet heaps to
        walk, or, when few of a shape's classes could fit it (memory), those at once."""
        f = self.frontier
        for (cores, gpus, span), sh in self.shapes.items():
            if cores > self.f0 or gpus > self.g0:
                continue
            if not span and f is not None:
                fit = [n.free_mem for n in f if len(n.free_cores) >= cores and len(n.free_gpus) >= gpus]
                if not fit:
                    continue
                mems = sh[2]
                k = bisect_right(mems, (max(fit), float("inf")))
                if k <= _FEW or 4 * k < len(mems):
                    for e in mems[:k]:
                        cls = e[2]
                        if cls.quiet == e[1] and self.worth(cls):
                            self._take(cls)
                            self.heads.append((cls.heap[0], cls.key))
                    continue
            self.walks += [(sh[0], True), (sh[1], False)]

    def _merge_init(self) -> None:
        self.merge = []
        for i, (_, settled) in enumerate(self.walks):
            if not self.walking:  # (took the rest at once)
                return
            if not (self.saturated and settled):
                self._push_top(i)

    def _push_top(self, i: int) -> None:
        top = self._top(self.walks[i][0])
        if top is not None and self.walking:
            heapq.heappush(self.merge, ((top[0], top[1]), i))

    def _top(self, h: list):
        """The first entry of a quiet heap worth trying (stale ones dropped, those not
        worth trying walked past), or None."""
        while h:
            e = h[0]
            cls = e[3]
            if cls.quiet != e[2]:
                heapq.heappop(h)
                self.entries -= 1
                continue
            if self.worth(cls):
                return e
            self.skipped.append(heapq.heappop(h))
            self.entries -= 1
            self.skips += 1
            if self.skips > _SKIPS + 8 * self.tries:
                self._rest()
                return None
        return None

    def _first(self):
        """The merge's first entry, checked (None: no quiet class left worth trying)."""
        merge = self.merge
        while self.walking and merge:
            pos, i = merge[0]
            h = self.walks[i][0]
            if h and h[0][3].quiet == h[0][2] and (h[0][0], h[0][1]) == pos:
                return merge[0]
            heapq.heappop(merge)
            self._push_top(i)
        return None

    def more(self) -> bool:
        """Whether the pass has a class left to try (next() would not be None)."""
        return bool(self.heads) or self._first() is not None

    def next(self) -> tuple | None:
        """The next class to try, in pass order: (head, key), or None at the pass's end."""
        if not self.walking:  # (the pass's own heap only: as before)
            return heapq.heappop(self.heads) if self.heads else None
        first = self._first()
        heads = self.heads
        if first is not None and (not heads or first[0] < heads[0]):
            heapq.heappop(self.merge)
            self.at = first[0]
            self._take(heapq.heappop(self.walks[first[1]][0])[3])
            self.entries -= 1
            self._push_top(first[1])
        elif heads:
            self.at = heapq.heappop(heads)
        else:
            return None
        self.tries += 1
        return self.at

    def check(self) -> None:
        """After a try: nothing free (no core, nothing held, no reservation, nothing
        released in this pass): the settled classes are tried unseen from here on.
        Something free again while they are: the rest are taken as before."""
        if not self.walking:
            return
        s = self.sched
        pool, res = s.pool, s._res
        still = pool.free_cores == 0 and res.held_cores == 0 and not res.plans and pool.releases.end() == self.e0
        if still and not self.saturated:
            self.saturated = True
            self.lazy = res.waiting.passno
            self._merge_init()
        elif self.saturated and not still:
            self._rest()

    def _rest(self) -> None:
        """Every quiet class left worth trying, taken at once: into the pass's heap if
        still to come, else (tried unseen) made explicit."""
        at = self.at
        for h, settled in self.walks:
            keep = []
            for e in h:
                cls = e[3]
                if cls.quiet != e[2]:
                    continue
                if self.worth(cls):
                    cls.quiet_settled = settled
                    self._unquiet(cls, at)
                else:
                    keep.append(e)
            heapq.heapify(keep)
            h[:] = keep
        self.walks, self.merge = [], []
        self.walking = self.saturated = False
        self.lazy = -1  # (what it tried unseen is marked now)

    def finish(self, whole: bool) -> None:
        """The pass ended (`whole`: not cut short): the sweep, or every quiet class made
        explicit when the pass left them unequal; the classes it looked at, quiet or odd."""
        s = self.sched
        end = s.pool.releases.end()
        self.in_loop = False
        if not self.fast:
            self.sweep_at = end
            return
        if whole and end == self.e0:  # every quiet class's blocked_at is `end`
            for e in self.skipped:
                if e[3].quiet == e[2]:
                    self._file(e[3], e[2])
        else:  # those worth trying and cut short keep theirs, the others get e0
            for cls in s._classes.values():
                cls.was = None
                if cls.quiet:
                    cls.quiet = 0
                    cls.blocked_at = self.sweep_at if not whole and self.worth(cls) else self.e0
                    self.odd[cls.key] = cls
            self.shapes, self.prios, self.nquiet, self.entries = {}, [], 0, 0
        self.skipped, self.walks, self.merge = [], [], []
        self.sweep_at = end
        if not self.saturated:
            self.lazy = -1
        classes = s._classes
        for cls in self.seen:
            if classes.get(cls.key) is not cls or not cls.heap or cls.quiet:
                continue
            if cls.blocked_at == end and not cls.exclusive and self.odd.get(cls.key) is not cls:
                self._quieten(cls)
            else:
                self.odd[cls.key] = cls
        self.seen = []
        self.walking = self.saturated = False

    # -- heaps --------------------------------------------------------------------------------
    def _quieten(self, cls) -> None:
        """Quiet (again): with its last period's stamp when its first step is the same
        (its entry by memory is then still good), else a new one."""
        was = cls.was
        self.nquiet += 1
        cls.quiet_settled = self._settled(cls)
        if was is not None and was[1] == cls.heap[0]:
            cls.quiet = was[0]
        else:
            self._stamp += 1
            cls.quiet = self._stamp
            cls.was = (self._stamp, cls.heap[0])
        self._file(cls, cls.quiet)
        if self.sched._res.enabled:  # (only reservations ask for the lowest priority)
            heapq.heappush(self.prios, (-cls.heap[0][0], cls.heap[0], cls.quiet, cls))
        if was is not cls.was:  # (a new stamp: its entry by memory too)
            d = cls.demand
            insort(self.shapes[(d.cores, d.gpus, d.span)][2], (d.memory or 0, cls.quiet, cls))
            self.entries += 1
        # Rebuilt once the entries are twice what a rebuild leaves (two a quiet class): a
        # rebuild, O(quiet classes), then comes after 2 * nquiet re-filings at least, not
        # every few hundred (at 2 * nquiet + 1024, with thousands of classes, the rebuilds
        # were half of a pass's time).
        if self.entries > 4 * self.nquiet + 1024 or len(self.prios) > 4 * self.nquiet + 1024:
            self._compact()

    def _file(self, cls, stamp: int) -> None:
        self.entries += 1
        d = cls.demand
        sh = self.shapes.get((d.cores, d.gpus, d.span))
        if sh is None:
            sh = self.shapes[(d.cores, d.gpus, d.span)] = [[], [], []]
        heapq.heappush(sh[0] if cls.quiet_settled else sh[1], (cls.heap[0], cls.key, stamp, cls))

    def _settled(self, cls) -> bool:
        """Whether trying the class with nothing free says and records nothing new (but
        its blocked_at and tried mark): see the module's docstring."""
        s = self.sched
        head = s._jobs[cls.heap[0][2]]
        why = head.why
        if why is None or why.cause != W.CORES or why.free_cores != 0:
            return False
        res = s._res
        return not res.enabled or (res.waiting.of.get(cls.key) is head and res.waiting.passed.get(cls.key) is not head)

    def _compact(self) -> None:
        self.shapes, self.prios = {}, []
        for cls in self.sched._classes.values():
            cls.was = None if not cls.quiet else cls.was
            if cls.quiet:
                self._file(cls, cls.quiet)
                self.prios.append((-cls.heap[0][0], cls.heap[0], cls.quiet, cls))
                d = cls.demand
                self.shapes[(d.cores, d.gpus, d.span)][2].append((d.memory or 0, cls.quiet, cls))
        heapq.heapify(self.prios)
        for sh in self.shapes.values():
            sh[2].sort(key=lambda e: e[:2])
        self.entries = 2 * self.nquiet

    def _all_odd(self) -> None:
        """Every quiet class made odd (a pass taken as before)."""
        for cls in self.sched._classes.values():
            cls.was = None
            if cls.quiet:
                cls.quiet = 0
                cls.blocked_at = self.sweep_at
        self.shapes, self.prios, self.nquiet, self.entries = {}, [], 0, 0

    def lowest(self) -> int:
        """The lowest priority (largest number) among the classes' first steps
        (fleet.core.reservations), without a walk of the quiet ones."""
        classes = self.sched._classes
        if self.all_odd:
            return max((c.heap[0][0] for c in classes.values() if c.heap), default=0)
        m = max((c.heap[0][0] for k, c in self.odd.items() if c.heap and classes.get(k) is c), default=0)
        p = self.prios
        while p and p[0][3].quiet != p[0][2]:
            heapq.heappop(p)
        return max(m, -p[0][0]) if p else m

    def tried(self, key) -> bool:
        """Whether the class was tried unseen in this pass (its candidate's `tried` mark)."""
        if self.lazy != self.sched._res.waiting.passno:
            return False
        cls = self.sched._classes.get(key)
        return cls is not None and bool(cls.quiet) and self.worth(cls)


def _snapshot(pool, grown) -> list:
    """The nodes that grew, as they are now (free counts only), the same kind of node
    with less of everything left out: `_Node.fits` asked of them answers as of now."""
    nodes = pool._nodes
    if len(grown) == 1:
        n = nodes[grown[0]]
        return [_Node(n.idx, n.spec, range(len(n.free_cores)), range(len(n.free_gpus)), n.free_mem)] if n.alive else []
    seen: dict[tuple, _Node] = {}
    for i in set(grown):
        n = nodes[i]
        if not n.alive:
            continue
        k = (len(n.free_cores), len(n.free_gpus), n.free_mem, len(n.spec.cores), n.spec.memory)
        if k not in seen:
            seen[k] = _Node(n.idx, n.spec, range(k[0]), range(k[1]), n.free_mem)
    if len(seen) > 256:
        return list(seen.values())
    kept: list = []
    for k in sorted(seen, reverse=True):
        if not any(o[3] == k[3] and o[4] == k[4] and o[0] >= k[0] and o[1] >= k[1] and o[2] >= k[2] for o in kept):
            kept.append(k)
    return [seen[k] for k in kept]
