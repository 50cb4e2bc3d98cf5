"""Where a step's directory would land on another step's log.

Every step owns steps/<id>/ in the run directory, with its output in the file
steps/<id>/log and its records in steps/<id>/.fleet/. A step id is a path, so one
step's directory can sit inside another's: `plot/lin` in steps/plot/ is fine, but
`plot/log` would be the directory steps/plot/log/, which is step `plot`'s log file.
Such a step could never have its records written (before 2026-12-06 a child named
`log` left `fleet run` waiting for good). The same holds for a `workdir` there, and for
an `outputs` entry that is a step's directory steps/<id>, above one, or a step's log
(before 2026-12-06 accepted: the step whose directory it was failed naming a log that
could not exist). These are refused before anything runs, with the suite's other problems (fleet.core.graph)
and with a step's children (fleet.core.childsteps, fleet.control.children).

Pure: ids and paths in, problems out.
"""

from __future__ import annotations

import posixpath
from operator import attrgetter
from typing import Container, Iterable

from fleet.core.problems import Problem

STEPS = "steps"  # the run directory's directory of the steps' own directories
LOG = "log"  # a step's output file in its directory (fleet.wire.records.log_path)
_ID, _WORKDIR = attrgetter("id"), attrgetter("workdir")


def log_owner(path: str, ids: Container[str]) -> str | None:
    """The step among `ids` whose log file `path` (a step id, relative to steps/) is, or
    is inside; None if none. Only a path with a "log" part can be one (most are not)."""
    if LOG not in path:
        return None
    parts = path.split("/")
    for k in range(1, len(parts)):
        if parts[k] == LOG:
            owner = "/".join(parts[:k])
            if owner in ids:
                return owner
    return None


def path_clashes(steps: Iterable, ids: Container[str] | None = None,
                 known: Container[str] = frozenset()) -> list[Problem]:
    """A problem for each step whose directory (its id) or workdir would be, or be
    inside, the log file of a step among `steps` (`ids`: their ids, if the caller has
    them) or `known` (a child's parent, the fleet's steps), and for each output that is
    such a step's directory or log, or above a directory of one of `steps`."""
    steps = steps if isinstance(steps, (list, tuple)) else list(steps)
    # (nearly every suite: one look at all the text, in C, not one per step)
    logs = LOG in "\n".join(map(_ID, steps)) or LOG in "\n".join(map(_WORKDIR, steps))
    outputs = any(STEPS in o for s in steps if s.outputs for o in s.outputs)
    if not logs and not outputs:
        return []
    mine = _Either({s.id for s in steps} if ids is None else ids, known)
    above = _Above(steps) if outputs else None
    out = []
    for s in steps:
        if above is not None and s.outputs:
            out += _output_clashes(s, mine, above)
        if LOG not in s.id and LOG not in s.workdir:  # (nearly every step: nothing to look up)
            continue
        owner = log_owner(s.id, mine)
        if owner is not None:
            where = "" if s.id == f"{owner}/{LOG}" else "inside "
            out.append(Problem(s.source, s.id, "id",
                               f"its directory steps/{s.id} would be {where}steps/{owner}/{LOG}, the log file of step "
                               f"'{owner}': give it another name (a step's directory holds its log, named '{LOG}')"))
        wd = s.workdir
        if LOG in wd and wd != f"steps/{s.id}" and not posixpath.isabs(wd):
            norm = posixpath.normpath(wd)
            owner = log_owner(norm[len("steps/"):], mine) if norm.startswith("steps/") else None
            if owner is not None:
                out.append(Problem(s.source, s.id, "workdir",
                                   f"{wd!r} is, or is inside, steps/{owner}/{LOG}, the log file of step '{owner}': "
                                   f"a workdir is a directory"))
    return out


def _output_clashes(s, ids: Container[str], above: _Above) -> list[Problem]:
    """A problem for each output of `s` that is a step's directory steps/<id> (the step's
    own too), above one (a file there, and the directory cannot be made), or a step's log
    (written by the fleet): its step would fail with no log to say why (before 2026-12-06
    `fleet validate` accepted such a suite)."""
    out = []
    for o in s.outputs:
        norm = posixpath.normpath(o)
        if norm != STEPS and not norm.startswith(STEPS + "/"):
            continue
        rel = norm[len(STEPS) + 1:]
        if rel in ids:
            what = f"the directory of step '{rel}', which holds its log and records"
        elif norm == STEPS or rel in above:
            what = "a directory that steps' own directories are in"
        elif rel.endswith("/" + LOG) and rel[:-len(LOG) - 1] in ids:
            what = f"the log file of step '{rel[:-len(LOG) - 1]}', which the fleet writes"
        else:
            continue
        out.append(Problem(s.source, s.id, "outputs", f"{o!r} is {STEPS}/{rel}, {what}: "
                           f"an output is a file of its own; put it elsewhere (or inside its step's directory)"
                           if rel else f"{o!r} is {STEPS}, {what}: an output is a file of its own; put it elsewhere"))
    return out


class _Above:
    """`in`: a path (relative to steps/) that is a parent directory of some step's
    directory (plot for plot/lin); made only when an output is under steps/."""

    def __init__(self, steps: Iterable):
        self.dirs = {sid[:i] for sid in map(_ID, steps) for i, c in enumerate(sid) if c == "/"}

    def __contains__(self, x: object) -> bool:
        return x in self.dirs


class _Either:
    """`in` either of two containers (a set of ids and the fleet's table, uncopied)."""

    def __init__(self, a: Container[str], b: Container[str]):
        self.a, self.b = a, b

    def __contains__(self, x: object) -> bool:
        return x in self.a or x in self.b
