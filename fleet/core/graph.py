"""The step graph: explicit and file dependencies, and what is wrong with them.

Pure: whether an input no step produces exists on disk is for the caller to say
(fleet.control.checks looks), through `build_graph`'s `unproduced` hook.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from typing import Callable, Container, Iterable, Mapping

from fleet.core.outputnest import nested_outputs
from fleet.core.problems import Problem
from fleet.core.steppaths import path_clashes
from fleet.core.suite import StepSpec


@dataclass(frozen=True)
class Graph:
    """Effective dependencies (explicit deps plus the producers of a step's inputs)."""

    steps: tuple[StepSpec, ...]
    deps: dict[str, tuple[str, ...]]
    # The steps are in setup order and every dep is a step set up before its dependent
    # (build_graph found so): then there is no cycle and setup order is the topological
    # order, and neither needs a search. False: not known.
    forward: bool = False

    def dependents(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {s.id: [] for s in self.steps}
        for s in self.steps:
            for d in self.deps[s.id]:
                out[d].append(s.id)
        return out


def _norm(p: str) -> str:
    return os.path.normpath(p)  # string arithmetic only: "./x" and "x" are one file


def dependency_on(step: StepSpec, dep: StepSpec, local: Callable[[str], str] = _norm) -> tuple[str, str]:
    """Why `step` depends on `dep`, for a message naming the field it comes from:
    ("deps", "depends on 'b'") when its deps name it, else ("inputs", "'x' is an output
    of 'b'") for the first of its inputs that dep produces (`local`: as build_graph's).
    Each phrase ends with the dependency's id, so that a message can go on about it
    ("..., which ...")."""
    if dep.id in step.deps:
        return "deps", f"depends on '{dep.id}'"
    made = {_norm(o) for o in dep.outputs}
    read = next((i for i in step.inputs if local(i) in made), None)
    if read is None:  # (not a dependency of step at all: said plainly)
        return "deps", f"depends on '{dep.id}'"
    return "inputs", f"{read!r} is an output of '{dep.id}'"


def build_graph(steps: tuple[StepSpec, ...] | list[StepSpec], *, known_done: Container[str] = frozenset(),
                unproduced: Callable[[StepSpec, str], Problem | None] | None = None,
                local: Callable[[str], str] = _norm) -> tuple[Graph, list[Problem]]:
    """Build the graph and list every problem: a step's directory or workdir on another
    step's log file (fleet.core.steppaths), unknown deps, two producers of one output,
    a path inside another step's output (fleet.core.outputnest),
    and cycles (each naming every step on it). A dep on an id in `known_done`
    (done elsewhere, or a step that did not read) is no problem and no edge.

    `unproduced(step, input)` is asked about each input no step produces and returns
    the problem with it, if any (the caller looks on disk); its problems take their
    place among the step's own, so the list reads in setup order. `local(input)` is the
    path an input is matched against the outputs by (relative to the run directory; the
    caller knows where an absolute one points: fleet.control.checks.inside_run_dir).
    """
    steps = tuple(steps)
    problems: list[Problem] = []
    ids = {s.id for s in steps}
    problems += path_clashes(steps, ids)
    producer: dict[str, str] = {}
    for s in steps:
        for out in s.outputs:
            key = _norm(out)
            if key in producer and producer[key] != s.id:
                problems.append(Problem(s.source, s.id, "outputs",
                                        f"{out!r} is also produced by step '{producer[key]}'"))
            else:
                producer[key] = s.id
    problems += nested_outputs(steps, producer)
    deps: dict[str, tuple[str, ...]] = {}
    for s in steps:
        if not s.deps and not s.inputs:  # most steps of a big suite: no edge, nothing to look for
            deps[s.id] = ()
            continue
        ds = list(s.deps)
        for d in s.deps:
            if d not in ids and d not in known_done:
                problems.append(Problem(s.source, s.id, "deps", f"'{d}' names no step"))
        for inp in s.inputs:
            p = producer.get(local(inp))
            if p is not None:
                if p not in ds:
                    ds.append(p)
            elif unproduced is not None and (problem := unproduced(s, inp)) is not None:
                problems.append(problem)
        deps[s.id] = tuple(d for d in ds if d in ids)
    graph = Graph(steps, deps, _forward(steps, deps))
    for cycle in () if graph.forward else find_cycles(graph):
        first = next(s for s in steps if s.id == cycle[0])
        problems.append(Problem(first.source, first.id, "deps",
                                "dependency cycle through steps " + " -> ".join(cycle + [cycle[0]])))
    return graph, problems


def _forward(steps: tuple[StepSpec, ...], deps: dict[str, tuple[str, ...]]) -> bool:
    """Whether the steps are in setup order and each one's deps all come before it (the
    common case: a suite is mostly written deps first). Every edge then points back
    along the list, so no path can come round to where it began."""
    seen: set[str] = set()
    last = None
    for s in steps:
        if last is not None and s.order <= last:
            return False
        for d in deps[s.id]:
            if d not in seen:
                return False
        seen.add(s.id)
        last = s.order
    return True


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


def topological_order(graph: Graph) -> list[str]:
    """Steps with every dependency before its dependents, ties in setup order."""
    if graph.forward:
        return [s.id for s in graph.steps]
    order = {s.id: s.order for s in graph.steps}
    if _deps_come_first(graph, order):
        # Then that order is setup order (the earliest step left always has its deps
        # out already), found without a heap: a million steps in a fraction of a second.
        return [s.id for s in sorted(graph.steps, key=lambda s: s.order)]
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


def _deps_come_first(graph: Graph, order: dict[str, int]) -> bool:
    """Whether every step's deps are steps of the graph set up before it."""
    for s in graph.steps:
        for d in graph.deps[s.id]:
            o = order.get(d)
            if o is None or o >= s.order:
                return False
    return True


def critical_path(deps: Mapping[str, Iterable[str]], duration: Mapping[str, float]) -> tuple[float, list[str]]:
    """The dependency floor: the longest chain of durations through `deps`, and the
    ids on it from first to last.

    The ids are the keys of `deps`; a dependency on any other id is ignored, and an id
    with no `duration` takes 0. Ids on a cycle, and those after one, are left out.
    Ties go to what comes first: ids are walked in Kahn's order (a FIFO seeded with the
    ids that depend on nothing, in `deps` order), the chain ends at the first id whose
    chain is longest, and each link is the first dependency through which it is longest
    (one whose chain adds no time is no link). (0.0, []) when there are no ids."""
    order, children = _kahn(deps)
    start = dict.fromkeys(order, 0.0)  # the longest chain before each id
    via: dict[str, str] = {}
    best, end = -1.0, None
    for k in order:
        f = start[k] + duration.get(k, 0.0)
        if f > best:
            best, end = f, k
        for c in children.get(k, ()):
            if c in start and f > start[c]:  # not in start: after a cycle, on no chain
                start[c] = f
                via[c] = k
    if end is None:
        return 0.0, []
    chain = [end]
    while chain[-1] in via:
        chain.append(via[chain[-1]])
    return best, chain[::-1]


def _kahn(deps: Mapping[str, Iterable[str]]) -> tuple[list[str], dict[str, list[str]]]:
    """Kahn's order of the keys of `deps` (ids on or after a cycle left out) and each id's dependents."""
    indeg = dict.fromkeys(deps, 0)
    children: dict[str, list[str]] = {}
    for k, ds in deps.items():
        for d in ds:
            if d in indeg:
                children.setdefault(d, []).append(k)
                indeg[k] += 1
    order = [k for k, v in indeg.items() if v == 0]
    i = 0
    while i < len(order):
        for c in children.get(order[i], ()):
            indeg[c] -= 1
            if indeg[c] == 0:
                order.append(c)
        i += 1
    return order, children
