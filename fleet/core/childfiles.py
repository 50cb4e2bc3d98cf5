"""A child's files, as a suite step's (fleet.core.graph): the step producing one of its
`inputs` becomes a dependency, an input nobody produces must exist, at most one
step produces a path, and no output or workdir is inside another step's output.

Before 2026-12-07 a child's inputs made no dependency and were not looked for (a child
reading a sibling's output started beside it and failed, the file missing), and a
child's outputs were not checked against any other step's (the last writer won);
until a fix of 2026-12-07 a child's output or workdir inside another step's output was taken,
and the child failed as it ran ("cannot make the directory .../d (of output x): it
exists and is not a directory").

Pure: ids and paths in, dependencies and problems out. The coordinator passes what
only it knows (fleet.control.children): the fleet's producers of paths, how an
absolute input maps into the run directory, and which inputs are not on disk.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping

from fleet.core.graph import _kahn
from fleet.core.problems import Problem


def _norm(p: str) -> str:
    return os.path.normpath(p)  # as the graph's: "./x" and "x" are one file


def sibling_outputs(steps: list) -> tuple[dict[str, str], list[Problem]]:
    """The path each output of these children names -> the child producing it, and a
    problem for each output a sibling produces too (in the graph's words)."""
    made: dict[str, str] = {}
    problems = []
    for s in steps:
        for out in s.outputs:
            other = made.setdefault(_norm(out), s.id)
            if other != s.id:
                problems.append(Problem(s.source, s.id, "outputs", f"{out!r} is also produced by step '{other}'"))
    return made, problems


def sibling_cycle(steps: list, made: Mapping[str, str], local: Callable[[str], str] = _norm) -> list[Problem]:
    """A problem naming the children on a cycle of deps and inputs among siblings (a
    child reading its own output is one), if any; only children with inputs can add one
    to the cycle check of their deps (fleet.core.childsteps)."""
    if not made or not any(s.inputs for s in steps):
        return []
    mine = {s.id for s in steps}
    deps = {}
    for s in steps:
        read = [made[k] for k in map(local, s.inputs) if k in made]
        deps[s.id] = tuple(d for d in (*s.deps, *read) if d in mine)
    order, _ = _kahn(deps)
    if len(order) == len(steps):
        return []
    cyclic = sorted(mine - set(order))
    first = next(s for s in steps if s.id == cyclic[0])
    return [Problem(first.source, first.id, "inputs",
                    "a cycle of deps and inputs among the submitted steps: " + ", ".join(cyclic))]


def file_deps(steps: list, producer_of: Callable[[str], str | None], local: Callable[[str], str],
              absent: Callable[[str], bool], where: str) -> tuple[dict, dict, list[Problem]]:
    """The children's dependencies with their inputs' producers, and every problem.

    (deps, outside, problems): `deps` maps each child to its deps plus the siblings
    producing its inputs (its own tuple, untouched, when it has no inputs); `outside`
    maps a child to [(input, producer)] for inputs a step of the fleet that is no
    sibling produces (the caller checks such a dependency as it checks a dep, then adds
    it). `producer_of(path)`: the fleet's step producing a path (normalised), if any;
    `local(input)`: the path an input is matched by; `absent(input)`: it is not on
    disk; `where`: the run directory, for the problem of a relative input."""
    made, problems = sibling_outputs(steps)
    deps: dict = {}
    outside: dict = {}
    for s in steps:
        for out in s.outputs:
            other = producer_of(_norm(out))
            if other is not None and other != s.id and made.get(_norm(out)) == s.id:
                problems.append(Problem(s.source, s.id, "outputs", f"{out!r} is also produced by step '{other}'"))
        if not s.inputs:  # (most children: nothing to look up)
            deps[s.id] = s.deps
            continue
        ds = list(s.deps)
        for inp in s.inputs:
            key = local(inp)
            p = made.get(key)
            if p is None and (p := producer_of(key)) is not None:
                outside.setdefault(s.id, []).append((inp, p))
            elif p is None and absent(inp):
                place = "" if os.path.isabs(inp) else f" in {where}"
                problems.append(Problem(s.source, s.id, "inputs",
                                        f"{inp!r} is produced by no step and does not exist{place}"))
            elif p is not None and p not in ds:
                ds.append(p)
        deps[s.id] = tuple(ds)
    problems += sibling_cycle(steps, made, local)
    return deps, outside, problems


def inside_outputs(steps: list, producer_of: Callable[[str], str | None], mine) -> list[Problem]:
    """A problem for each output of these children inside an output another step of the
    fleet produces, and each workdir that is, or is inside, one (in the words of
    fleet.core.outputnest, which checks siblings among themselves: `mine`, their ids,
    are left to it). A look-up per parent directory of each path: O(the paths' parts).
    `producer_of(path)`: the fleet's step producing a path (normalised), if any."""
    out = []
    for s in steps:
        for o in s.outputs:
            hit = _owner(_parents(_norm(o)), s.id, producer_of, mine)
            if hit is not None:
                out.append(Problem(s.source, s.id, "outputs",
                                   f"{o!r} is inside {hit[0]!r}, an output of step '{hit[1]}': an output is "
                                   f"a file, so no other step's path can be inside it"))
        wd = s.workdir
        if not wd or os.path.isabs(wd):
            continue
        norm = _norm(wd)
        hit = _owner((*_parents(norm), norm), s.id, producer_of, mine)
        if hit is not None:
            where = "is" if hit[0] == norm else f"is inside {hit[0]!r},"
            out.append(Problem(s.source, s.id, "workdir", f"{wd!r} {where} an output of step '{hit[1]}': an "
                                                          f"output is a file, and a workdir a directory"))
    return out


def _owner(paths, sid: str, producer_of, mine) -> tuple[str, str] | None:
    """The first of `paths` another step of the fleet (not `sid`, not one of `mine`)
    produces, with that step."""
    for p in paths:
        other = producer_of(p)
        if other is not None and other != sid and other not in mine:
            return p, other
    return None


def _parents(path: str) -> list[str]:
    """The parent directories of a path, outermost first ("a", "a/b" for "a/b/c")."""
    out = []
    i = path.find("/", 1)  # (an absolute path's "/" is no output)
    while i != -1:
        out.append(path[:i])
        i = path.find("/", i + 1)
    return out
