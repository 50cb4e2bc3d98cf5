"""A path inside another step's output: an output is a file, so nothing can be in it.

With a: outputs = ["d"] and b: outputs = ["d/x"], whichever runs second fails: a
finds the directory d that b's output was made in ("Is a directory"), or b cannot
make the directory d over a's file. The same holds for a workdir that is, or is
inside, another step's output. Before 2026-12-07 `fleet validate` said such a suite
was valid; now it is refused with the suite's other problems (fleet.core.graph).

Scale: each path's parent directories are looked up among the outputs (a set), never
compared pairwise: O(the paths' parts) for a million steps.

Pure: steps and their outputs in, problems out.
"""

from __future__ import annotations

import posixpath
from typing import Iterable, Iterator, Mapping, Sequence

from fleet.core.problems import Problem
from fleet.core.steppaths import STEPS


def nested_outputs(steps: Sequence, producer: Mapping[str, str]) -> list[Problem]:
    """A problem for each output of a step that is inside another step's output, and for
    each workdir that is, or is inside, another step's output. `producer`: each
    (normalized) output path's step, as fleet.core.graph.build_graph finds them."""
    if not producer:
        return []
    tops = {o.partition("/")[0] for o in producer}
    if STEPS in tops:  # an output that is steps/ or a step's directory is refused already (fleet.core.steppaths)
        dirs = {d for s in steps for d in (s.id, *_parents(s.id))}
        producer = {o: sid for o, sid in producer.items()
                    if not (o == STEPS or o.startswith(STEPS + "/") and o[len(STEPS) + 1:] in dirs)}
        tops = {o.partition("/")[0] for o in producer}
    # An output in another: looked for among the (normalized) outputs, each once; the step
    # and the path as it wrote it only for one found (rarely any).
    nested: dict[str, str] = {}
    for o, sid in producer.items() if not _dirs(producer).isdisjoint(producer) else ():
        i = o.find("/")
        while i != -1:  # (no generator: a million outputs)
            if producer.get(o[:i], sid) != sid:
                nested[o] = o[:i]
                break
            i = o.find("/", i + 1)
    out = []
    for s in steps:
        for o in s.outputs if nested else ():
            owner = nested.get(posixpath.normpath(o))
            if owner is not None and producer[posixpath.normpath(o)] == s.id:
                out.append(Problem(s.source, s.id, "outputs",
                                   f"{o!r} is inside {owner!r}, an output of step '{producer[owner]}': an output is "
                                   f"a file, so no other step's path can be inside it"))
        wd = s.workdir
        head = wd.partition("/")[0]
        # (Most workdirs are steps/<id>, and most suites have no output under steps/: a
        # workdir whose first part no output has, as written, is none; "." or ".." may hide one.)
        if head not in tops and not (head.startswith(".") or ".." in wd) or posixpath.isabs(wd):
            continue
        norm = posixpath.normpath(wd)
        owner = next((p for p in (norm, *_parents(norm)) if producer.get(p, s.id) != s.id), None)
        if owner is not None:
            where = "is" if owner == norm else f"is inside {owner!r},"
            out.append(Problem(s.source, s.id, "workdir",
                               f"{wd!r} {where} an output of step '{producer[owner]}': an output is a file, "
                               f"and a workdir a directory"))
    return out


def _dirs(paths: Iterable[str]) -> set[str]:
    """Every directory the paths are in (a, a/b for a/b/c), level by level in set
    comprehensions: a million outputs in a few of them, not a million loops."""
    out: set[str] = set()
    level = {p.rpartition("/")[0] for p in paths if "/" in p}
    while level:
        out |= level
        level = {d.rpartition("/")[0] for d in level if "/" in d} - out
    return out


def _parents(path: str) -> Iterator[str]:
    """The parent directories of a relative path, outermost first ("a", "a/b" for "a/b/c")."""
    i = path.find("/")
    while i != -1:
        yield path[:i]
        i = path.find("/", i + 1)
