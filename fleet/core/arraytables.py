"""Array tables: one [[steps]] table that declares a step per index of its `array`, `{i}`
replaced in its strings; the steps made one at a time, and their problems folded.

A mistake in an array table is the same mistake in each of its steps: checked step by
step, `cores = 0` in an array of 100,000 was 100,000 lines, and a real problem elsewhere
in the suite was lost among them. So the problems of an array's steps come through a
Folder: one that every step has is said once, for the table (`step 'h/{i}'`, "in all
100000 steps of the array"); one that only some steps have, the same in each, once with
how many and the first; and problems that differ by index (each names its own value)
are said for the first few steps, then counted per field. Each line still names file,
step (the table's id pattern when it is about several) and field. What is kept is
bounded by the fields, not the steps: a million-step array costs one dict look-up per
problem, nothing per step that has none.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from fleet.core.problems import Problem
from fleet.core.units import array_ranges, array_size, check_str, counted, parse_array

SHOWN = 3  # problems of one field that differ by index, said before the rest are counted


def substitute(v: Any, i: int, exact_int: bool = False) -> Any:
    """`{i}` replaced by the index in every string of v; with `exact_int` (args values),
    a string that is exactly "{i}" becomes the integer index itself."""
    if isinstance(v, str):
        return i if exact_int and v == "{i}" else v.replace("{i}", str(i))
    if isinstance(v, list):
        return [substitute(x, i, exact_int) for x in v]
    if isinstance(v, dict):
        return {k: substitute(x, i, exact_int) for k, x in v.items()}
    return v


def expand(merged: dict, label: str, room: int, fname: str, problems: list[Problem]) -> list | Expanded:
    """One raw step per index of an array table, its size checked before anything is
    expanded (an array of a billion indices is refused in constant memory)."""
    try:
        ranges = array_ranges(check_str(merged["array"]))
    except ValueError as e:
        problems.append(Problem(fname, label, "array", str(e)))
        return []
    size = array_size(ranges)
    if size > room:
        problems.append(Problem(fname, label, "array", f"{merged['array']!r} declares {size} steps, more than the"
                                f" {max(room, 0)} the suite's max_steps leaves room for (raise [suite] max_steps"
                                " to allow more)"))
        return []
    if "{i}" not in str(merged["id"]):
        problems.append(Problem(fname, label, "id", "an array step's id must contain {i}"))
        return []
    keep = _no_shared_output(merged, label, size, fname, problems)
    return Expanded(merged, parse_array(merged["array"]), label, keep)


def _no_shared_output(merged: dict, label: str, size: int, fname: str, problems: list[Problem]) -> bool:
    """Whether no output of the array is one path for all its steps (one without `{i}`):
    at most one step may produce a path, so such an array's steps are checked, not kept
    (the graph would say it of every step but the first, each on its own line)."""
    outs = merged.get("outputs")
    shared = [o for o in outs if isinstance(o, str) and "{i}" not in o] if isinstance(outs, list) and size > 1 else []
    for out in shared:
        problems.append(Problem(fname, label, "outputs", f"{out!r} has no {{i}}: all {size} steps of the array would "
                                "produce it, and at most one step may produce a path"))
    return not shared


class Expanded:
    """An array table's raw steps, one per index, each made as it is read: a million
    of them need not all exist at once (each a dict, ~300 bytes). `label`: the table's
    id as written ("h/{i}"), which names problems about several of its steps; `keep`
    False: a problem of the whole table was found, its steps are only checked."""

    __slots__ = ("merged", "indices", "label", "keep")

    def __init__(self, merged: dict, indices: list[int], label: str, keep: bool = True):
        self.merged, self.indices, self.label, self.keep = merged, indices, label, keep

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[dict]:
        merged = self.merged
        for i in self.indices:
            yield {k: substitute(v, i, k == "args") for k, v in merged.items() if k != "array"}


class Folder:
    """The problems of one array's steps, taken as they come and said folded (see the
    module's docstring). `pattern`: the table's id as written; `size`: its steps."""

    def __init__(self, pattern: str, size: int):
        self.pattern, self.size = pattern, size
        # (field, message with the step's own id put back as the pattern) -> [steps that
        # have it, the first such problem, the last step counted]
        self._groups: dict[tuple[str | None, str], list] = {}
        self._shown: dict[str | None, int] = {}  # groups kept per field (at most SHOWN)
        self._more: dict[str | None, int] = {}  # problems past those, per field

    def add(self, p: Problem) -> None:
        message = p.message
        if p.step is not None and p.step != self.pattern:  # ("got 'h/7 x'": the same mistake in every step)
            message = message.replace(repr(p.step), repr(self.pattern))
        key = (p.field, message)
        group = self._groups.get(key)
        if group is not None:
            if group[2] != p.step:  # (said twice in one step: one step still)
                group[0] += 1
                group[2] = p.step
        elif self._shown.get(p.field, 0) < SHOWN:
            self._shown[p.field] = self._shown.get(p.field, 0) + 1
            self._groups[key] = [1, p, p.step]
        else:
            self._more[p.field] = self._more.get(p.field, 0) + 1

    def problems(self) -> list[Problem]:
        """Every problem taken, folded, in the order each was first seen; a field's count
        of the rest after its last one shown."""
        last = {key[0]: key for key in self._groups}
        out = []
        for key, (count, first, _) in self._groups.items():
            out.append(self._said(key[1], count, first))
            more = self._more.get(key[0], 0)
            if more and last[key[0]] == key:
                out.append(Problem(first.file, self.pattern, key[0], f"and {counted(more, 'more problem')} with "
                                   "this field in other steps of the array"))
        return out

    def _said(self, message: str, count: int, first: Problem) -> Problem:
        if count == 1:
            return first
        where = (f"in all {self.size} steps of the array" if count >= self.size
                 else f"in {count} of the {self.size} steps of the array, the first '{first.step}'")
        return Problem(first.file, self.pattern, first.field, f"{message} ({where})")


@dataclass(frozen=True)
class ArrayTable:
    """Where an array's steps are among a suite's, so that problems found after reading
    (the graph, the disk, an allocation) fold as the reading's did: its id as written,
    how many steps it declares, and the setup orders [first, end) of the steps it made."""

    pattern: str
    size: int
    first: int
    end: int


def fold_later(later: list[Problem], arrays: tuple[ArrayTable, ...],
               order: Mapping[str, int]) -> list[tuple[str | None, Problem]]:
    """`later` problems with those about an array's steps folded (a Folder per array),
    each paired with the step it is placed by (setup order): a folded one by the first
    step of its array that had it. `arrays` in setup order; `order`: step id -> order."""
    starts = [a.first for a in arrays]
    out: list[Any] = []
    folders: dict[int, tuple[Folder, str]] = {}
    for p in later:
        o = order.get(p.step) if p.step is not None else None
        k = bisect_right(starts, o) - 1 if o is not None else -1
        if k < 0 or o >= arrays[k].end:  # type: ignore[operator]
            out.append((p.step, p))
            continue
        if k not in folders:
            folders[k] = (Folder(arrays[k].pattern, arrays[k].size), p.step)
            out.append(k)  # (where its folded problems go)
        folders[k][0].add(p)
    placed: list[tuple[str | None, Problem]] = []
    for x in out:
        if isinstance(x, int):
            folder, anchor = folders[x]
            placed += [(anchor, q) for q in folder.problems()]
        else:
            placed.append(x)
    return placed
