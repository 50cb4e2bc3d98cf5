"""The end of `fleet run`: what did not succeed, grouped by kind, bounded. At 100,000
steps with 1 % failing, a line per step buries the failures (a log holds a line per
success too); this says them again at the end, a few lines per kind of failure.

A kind is the outcome and the reason with its numbers, addresses and absolute paths
folded ("case 7 diverged" and "case 107 diverged" are one kind), so that a thousand
alike failures are one group, said by its first step's reason as it was (from
2026-12-07: before, folded: "the allocation ends at #:#:#"). Each group keeps its count and its first NAMED step
names: memory grows with the kinds of failure (at most the failures), never with the
successes, and the output is at most KINDS groups whatever the run."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fleet.core import states as S
from fleet.core.oneline import one_line
from fleet.wire.records import no_log

KINDS = 10  # groups said at the end; the rest counted
NAMED = 3  # step names said per group
REASON_CHARS = 200  # of a group's reason, said (a reason may be a page of output)
# Outcomes of a step whose own log says why (as followlines.LOGGED).
LOGGED = frozenset({S.FAILED, S.TIMED_OUT, S.OUT_OF_MEMORY, S.TERMINATED, S.BROKEN})
# How a failure taken from another fleet's final record reads (records.ended_in_fleet).
_THERE = re.compile(r"([a-z_]+) in fleet \S+: ")


def has_log(outcome: str, reason: str | None) -> bool:
    """Whether the log of a step that ended `outcome` with `reason` says why (and exists):
    not when it failed before opening one (no_log), nor when it failed here as another
    fleet ended it without a log (`failed x: unrunnable in fleet ...`: it never ran
    there; before 2026-12-07 `fleet run` named a log that did not exist)."""
    if outcome not in LOGGED or no_log(reason):
        return False
    there = _THERE.match(reason or "")
    return there is None or there[1] in LOGGED

# Folded, in this order: an absolute path (before its digits are), a hex address, a number.
_FOLDS = ((re.compile(r"(?<![\w.~/])/[^\s:,;'\"()\[\]]+"), "<path>"),
          (re.compile(r"\b0x[0-9a-fA-F]+\b"), "#"),
          (re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"), "#"))


def kind_of(reason: str) -> str:
    """`reason` with what differs between alike failures folded: the key of its group."""
    text = one_line(reason)[:REASON_CHARS]
    for pattern, by in _FOLDS:
        text = pattern.sub(by, text)
    return text


@dataclass
class Group:
    """The steps of one kind that did not succeed: how many, the first few, and whether the first has a log."""
    outcome: str
    kind: str
    count: int = 0
    steps: list[str] = field(default_factory=list)
    logged: bool = False  # the first step's outcome is one whose log says why
    # The first step's reason, as it was: the kind (the group's key) folds its numbers, and
    # said so ("the allocation ends at #:#:#") it lost the end time a drained run needs.
    reason: str = ""


class NotSucceeded:
    """What did not succeed in a `fleet run`, by kind (fed by followlines.Lines)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], Group] = {}  # (dicts keep order: the first seen first, among equals)
        self.total = 0
        self.kinds: dict[str, tuple[str, str]] = {}  # each step counted -> its group's key (at most the failures)

    def add(self, step: str, outcome: str, reason: str, logged: bool | None = None) -> None:
        """A step ended in `outcome` (not a success): counted in its kind's group. `logged`:
        whether its log can say why (default: by its outcome)."""
        key = (outcome, kind_of(reason or ""))
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = Group(outcome, key[1], logged=has_log(outcome, reason) if logged is None else logged,
                                         reason=one_line(reason or "")[:REASON_CHARS])
        g.count += 1
        self.total += 1
        self.kinds[step] = key
        if len(g.steps) < NAMED:
            g.steps.append(step)

    def succeeded(self, step: str) -> None:
        """A step counted here ended well after all (a child its parent submitted again):
        no longer counted, nor named."""
        key = self.kinds.pop(step, None)
        if key is None:
            return
        g = self.groups[key]
        g.count -= 1
        self.total -= 1
        if step in g.steps:
            g.steps.remove(step)
        if not g.count:
            del self.groups[key]

    def lines(self, run_dir: Path | str) -> list[str]:
        """The summary's lines ([] when everything succeeded): the KINDS biggest groups, each
        with its count, reason, first steps and the first's log; then the rest counted, and
        where to read every step's reason."""
        if not self.total:
            return []
        groups = sorted(self.groups.values(), key=lambda g: -g.count)  # (stable: first seen first among equals)
        width = len(str(groups[0].count))
        out = [f"did not succeed: {self.total} step{'s' if self.total != 1 else ''}"
               + (f", of {len(groups)} kinds (the most first)" if len(groups) > 1 else "") + ":"]
        for g in groups[:KINDS]:
            out.append(f"  {g.count:>{width}} {g.outcome:<10} {g.reason}" if g.reason else f"  {g.count:>{width}} {g.outcome}")
            names = ", ".join(g.steps) + (f" and {g.count - len(g.steps)} more" if g.count > len(g.steps) else "")
            log = f"; log of {g.steps[0]}: {Path(run_dir) / 'steps' / g.steps[0] / 'log'}" if g.logged else ""
            out.append(f"  {'':>{width}} {'':<10} {names}{log}")
        rest = groups[KINDS:]
        if rest:
            out.append(f"  ... and {len(rest)} more kind{'s' if len(rest) != 1 else ''} "
                       f"({sum(g.count for g in rest)} steps)")
        out.append(f"every step's reason: fleet report {run_dir}")
        return out
