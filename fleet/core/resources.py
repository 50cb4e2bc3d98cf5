"""The allocation's resources, node by node, and reservations on them.

Each node keeps its own core ids, GPU ids and memory; nodes may differ. A step that
may not span takes cores and GPUs from one node (best fit: the node with the fewest
free cores that holds it, lowest join order on ties); one that may span takes whole
rank units from the nodes with the most free cores first, so it touches few nodes.
Memory is admission control only. A step without a memory figure takes its
proportional share of each node it lands on, so while every step does that, memory
never holds anything up; steps that declare more than their share can strand a
node's cores, and then the others wait on memory too.

Finding a node must not cost a scan of the allocation per decision: nodes sit in
buckets by free core count (lazy heaps of join indices), and every release is logged
so a blocked demand is re-tried only when a node it could fit on has changed. Every
change to a node is logged too, so that each kind of demand keeps, up to date, the
nodes that can hold it (one node) or the cores it could gather (spanning): nodes
short of GPUs or memory are not looked at again until they change. The logs keep
only their recent entries (fleet.core.nodelog), so they do not grow with the steps.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from dataclasses import dataclass, field

from fleet.core import ppnblocks
from fleet.core.nodelog import NodeLog
from fleet.core.spangpus import place_span_gpus, rank_cap
from fleet.core.units import format_memory

_new, _set = object.__new__, object.__setattr__


@dataclass(frozen=True)
class NodeSpec:
    """What a node brings: core ids the job may use, GPU ids, memory in bytes."""

    name: str
    cores: tuple[int, ...]
    gpus: tuple[int, ...] = ()
    memory: int = 0


@dataclass(frozen=True)
class Slot:
    """The part of a placement on one node."""

    node: str
    cores: tuple[int, ...]
    gpus: tuple[int, ...] = ()
    memory: int = 0


Placement = tuple[Slot, ...]


@dataclass(frozen=True)
class Demand:
    """What one step asks of the pool once its width is decided.

    `unit` is the granularity on a node (threads per MPI rank): a spanning step gets
    a multiple of `unit` cores on every node it touches. `memory` None = proportional.
    `blocks`: its ranks go in blocks of one count per node (fleet.core.ppnblocks).
    """

    cores: int
    gpus: int = 0
    memory: int | None = None
    span: bool = False
    unit: int = 1
    blocks: bool = False

    # The scheduler's hot tables are keyed by demands (fleet.core.demands): the hash,
    # the generated one's value, is taken once, not five fields' worth per lookup.
    def __post_init__(self) -> None:
        key = (self.cores, self.gpus, self.memory, self.span, self.unit)  # (without blocks: as before them)
        object.__setattr__(self, "_h", hash(key + (True,) if self.blocks else key))

    def __hash__(self) -> int:
        return self._h


@dataclass
class _Node:
    idx: int
    spec: NodeSpec
    free_cores: list[int]
    free_gpus: list[int]
    free_mem: int
    alive: bool = True

    def mem_for(self, cores: int, d: Demand) -> int:
        if d.memory is None:
            return self.spec.memory * cores // len(self.spec.cores) if self.spec.cores else 0
        return -(-d.memory * cores // d.cores)  # this node's share of the declared total

    def fits(self, d: Demand) -> bool:
        return (self.alive and len(self.free_cores) >= d.cores and len(self.free_gpus) >= d.gpus
                and self.free_mem >= self.mem_for(d.cores, d))


class Pool:
    """Free resources per node; place() reserves, release() gives back."""

    def __init__(self) -> None:
        self._nodes: list[_Node] = []
        self._by_name: dict[str, _Node] = {}
        self._buckets: dict[int, list[int]] = {}
        self._keys: list[int] = []  # the buckets' free core counts, ascending (best fit bisects it)
        self.free_cores = 0
        self.free_gpus = 0
        self.total_cores = 0
        # Node indices whose free resources grew, in order (joins and releases).
        self.releases = NodeLog()
        # Node indices whose free resources changed at all, in order (and losses).
        self._changed = NodeLog()
        self._trim_at = 8192  # the logs' length that drops their old entries (_trim)
        self._fit: dict[Demand, list] = {}   # one-node demand -> [log position, heap]
        self._reach: dict[tuple, list] = {}  # spanning kind -> [log position, per node..., sums]

    # -- membership -------------------------------------------------------------
    def add(self, spec: NodeSpec) -> None:
        if spec.name in self._by_name and self._by_name[spec.name].alive:
            raise ValueError(f"node {spec.name!r} joined twice")
        node = _Node(len(self._nodes), spec, sorted(spec.cores), sorted(spec.gpus), spec.memory)
        self._nodes.append(node)
        self._by_name[spec.name] = node
        self.free_cores += len(node.free_cores)
        self.free_gpus += len(node.free_gpus)
        self.total_cores += len(spec.cores)
        self._file(node)
        self.releases.append(node.idx)

    def remove(self, name: str) -> None:
        """Forget a lost node; reservations on it simply vanish with it."""
        node = self._by_name[name]
        if not node.alive:
            return
        node.alive = False
        self._changed.append(node.idx)
        self.free_cores -= len(node.free_cores)
        self.free_gpus -= len(node.free_gpus)
        self.total_cores -= len(node.spec.cores)

    def nodes(self) -> list[NodeSpec]:
        return [n.spec for n in self._nodes if n.alive]

    def has(self, name: str) -> bool:
        n = self._by_name.get(name)
        return n is not None and n.alive

    def spec_of(self, name: str) -> NodeSpec | None:
        """What the node brings, or None for a node not in the pool."""
        node = self._by_name.get(name)
        return node.spec if node is not None and node.alive else None

    def free_on(self, name: str) -> tuple[int, int, int]:
        n = self._by_name[name]
        return len(n.free_cores), len(n.free_gpus), n.free_mem

    # -- placing ----------------------------------------------------------------
    def place(self, d: Demand) -> Placement | None:
        """Reserve resources for d and return where, or None if it does not fit now."""
        if d.cores > self.free_cores or d.gpus > self.free_gpus:
            return None
        if d.span:
            return self._place_span(d)
        node = self._best_fit(d)  # one node
        if node is None:
            return None
        return (self._take(node, d.cores, d.gpus, node.mem_for(d.cores, d)),)

    def fits(self, d: Demand) -> bool:
        """Whether d would place now (nothing is taken)."""
        if d.cores > self.free_cores or d.gpus > self.free_gpus:
            return False
        return not self._span_short(d) if d.span else self._best_fit(d) is not None

    def _place_span(self, d: Demand) -> Placement | None:
        if self._span_short(d):
            return None  # what the scans below would conclude, known without them
        if d.gpus:
            return place_span_gpus(self, d)
        chosen: list[tuple[_Node, int]] = []
        need = d.cores
        for k in reversed(self._keys[bisect_left(self._keys, d.unit):]):
            for node in self._bucket_nodes(k):
                usable = (len(node.free_cores) // d.unit) * d.unit
                take = min(usable, need)
                while take > 0 and node.free_mem < node.mem_for(take, d):
                    take -= d.unit
                if take > 0:
                    chosen.append((node, take))
                    need -= take
                if need == 0:
                    break
            if need == 0:
                break
        if need:
            return None
        if d.blocks and not ppnblocks.kept(t for _, t in chosen):  # (most free first breaks the rule)
            return ppnblocks.place(self, d)
        gpus_left = d.gpus
        plan = []
        for node, take in chosen:
            g = min(len(node.free_gpus), gpus_left)
            gpus_left -= g
            plan.append((node, take, g))
        if gpus_left:
            return None
        return tuple(self._take(node, take, g, node.mem_for(take, d)) for node, take, g in plan)

    def _take(self, node: _Node, cores: int, gpus: int, mem: int) -> Slot:
        got_c, node.free_cores = node.free_cores[:cores], node.free_cores[cores:]
        got_g, node.free_gpus = node.free_gpus[:gpus], node.free_gpus[gpus:]
        node.free_mem -= mem
        self.free_cores -= cores
        self.free_gpus -= gpus
        self._file(node)
        slot = _new(Slot)  # Slot(...) without the frozen __init__: one per start (fleet.core.made)
        _set(slot, "__dict__", {"node": node.spec.name, "cores": tuple(got_c), "gpus": tuple(got_g), "memory": mem})
        return slot

    def release(self, placement: Placement) -> None:
        """Give a placement back (parts on nodes that were lost are ignored)."""
        for slot in placement:
            node = self._by_name.get(slot.node)
            if node is None or not node.alive:
                continue
            if len(slot.cores) <= 8:  # a few cores back: in place (the node's list is its own)
                for c in slot.cores:
                    insort(node.free_cores, c)
            else:
                node.free_cores = sorted(node.free_cores + list(slot.cores))
            node.free_gpus = sorted(node.free_gpus + list(slot.gpus))
            node.free_mem += slot.memory
            self.free_cores += len(slot.cores)
            self.free_gpus += len(slot.gpus)
            self._file(node)
            self.releases.append(node.idx)
        if len(self._changed) > self._trim_at:
            self._trim()

    def _trim(self) -> None:
        # Kept: more entries than nodes, the readers' own rebuild threshold (fleet.core.nodelog).
        keep = 2 * len(self._nodes) + 4096
        self.releases.trim(keep)
        self._changed.trim(keep)
        self._trim_at = 2 * keep

    def take_on(self, name: str, cores: int, gpus: int, memory: int) -> Slot:
        """Take these amounts (at most what is free) from the named node now: a
        reservation's hold (fleet.core.reservations). release() gives them back."""
        node = self._by_name[name]
        return self._take(node, min(cores, len(node.free_cores)), min(gpus, len(node.free_gpus)),
                          max(0, min(memory, node.free_mem)))

    def could_fit_since(self, d: Demand, since: int) -> bool:
        """Cheap test before re-trying a demand that failed when `releases` had
        `since` entries: nothing grew that it could use means it still cannot fit."""
        if d.cores > self.free_cores or d.gpus > self.free_gpus:
            return False
        if d.span:
            return True
        nodes = self._nodes
        grown = self.releases.since(since)
        return grown is None or any(nodes[i].fits(d) for i in set(grown))

    # -- bucket index -------------------------------------------------------------
    def _file(self, node: _Node) -> None:
        k = len(node.free_cores)
        heap = self._buckets.get(k)
        if heap is None:
            heap = self._buckets[k] = []
            insort(self._keys, k)
        heapq.heappush(heap, node.idx)
        if len(heap) > 2 * len(self._nodes) + 64:
            self._bucket_nodes(k)  # drops the stale entries
        self._changed.append(node.idx)

    _MEMOS = 64  # kinds of demand whose index is kept (least recently used dropped first)

    def _best_fit(self, d: Demand) -> _Node | None:
        """The live node with the fewest free cores that holds d, lowest join order on
        ties. Cheap when the first node of the lowest bucket that could hold d does;
        otherwise (nodes short of GPUs or memory for d come first) d gets a lazy heap of
        (free cores, join index) of the nodes that held it when they last changed,
        brought up to date from the change log, so those nodes cost nothing until they
        change."""
        nodes = self._nodes
        log = self._changed
        memo = self._fit.pop(d, None)
        if memo is None:
            keys = self._keys
            for k in keys[bisect_left(keys, d.cores):]:
                heap = self._buckets[k]
                while heap and not (nodes[heap[0]].alive and len(nodes[heap[0]].free_cores) == k):  # (_valid)
                    heapq.heappop(heap)
                if not heap:
                    del self._buckets[k]
                    del keys[bisect_left(keys, k)]
                    continue
                if nodes[heap[0]].fits(d):
                    return nodes[heap[0]]
                break
            else:
                return None  # no node has the cores
        if memo is None or log.end() - memo[0] > len(nodes) or len(memo[1]) > 2 * len(nodes) + 64:
            heap = [(len(n.free_cores), n.idx) for n in nodes if n.fits(d)]
            heapq.heapify(heap)
            memo = [log.end(), heap]
        else:
            heap = memo[1]
            for i in set(log.since(memo[0])):
                n = nodes[i]
                if n.fits(d):
                    heapq.heappush(heap, (len(n.free_cores), i))
            memo[0] = log.end()
        self._fit[d] = memo
        if len(self._fit) > self._MEMOS:
            del self._fit[next(iter(self._fit))]
        while heap:
            k, i = heap[0]
            n = nodes[i]
            if len(n.free_cores) == k and n.fits(d):
                return n
            heapq.heappop(heap)  # stale: the node changed since (it has a newer entry if it fits)
        return None

    def _span_short(self, d: Demand) -> bool:
        """True when a spanning demand certainly cannot be placed now, known without a
        scan: over live nodes, the whole units each holds with its memory share add up
        to fewer cores than it needs, or (with GPUs) the ranks each holds beside its
        share of the GPUs (fleet.core.spangpus.rank_cap) add up to fewer than its ranks.
        These are exactly the failures of the scans in _place_span and place_span_gpus
        (keep them so). Kept per kind of demand and brought up to date from the change
        log; with GPUs the nodes are counted by (ranks, free GPUs), so the test costs the
        distinct pairs, not the nodes."""
        key = (d.unit, d.memory, d.cores if d.memory is not None else 0)
        nodes = self._nodes
        log = self._changed
        memo = self._reach.pop(key, None)
        if memo is None or log.end() - memo[0] > len(nodes):
            memo = [log.end(), [], [], 0, {}, {}]
            todo = range(len(nodes))
        else:
            todo = set(log.since(memo[0]))
            memo[0] = log.end()
        self._reach[key] = memo
        if len(self._reach) > self._MEMOS:
            del self._reach[next(iter(self._reach))]
        cores, gpus, total, by_pair = memo[1], memo[2], memo[3], memo[4]  # per node; (cores, GPUs) -> nodes
        by_t = memo[5]  # cores -> nodes
        if len(cores) < len(nodes):
            cores.extend([0] * (len(nodes) - len(cores)))
            gpus.extend([0] * (len(nodes) - len(gpus)))
        for i in todo:
            n = nodes[i]
            t = (len(n.free_cores) // d.unit) * d.unit if n.alive else 0
            while t > 0 and n.free_mem < n.mem_for(t, d):
                t -= d.unit
            g = len(n.free_gpus) if t > 0 else 0
            total += t - cores[i]
            ppnblocks.recount(by_t, cores[i], t)
            if gpus[i]:
                old = (cores[i], gpus[i])
                if by_pair[old] == 1:
                    del by_pair[old]
                else:
                    by_pair[old] -= 1
            if g:
                by_pair[t, g] = by_pair.get((t, g), 0) + 1
            cores[i], gpus[i] = t, g
        memo[3] = total
        if total < d.cores or (d.blocks and ppnblocks.short(d, by_t, by_pair)):
            return True
        if d.gpus:
            ranks, held = d.cores // d.unit, 0
            for (t, g), k in by_pair.items():
                held += k * rank_cap(t // d.unit, g, ranks, d.gpus)
                if held >= ranks:
                    return False
            return True
        return False

    def _valid(self, k: int, idx: int) -> bool:
        n = self._nodes[idx]
        return n.alive and len(n.free_cores) == k

    def _bucket_nodes(self, k: int):
        """Valid nodes of bucket k in join order (a snapshot: callers may change them)."""
        heap = self._buckets.get(k)
        if heap is None:
            return []
        live = sorted({i for i in heap if self._valid(k, i)})
        self._buckets[k] = list(live)  # sorted list is a valid heap; drops stale entries
        return [self._nodes[i] for i in live]


@dataclass(frozen=True)
class Capacity:
    """The allocation's shape, for deciding widths once: distinct node shapes and totals."""

    shapes: tuple[tuple[int, int, int], ...]  # (cores, gpus, memory) of each distinct node kind
    total_cores: int
    total_gpus: int
    total_memory: int
    nodes: int = 0
    _units: dict = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def of(cls, nodes: list[NodeSpec]) -> "Capacity":
        shapes: dict[tuple[int, int, int], int] = {}
        for n in nodes:
            key = (len(n.cores), len(n.gpus), n.memory)
            shapes[key] = shapes.get(key, 0) + 1
        return cls(tuple(sorted(shapes)), sum(len(n.cores) for n in nodes),
                   sum(len(n.gpus) for n in nodes), sum(n.memory for n in nodes), len(nodes),
                   {k: v for k, v in shapes.items()})

    def _gpu_width(self, w: int, min_cores: int, unit: int, gpus: int, memory: int | None) -> int | str:
        """The widest of a spanning GPU step's widths from `w` down to `min_cores` whose
        ranks the nodes hold beside their share of its GPUs (fleet.core.spangpus); a
        string says why none does. What the nodes hold grows with the ranks, so no count
        between held and ranks can fit: down to held, as for memory."""
        ranks = first = w // unit
        first_held = -1
        while True:
            held = self._ranks_held(ranks * unit, unit, gpus, memory)
            if held >= ranks:
                return ranks * unit
            first_held = held if first_held < 0 else first_held
            ranks = held
            if not ranks or ranks * unit < min_cores:
                return (f"needs {_n(gpus, 'GPU')} for {_n(first, 'rank')}, each node holding its share of "
                        f"the GPUs with its ranks; the nodes hold {first_held} of the ranks so")

    def _ranks_held(self, w: int, unit: int, gpus: int, memory: int | None) -> int:
        """The ranks of a spanning step of `w` cores that the nodes hold beside their share
        of its `gpus` (and of its `memory`)."""
        ranks, held = w // unit, 0
        for (c, g, m), count in self._units.items():
            room = c // unit if not memory else min(c // unit, (m * w // memory) // unit)
            held += count * rank_cap(room, g, ranks, gpus)
        return held

    def width(self, cores: int, min_cores: int, unit: int, gpus: int, memory: int | None,
              span: bool, blocks: bool = False) -> int | str:
        """Cores the step gets, decided from the whole allocation: its target, reduced
        toward its minimum only when the allocation is smaller (`blocks`: as ranks in
        blocks of one count per node hold it). A string says why it can never run."""
        if not self.shapes:
            return "the allocation has no nodes"
        largest = max(c for c, _, _ in self.shapes)
        if unit > largest:  # an MPI rank's threads share one node (else: "the allocation has 0 cores")
            return f"a rank needs {_n(unit, 'core')} on one node; the largest node has {largest}"
        if span:
            cap = sum(((c // unit) * unit) * count for (c, _, _), count in self._units.items())
            if gpus > self.total_gpus:
                return f"needs {_n(gpus, 'GPU')}; the allocation has {self.total_gpus}"
            if memory is not None and memory > self.total_memory:
                return f"needs {format_memory(memory)} of memory; the allocation has {format_memory(self.total_memory)}"
            if cap < min_cores:
                return f"needs at least {_n(min_cores, 'core')}; the allocation has {cap}"
            w = min(cores, cap)
            if memory:
                # A node holds t of the w cores only with t/w of the memory: ceil(memory*t/w) <= m.
                # What the nodes hold grows with w, so no width between s and w can fit.
                while w >= min_cores:
                    s = sum(min((c // unit) * unit, (m * w // memory) // unit * unit) * count
                            for (c, _, m), count in self._units.items())
                    if s >= w:
                        break
                    w = s
                if w < min_cores:
                    return (f"needs {format_memory(memory)} of memory over at least {_n(min_cores, 'core')}; no set of "
                            f"nodes holds both (each node takes its share of the memory with its cores)")
            w = self._gpu_width(w, min_cores, unit, gpus, memory) if gpus else w
            return ppnblocks.width(self._units, w, min_cores, unit, gpus, memory) if blocks and type(w) is int else w
        fitting = [c for c, g, m in self.shapes if g >= gpus and (memory is None or m >= memory)]
        if not fitting:  # named: only what no node has (GPUs, memory), else the two together
            what = []
            if not any(g >= gpus for _, g, _ in self.shapes):
                what.append(_n(gpus, "GPU"))
            if memory is not None and not any(m >= memory for _, _, m in self.shapes):
                what.append(f"{format_memory(memory)} of memory")
            if not what:
                what = [f"both {_n(gpus, 'GPU')}", f"{format_memory(memory or 0)} of memory"]
            return "no node has " + " and ".join(what) + " (the step may not span nodes)"
        cap = (max(fitting) // unit) * unit
        if cap < min_cores:
            return (f"needs at least {_n(min_cores, 'core')} on one node; the largest node that "
                    f"could hold it has {max(fitting)} (the step may not span nodes)")
        return min(cores, cap)


def _n(n: int, word: str) -> str:
    """A count with its noun in the right number: "1 GPU", "2 GPUs"."""
    return f"{n} {word}" + ("" if n == 1 else "s")
