"""Steps a running step submits (its children), read as the suite's steps are.

Pure: tables in, StepSpecs and problems out. The same function checks them in the
step's own process (`ctx.submit`, so a mistake raises there, naming step and field) and
on the coordinator when it collects them (a command step's TOML files are read only
there). A child's id is `<parent id>/<given id>`; each of its deps names a sibling (a
step this parent submitted, now or before) if one has that given id, else a step of the
suite as it is written. A child has its parent's priority unless it gives its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from fleet.core.graph import _kahn
from fleet.core.problems import Problem
from fleet.core.suite import StepSpec, read_suite


def expand(parent: str, tables: object, source: str, siblings: Iterable[str] = (), priority: int | None = None,
           ) -> tuple[list[StepSpec], list[Problem]]:
    """The children of `parent` that these step tables declare, and every problem.

    `siblings` are the given ids of children the parent submitted before."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        return [], [Problem(source, parent, "steps", "expected a list of step tables")]
    problems: list[Problem] = []
    given = {t["id"] for t in tables if isinstance(t.get("id"), str)} | set(siblings)
    full = []
    for t in tables:
        t = dict(t)
        gid = t.get("id")
        if isinstance(gid, str):
            if gid.startswith("/") or gid.endswith("/") or not gid:
                problems.append(Problem(source, f"{parent}/{gid}", "id", "a child's id is a name under its parent"))
                continue
            t["id"] = f"{parent}/{gid}"
        deps = t.get("deps")
        if isinstance(deps, list):
            t["deps"] = [f"{parent}/{d}" if isinstance(d, str) and d in given else d for d in deps]
        if priority is not None:
            t.setdefault("priority", priority)
        full.append(t)
    reading = read_suite({"suite": {"name": "children"}, "steps": full}, Path(source))
    problems += reading.problems
    steps = list(reading.suite.steps)
    mine = {s.id for s in steps}
    order, _ = _kahn({s.id: tuple(d for d in s.deps if d in mine) for s in steps})
    if len(order) < len(steps):
        cyclic = sorted(mine - set(order))
        problems.append(Problem(source, cyclic[0], "deps", "a cycle among the submitted steps: " + ", ".join(cyclic)))
    return steps, problems
