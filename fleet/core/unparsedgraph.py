"""The graph problems of steps that did not read (they have a field problem): a dep of
their own that names no step, an output another step also produces, and its directory,
workdir or outputs on a step's log or directory (fleet.core.steppaths: before 2026-12-07
a field problem hid these).

`fleet validate` reports every problem at once, and a field problem must not hide the
same step's graph problems (the user would fix one and then learn of the next). Such a
step is not in the graph - nothing would schedule it, and its fields cannot be trusted -
so only what of its `deps`, `outputs` and `workdir` reads is checked, for the problems alone: no
cycle through it is looked for, and its inputs are not looked for on disk.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Container, Iterable, Mapping

from fleet.core.problems import Problem
from fleet.core.steppaths import path_clashes


def problems(fname: str, partial: Mapping[str, tuple[tuple[str, ...], tuple[str, ...], str]], steps: Iterable,
             unparsed: Container[str]) -> list[Problem]:
    """`partial`: each unread step's readable (deps, outputs, workdir: "" if it does not read), in setup order; `steps`
    the steps that read; `unparsed` the ids of those that did not (a dep on one is no
    problem: its own problems are said). In the words the graph uses (fleet.core.graph)."""
    steps = tuple(steps)
    ids = {s.id for s in steps}
    producer: dict[str, str] = {}
    for s in steps:
        for out in s.outputs:
            producer.setdefault(os.path.normpath(out), s.id)
    found = []
    unread = [SimpleNamespace(id=sid, source=fname, outputs=outputs, workdir=workdir)
              for sid, (_, outputs, workdir) in partial.items()]
    clashes: dict[str, list[Problem]] = {}
    for p in path_clashes(unread, ids, known=partial) if unread else ():
        clashes.setdefault(p.step or "", []).append(p)
    for sid, (deps, outputs, _) in partial.items():
        found += clashes.get(sid, [])
        found += [Problem(fname, sid, "deps", f"'{d}' names no step") for d in deps
                  if d not in ids and d not in unparsed]
        for out in outputs:
            other = producer.setdefault(os.path.normpath(out), sid)
            if other != sid:
                found.append(Problem(fname, sid, "outputs", f"{out!r} is also produced by step '{other}'"))
    return found

