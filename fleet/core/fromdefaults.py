"""Saying that a problem comes from a value in [defaults].

A step's own field problems say so where they are found (fleet.core.suite's `bad`);
the problems found later, about steps that read (the graph's, an allocation's), and an
array's, which its expansion finds, are marked here: `'o.txt' is also produced by step
'a' (from [defaults])`, `an array step's id must contain {i} (array from [defaults])`.
Before 2026-12-07 these read as the step's own mistake.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Iterable

from fleet.core.problems import Problem


def marked(p: Problem, names: Iterable[str]) -> Problem:
    """`p`, saying which of `names` (fields from [defaults] it takes part in) came from there."""
    names = list(dict.fromkeys(names))
    if not names:
        return p
    tail = " (from [defaults])" if names == [p.field] else f" ({', '.join(names)} from [defaults])"
    return replace(p, message=p.message + tail)


class Defaulted:
    """Which fields each step took from [defaults], by the steps' setup order: one run of
    orders for each run of tables with the same ones (a million steps, a few entries)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.fields: list[frozenset[str]] = []

    def add(self, first: int, fields: frozenset[str]) -> None:
        """The steps from order `first` on took `fields` (until the next add)."""
        if not self.fields or self.fields[-1] != fields:
            self.starts.append(first)
            self.fields.append(fields)

    def mark(self, p: Problem, order: int | None) -> Problem:
        """`p` (about the step of that setup order) marked if its field came from [defaults]."""
        i = bisect.bisect_right(self.starts, order) - 1 if order is not None else -1
        return marked(p, [p.field]) if i >= 0 and p.field in self.fields[i] else p
