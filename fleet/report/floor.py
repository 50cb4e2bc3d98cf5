"""The longest chain of durations through a dependency mapping.

Written to move to fleet.core.graph as is (it imports nothing from fleet): the report
calls it only through fleet.report.figures.critical_path.
"""

from __future__ import annotations

from typing import Iterable, Mapping


def critical_path(deps: Mapping[str, Iterable[str]], duration: Mapping[str, float]) -> tuple[float, list[str]]:
    """The longest chain (sum of durations, 0 for an id without one) through `deps`
    (id -> the ids it depends on), and the chain from its first id to its last.

    Dependencies on ids that are not keys of `deps` are ignored; ids on a cycle, and
    everything after one, are left out. Ties go to what comes first in a topological
    order that follows the order of `deps` (Kahn's, first in first out): the first of
    equally long chains to end, reached through the first of equally long predecessors.
    """
    order, dependents = _order(deps)
    before: dict[str, float] = dict.fromkeys(order, 0.0)  # the longest chain before each id
    via: dict[str, str] = {}
    best, end = -1.0, None
    for k in order:
        f = before[k] + duration.get(k, 0.0)
        if f > best:
            best, end = f, k
        for c in dependents.get(k, ()):
            if f > before[c]:
                before[c] = f
                via[c] = k
    if end is None:
        return 0.0, []
    path = [end]
    while path[-1] in via:
        path.append(via[path[-1]])
    return best, path[::-1]


def _order(deps: Mapping[str, Iterable[str]]) -> tuple[list[str], dict[str, list[str]]]:
    """Kahn's order of the ids (those on or after a cycle are left out) and each id's dependents."""
    indeg = dict.fromkeys(deps, 0)
    dependents: dict[str, list[str]] = {}
    for k, ds in deps.items():
        for d in ds:
            if d in indeg:
                dependents.setdefault(d, []).append(k)
                indeg[k] += 1
    order = [k for k, v in indeg.items() if v == 0]
    i = 0
    while i < len(order):
        for c in dependents.get(order[i], ()):
            indeg[c] -= 1
            if indeg[c] == 0:
                order.append(c)
        i += 1
    return order, dependents
