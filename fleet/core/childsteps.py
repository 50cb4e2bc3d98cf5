"""Steps a running step submits (its children), read as the suite's steps are.

Pure: tables in, StepSpecs and problems out. The same function checks them in the
step's own process (`ctx.submit`, so a mistake raises there, naming step and field) and
on the coordinator when it collects them (a command step's TOML files are read only
there). A child's id is `<parent id>/<given id>`; each of its deps names a sibling (a
step this parent submitted, now or before) if one has that given id, else a step of the
suite as it is written (on the coordinator, also an ancestor's child entered no later
than its branch; never another family's: fleet.core.childdeps). A child has its
parent's priority unless it gives its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from fleet.core.childfiles import sibling_cycle, sibling_outputs
from fleet.core.graph import _kahn
from fleet.core.outputnest import nested_outputs
from fleet.core.problems import Problem
from fleet.core.steppaths import path_clashes
from fleet.core.suite import StepSpec, read_suite
from fleet.core.suitehead import MAX_STEPS
from fleet.core.units import array_ranges, array_size, lone_surrogate, parse_array


def expand(parent: str, tables: object, source: str, siblings: Iterable[str] = (), priority: int | None = None,
           ) -> tuple[list[StepSpec], list[Problem]]:
    """The children of `parent` that these step tables declare, and every problem.

    `siblings` are the given ids of children the parent submitted before (an array's
    as its steps' ids: `c/1`, `c/2`)."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        return [], [Problem(source, parent, "steps", "expected a list of step tables")]
    problems: list[Problem] = []
    siblings = set(siblings)
    given = {t["id"] for t in tables if isinstance(t.get("id"), str)} | siblings
    if any(isinstance(d, str) and d not in given for t in tables for d in _deps(t)):
        given |= _array_ids(tables)
    problems += _not_utf8(parent, tables, source)
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
    # (a child named "log" would be its parent's log file: fleet.core.steppaths)
    problems += path_clashes(steps, mine, _Family(parent, siblings))
    order, _ = _kahn({s.id: tuple(d for d in s.deps if d in mine) for s in steps})
    if len(order) < len(steps):
        cyclic = sorted(mine - set(order))
        problems.append(Problem(source, cyclic[0], "deps", "a cycle among the submitted steps: " + ", ".join(cyclic)))
    made, more = sibling_outputs(steps)  # (one producer a path; a cycle through inputs: fleet.core.childfiles)
    problems += more + (sibling_cycle(steps, made) if len(order) == len(steps) else [])
    problems += nested_outputs(steps, made)  # (one inside another's output: until a fix of 2026-12-07, failed as it ran)
    return steps, problems


def _not_utf8(parent: str, tables: list, source: str) -> list[Problem]:
    """A problem for each field of these tables whose text (a key's too) cannot be UTF-8
    (fleet.core.units.lone_surrogate, as Fleet.submit refuses it): before 2026-12-06 such
    a child was taken, and failed at its launch naming a log that was never made. Found
    in one pass of C (a million children's tables), looked for field by field only then."""
    try:
        text = json.dumps(tables, ensure_ascii=False, skipkeys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        return []  # (what JSON cannot hold, the field checks and ctx.submit's JSON say)
    if text.isascii():
        return []
    try:
        text.encode("utf-8")
        return []
    except UnicodeEncodeError:
        pass
    out = []
    for t in tables:
        sid = f"{parent}/{t['id']}" if isinstance(t.get("id"), str) else parent
        for field, value in t.items():
            why = _first_lone_surrogate(field, value)
            if why:
                out.append(Problem(source, sid, str(field), f"{why}: a step's text is UTF-8 and cannot hold it "
                                                            f"(a file name that is not UTF-8: rename the file)"))
    return out


def _first_lone_surrogate(key: object, value: object) -> str | None:
    """Why a text of a field (its name, or its value at any depth) is not UTF-8, the
    first found; None if all are."""
    stack = [key, value]
    while stack:  # (no recursion: as deep as the tables go)
        x = stack.pop()
        if isinstance(x, str):
            why = lone_surrogate(x)
            if why:
                return why
        elif isinstance(x, dict):
            stack += [*x.keys(), *x.values()]
        elif isinstance(x, (list, tuple)):
            stack += x
    return None


def parent_in(steps: Iterable[StepSpec], sid: str) -> StepSpec | None:
    """The suite step whose child (or a child's child) `sid` would be: the step whose id
    is the longest of sid's prefixes before a "/" (a suite step's own id may hold one: an
    array's `f/3`) and that can submit steps (a call, or a command with protocol "steps")."""
    by_id = {s.id: s for s in steps}
    cut = sid.rfind("/")
    while cut > 0:
        s = by_id.get(sid[:cut])
        if s is not None:
            return s if s.call or s.protocol == "steps" else None
        cut = sid.rfind("/", 0, cut)
    return None


def not_a_suite_step(sid: str, parent: str, suite: str) -> str:
    """Why a child's id names no step of the suite, and how to run it again."""
    return (f"'{sid}' is not a step of suite '{suite}' but a child of its step '{parent}', submitted as "
            f"'{parent}' runs: to run it again, run '{parent}' again (fleet run --force --only {parent}: "
            f"its children run again with it)")


def _deps(table: dict) -> list:
    deps = table.get("deps")
    return deps if isinstance(deps, list) else []


def _array_ids(tables: list) -> set:
    """The given ids an array table's steps have (`c/{i}` over "1-3": c/1, c/2, c/3), so
    that a sibling's dep may name one; a table whose array is wrong or too big is left to
    read_suite to refuse. Expanded only when some dep names no table's id as written."""
    out: set = set()
    room = MAX_STEPS
    for t in tables:
        gid, array = t.get("id"), t.get("array")
        if not (isinstance(gid, str) and "{i}" in gid and isinstance(array, str)):
            continue
        try:
            size = array_size(array_ranges(array))
        except ValueError:
            continue
        if size > room:
            break
        room -= size
        out.update(gid.replace("{i}", str(i)) for i in parse_array(array))
    return out


class _Family:
    """`in`: the parent's id, or a child's it submitted before (its given ids, uncopied)."""

    def __init__(self, parent: str, given: set):
        self.parent, self.given, self.prefix = parent, given, parent + "/"

    def __contains__(self, x: object) -> bool:
        return x == self.parent or (isinstance(x, str) and x.startswith(self.prefix)
                                    and x[len(self.prefix):] in self.given)
