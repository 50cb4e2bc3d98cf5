"""Steps that an allocation as long as this one could not start either: why a drain's
`not_started` step would not run in the next job of the same length.

A job script that resubmits itself on `fleet run`'s exit 3 runs the suite again in a
job like this one. A step whose expected duration (its `estimate`, else its recorded
one: fleet.core.durations) is longer than all the time this allocation gave steps,
from the fleet's start to its drain point, is never started in such a job, and
neither is a step that needs it: resubmitting would only burn allocations (found
with the real Slurm: ten jobs of a few seconds each). Such a step's not_started
reason starts with TOO_LONG, and `fleet run` exits 1 instead of 3 when every step the
drain left is so (fleet.control.runner). So does a step with no expected duration that
the drain interrupted after it had nearly all of this job's time, and saved no progress
(ran_out). What decides is the fleet's own start, not
the job's: the next fleet starts as late into its job, and its scheduler refuses the
same steps. SLACK leaves room for a fleet that comes up a little sooner.
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.durations import expected_s

TOO_LONG = "needs a longer allocation"
SLACK = 1.05  # a step is too long when it takes more than this times the allocation's time
RAN_OUT = 0.9  # an interrupted step that ran this share of the allocation's time had all it could get
DONE = (S.SUCCEEDED, S.SKIPPED)


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.3g} min"


def ran_out(ran: float, window: float | None, saved: bool) -> str | None:
    """TOO_LONG and why, for a step the drain interrupted after it ran `ran` seconds of the
    `window` an allocation like this one gives steps, if that was nearly all of it and the
    step `saved` no progress of its own (fleet.Restart, a stage: then the next job goes
    on from there); else None. A step with no expected duration is judged so, once it
    has had a whole allocation and not finished."""
    if window is None or window <= 0 or saved or ran < RAN_OUT * window:
        return None
    return (f"{TOO_LONG}: it ran {_span(ran)} of the {_span(window)} an allocation like this one gives steps, "
            f"and had not ended")


class Stuck:
    """For one close: which not-started steps no allocation as long as this one could start
    (`window`: the seconds from the fleet's start to its drain point)."""

    def __init__(self, coord, window: float | None):
        self.coord = coord
        self.window = window
        self._memo: dict[str, str | None] = {}

    def why(self, step: str) -> str | None:
        """TOO_LONG and why, for a step that could not start in such an allocation either
        (itself too long, or a step it needs), else None."""
        if self.window is None:
            return None
        memo = self._memo
        if step in memo:
            return memo[step]
        memo[step] = None  # (a cycle cannot be: the graph has none; this ends any walk)
        c = self.coord
        spec = c.specs.get(step)
        out = None
        if spec is not None:
            exp = expected_s(spec, c.sched.deadline.recorded)
            if exp is not None and exp > SLACK * self.window:
                out = (f"{TOO_LONG}: it takes about {_span(exp)}, and an allocation like this one gives steps "
                       f"{_span(max(0.0, self.window))} before its drain point")
            else:
                for dep in self._deps(step):
                    if c.sched.state_of(dep) not in DONE and self.why(dep) is not None:
                        out = f"{TOO_LONG}: it needs {dep}, which does"
                        break
        memo[step] = out
        return out

    def _deps(self, step: str) -> tuple:
        try:
            return self.coord.sched.deps_of(step)
        except KeyError:  # (not entered before the drain: its explicit ones)
            spec = self.coord.specs.get(step)
            return spec.deps if spec is not None else ()
