"""Which recorded attempts of a step count toward --max-attempts.

The limit is there for a stuck step: one that fails, or takes its node or fleet down
with it, in every fleet that runs it (a batch job that resubmits itself would run it
forever). So it counts only attempts that could be that same stuck step:

- attempts of the definition that is to run now (its hash, `spec`, in each record): a
  changed step is a new step, as it is for reruns (a record that names no definition,
  written by an older fleet for a lost attempt, counts for none);
- attempts that ended without success: a success shows the step is not stuck, so the
  count starts again after the step's last success;
- attempts since the user last asked for the step explicitly (`--force`, or its
  directory removed): a reset, recorded in the journal with its time.

Attempts that went on (a next stage, a wait for children, a restart) are recorded
again when they end and count then. The count is kept per step as a Tally: the time it
starts again from (`cut`) and the (ended_at, spec) of each attempt since that ended
without success; a step whose count is nothing needs no tally.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from fleet.core import states as S

GOES_ON = frozenset({S.WAIT, S.NEXT, S.RESTART})  # exits of an attempt that runs on: not attempts (yet)
NO_CUT = float("-inf")  # nothing to start again from: every attempt counts


@dataclass(frozen=True)
class Tally:
    """A step's attempts that count toward the limit, by definition (see the module's docstring)."""

    cut: float = NO_CUT   # the count starts again after this (wall clock): a success or a reset
    ended: tuple = ()     # (ended_at, spec) of each attempt since the cut that ended without success

    def count(self, spec: str) -> int:
        """The attempts of definition `spec` that count."""
        return sum(1 for _, s in self.ended if s == spec)

    def failed(self, ended_at: float, spec: str | None) -> Tally:
        """One more attempt ended without success (a record naming no definition counts for none)."""
        return self if spec is None else Tally(self.cut, (*self.ended, (ended_at, spec)))

    def after(self, cut: float) -> Tally:
        """The count started again at `cut` (if later than this one's)."""
        if cut <= self.cut:
            return self
        return Tally(cut, tuple(e for e in self.ended if e[0] > cut))

    def merged(self, other: Tally) -> Tally:
        """Both tallies' attempts, each cut where the later one starts."""
        cut = max(self.cut, other.cut)
        return Tally(cut, tuple(e for e in (*self.ended, *other.ended) if e[0] > cut))


NONE = Tally()


def ended_at(rec: dict) -> float:
    """When a recorded attempt ended (0: not said, as the oldest records)."""
    try:
        return float(rec.get("ended_at") or rec.get("at") or 0.0)
    except (TypeError, ValueError):
        return 0.0


def tally(recs: Iterable[dict], reset: float = NO_CUT) -> Tally:
    """The tally of a step's attempt records (in any order), counted from `reset` (the
    newest reset recorded for it) or its last success, whichever is later."""
    cut, failed = reset, []
    for rec in recs:
        outcome = rec.get("outcome")
        if outcome in GOES_ON:
            continue
        t = ended_at(rec)
        if outcome == S.SUCCEEDED:
            cut = max(cut, t)
        elif rec.get("spec") is not None:
            failed.append((t, rec["spec"]))
    return Tally(cut, tuple(e for e in failed if e[0] > cut))


def stopped(n: int, limit: int) -> str:
    """Why a step is stopped, and how to go on."""
    return (f"{n} attempts of this definition recorded without success (limit {limit}): change the step, "
            f"rerun it with --force, or raise --max-attempts (0: no limit)")
