"""The step graph: explicit and file dependencies, and what is wrong with them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fleet.core.problems import Problem
from fleet.core.suite import StepSpec


@dataclass(frozen=True)
class Graph:
    """Effective dependencies (explicit deps plus the producers of a step's inputs)."""

    steps: tuple[StepSpec, ...]
    deps: dict[str, tuple[str, ...]]

    def dependents(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {s.id: [] for s in self.steps}
        for s in self.steps:
            for d in self.deps[s.id]:
                out[d].append(s.id)
        return out


def _norm(p: str) -> str:
    return os.path.normpath(p)


def build_graph(steps: tuple[StepSpec, ...] | list[StepSpec], run_dir: Path | None = None,
                known_done: frozenset[str] = frozenset()) -> tuple[Graph, list[Problem]]:
    """Build the graph and list every problem: unknown deps, missing inputs,
    two producers of one output, and cycles (each naming every step on it).

    An input that no step produces must exist under run_dir (when run_dir is given).
    """
    steps = tuple(steps)
    problems: list[Problem] = []
    ids = {s.id for s in steps}
    producer: dict[str, str] = {}
    for s in steps:
        for out in s.outputs:
            key = _norm(out)
            if key in producer and producer[key] != s.id:
                problems.append(Problem(s.source, s.id, "outputs",
                                        f"{out!r} is also produced by step '{producer[key]}'"))
            else:
                producer[key] = s.id
    deps: dict[str, tuple[str, ...]] = {}
    for s in steps:
        ds = list(s.deps)
        for d in s.deps:
            if d not in ids and d not in known_done:
                problems.append(Problem(s.source, s.id, "deps", f"'{d}' names no step"))
        for inp in s.inputs:
            p = producer.get(_norm(inp))
            if p is not None:
                if p not in ds:
                    ds.append(p)
            elif run_dir is not None and not (run_dir / inp).exists():
                problems.append(Problem(s.source, s.id, "inputs",
                                        f"{inp!r} is produced by no step and does not exist in {run_dir}"))
        deps[s.id] = tuple(d for d in ds if d in ids)
    graph = Graph(steps, deps)
    for cycle in find_cycles(graph):
        first = next(s for s in steps if s.id == cycle[0])
        problems.append(Problem(first.source, first.id, "deps",
                                "dependency cycle through steps " + " -> ".join(cycle + [cycle[0]])))
    return graph, problems


def find_cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components that form cycles (Tarjan, iterative), each in
    the order the cycle is walked, starting from its earliest step in setup order."""
    order = {s.id: s.order for s in graph.steps}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    counter = 0
    for root in (s.id for s in graph.steps):
        if root in index:
            continue
        work = [(root, iter(graph.deps[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph.deps[w])))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph.deps[v]:
                    sccs.append(_walk(comp, graph, order))
    sccs.sort(key=lambda c: order[c[0]])
    return sccs


def _walk(comp: list[str], graph: Graph, order: dict[str, int]) -> list[str]:
    """Order a cycle's members along dependency edges, from the earliest in setup order."""
    members = set(comp)
    start = min(comp, key=order.__getitem__)
    path, seen, v = [start], {start}, start
    while True:
        nxt = [w for w in graph.deps[v] if w in members and w not in seen]
        if not nxt:
            break
        v = min(nxt, key=order.__getitem__)
        path.append(v)
        seen.add(v)
    # Members not on the simple walk are still on the cycle's component: name them too.
    path.extend(sorted(members - seen, key=order.__getitem__))
    return path


def critical_path(graph: Graph, duration: dict[str, float]) -> tuple[float, list[str]]:
    """The dependency floor: the longest chain of durations, and the steps on it."""
    best: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for sid in topological_order(graph):
        prev = max(graph.deps[sid], key=lambda d: best[d], default=None)
        best[sid] = duration.get(sid, 0.0) + (best[prev] if prev is not None else 0.0)
        via[sid] = prev
    if not best:
        return 0.0, []
    end = max(best, key=best.__getitem__)
    chain = [end]
    while via[chain[-1]] is not None:
        chain.append(via[chain[-1]])
    return best[end], chain[::-1]


def topological_order(graph: Graph) -> list[str]:
    """Steps with every dependency before its dependents, ties in setup order."""
    import heapq
    order = {s.id: s.order for s in graph.steps}
    indeg = {s.id: len(graph.deps[s.id]) for s in graph.steps}
    dependents = graph.dependents()
    heap = [(order[s], s) for s, n in indeg.items() if n == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, v = heapq.heappop(heap)
        out.append(v)
        for w in dependents[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (order[w], w))
    return out
