"""Which step of the fleet produces a path (its `outputs`), for the children a running
step submits: the step producing a child's input becomes its dependency, and a child
may not produce a path another step produces (fleet.core.childfiles).

Kept as steps are declared (a dict look-up per output; a step with none costs a test)
and as children are taken, before they are declared, so that the next submission,
a sibling's or another parent's, already sees them. An entry is checked when it is
looked up: a step defined again since without that output, or withdrawn, no longer
produces it. That check is O(1): a producer with more than a few outputs has the set of
them, normalised, made once per definition (until a fix of 2026-12-07 each look-up scanned all
its outputs: 8,000 children each reading one of a step's 8,000 outputs waited 5.6 s on
the coordinator's loop, 10,000 about 11 s).
"""

from __future__ import annotations

import os


_FEW = 8  # outputs compared one by one; a step with more has their set (Producers._makes)


class Producers:
    """Path (normalised, relative to the run directory as written) -> the step producing it."""

    def __init__(self, specs: dict):
        self.specs = specs  # step id -> StepSpec, shared with the coordinator
        self.by_path: dict[str, str] = {}
        self.taken: dict[str, object] = {}  # children taken, not declared yet: id -> StepSpec
        self.sets: dict[str, tuple] = {}  # id -> (the definition, its outputs normalised): _makes

    def declared(self, steps) -> None:
        """Steps declared (their definitions now in specs). The last declared producer of
        a path is kept, unchecked here (a suite's own are one a path; `of` checks an entry
        when it is looked up): a look-up per output, on every submission's entering."""
        taken, by_path, norm = self.taken, self.by_path, os.path.normpath
        for s in steps:
            if s.outputs:
                for out in s.outputs:
                    key = norm(out)
                    by_path[out if key == out else key] = s.id  # (the spec's own string where it is normal)
                if taken:
                    taken.pop(s.id, None)

    def take(self, steps) -> None:
        """Children taken, to be declared in a moment."""
        for s in steps:
            if s.outputs:
                self.taken[s.id] = s
                self._add(s)

    def of(self, path: str) -> str | None:
        """The step producing `path` (normalised), if any."""
        sid = self.by_path.get(path)
        if sid is None:
            return None
        spec = self.taken.get(sid) or self.specs.get(sid)  # (the newest definition)
        if spec is None or not self._makes(spec, path):
            del self.by_path[path]  # (withdrawn, or defined again without it)
            if spec is None and self.sets:
                self.sets.pop(sid, None)
            return None
        return sid

    def _makes(self, spec, path: str) -> bool:
        """Whether this definition produces `path` (normalised): a few outputs compared,
        more looked up in their set, made once for the definition."""
        outs = spec.outputs
        if len(outs) <= _FEW:
            return any(os.path.normpath(o) == path for o in outs)
        got = self.sets.get(spec.id)
        if got is None or got[0] is not spec:  # (a new definition: its own set)
            got = self.sets[spec.id] = (spec, frozenset(os.path.normpath(o) for o in outs))
        return path in got[1]

    def _add(self, spec) -> None:
        for out in spec.outputs:
            key = os.path.normpath(out)
            if self.of(key) is None:  # (the first producer stays: the one a later one is told of)
                self.by_path[key] = spec.id
