"""Which recorded attempts of a step count toward --max-attempts.

The limit is there for a stuck step: one that fails, or takes its node or fleet down
with it, in every fleet that runs it (a batch job that resubmits itself would run it
forever). So it counts only attempts that could be that same stuck step:

- attempts of the definition that is to run now (its hash, `spec`, in each record): a
  changed step is a new step, as it is for reruns (a record that names no definition,
  written by an older fleet for a lost attempt, counts for none); a record written
  before 2026-12-06 names the hash that counted the scheduling fields too, which the
  caller passes beside the current one (before 2026-12-07 such attempts counted for
  none after the upgrade);
- attempts that ended without success: a success shows the step is not stuck, so the
  count starts again after the step's last success;
- attempts since the user last asked for the step explicitly (`--force`, or its
  directory removed): a reset, recorded in the journal with its time.

Attempts that went on (a next stage, a wait for children, a restart) are recorded
again when they end and count then; one the fleet ends as a loop (a restart past the
limit, a wait for nothing twice in a row) or whose children it refuses is recorded again
as failed (fleet.control.recording.Recorder.ended_here) and counts. The count is kept per step as a Tally: the time it
starts again from (`cut`) and the (ended_at, spec) of each attempt since that ended
without success; a step whose count is nothing needs no tally. An attempt `fleet step
--record` wrote says so in its record ("by": BY_FLEET_STEP), and a step stopped is told
how many of its attempts came from there: they have no log in the run directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from fleet.core import states as S

GOES_ON = frozenset({S.WAIT, S.NEXT, S.RESTART})  # exits of an attempt that runs on: not attempts (yet)
NO_CUT = float("-inf")  # nothing to start again from: every attempt counts
BY_FLEET_STEP = "fleet step"  # an attempt record's "by": written by `fleet step --record` (fleet.control.onestep)


@dataclass(frozen=True)
class Tally:
    """A step's attempts that count toward the limit, by definition (see the module's docstring)."""

    cut: float = NO_CUT   # the count starts again after this (wall clock): a success or a reset
    # (ended_at, spec, by fleet step) of each attempt since the cut that ended without success
    ended: tuple = ()

    def count(self, *specs: str) -> int:
        """The attempts that count of the definition whose hashes are `specs` (its hash
        now, and the one records before 2026-12-06 name it by: fleet.wire.spechash)."""
        return sum(1 for e in self.ended if e[1] in specs)

    def by_fleet_step(self, *specs: str) -> int:
        """How many of them `fleet step --record` recorded."""
        return sum(1 for e in self.ended if e[1] in specs and e[2])

    def failed(self, ended_at: float, spec: str | None, by_fleet_step: bool = False) -> Tally:
        """One more attempt ended without success (a record naming no definition counts for none)."""
        return self if spec is None else Tally(self.cut, (*self.ended, (ended_at, spec, by_fleet_step)))

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
            failed.append((t, rec["spec"], rec.get("by") == BY_FLEET_STEP))
    return Tally(cut, tuple(e for e in failed if e[0] > cut))


def stopped(n: int, limit: int, by_fleet_step: int = 0) -> str:
    """Why a step is stopped, and how to go on; how many of the attempts `fleet step
    --record` recorded, if any (before 2026-12-06 not said, and "1 attempts")."""
    by = ("" if not by_fleet_step else "by fleet step --record; " if by_fleet_step == n
          else f"{by_fleet_step} by fleet step --record; ")
    return (f"{n} attempt{'' if n == 1 else 's'} of this definition recorded without success ({by}limit {limit}): "
            "change the step, rerun it with --force, or raise --max-attempts (0: no limit)")
