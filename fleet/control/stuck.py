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
the drain interrupted after it had nearly all of this job's time before the drain (its
grace after the drain point is not counted: a step that started late and then took its
grace is no such step), and saved no progress (ran_out), and so does every step that
needs such a step. What decides is the fleet's own start, not the job's: the next fleet starts
as late into its job, and its scheduler refuses the same steps. SLACK leaves room for a
fleet that comes up a little sooner.
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.durations import expected_s
from fleet.wire.events import LONGER, NEEDS

TOO_LONG = LONGER  # (the words are the not_started record's: fleet report and fleet audit read them back)
SLACK = 1.05  # a step is too long when it takes more than this times the allocation's time
RAN_OUT = 0.9  # an interrupted step that ran this share of the allocation's time had all it could get
DONE = (S.SUCCEEDED, S.SKIPPED)


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.3g} min"


def ran_out(ran: float, window: float | None, saved: bool) -> str | None:
    """TOO_LONG and why, for a step the drain interrupted after it ran `ran` seconds (from
    its start to the drain, not to its exit) of the `window` an allocation like this one
    gives steps, if that was nearly all of it and the
    step `saved` no progress of its own (fleet.Restart, a stage: then the next job goes
    on from there); else None. A step with no expected duration is judged so, once it
    has had a whole allocation and not finished."""
    if window is None or window <= 0 or saved or ran < RAN_OUT * window:
        return None
    return (f"{TOO_LONG}: it ran {_span(ran)} of the {_span(window)} an allocation like this one gives steps, "
            f"and had not ended")


class Stuck:
    """For one close: which not-started steps no allocation as long as this one could start
    (`window`: the seconds from the fleet's start to its drain point; `ran_out`: the
    steps the drain interrupted that had all of it, and why: ran_out's)."""

    def __init__(self, coord, window: float | None, ran_out: dict[str, str] | None = None):
        self.coord = coord
        self.window = window
        self.ran_out = ran_out or {}
        self._memo: dict[str, str | None] = {}
        self._seen: set[str] = set()  # steps whose deps were put on the walk's stack
        self.needs: dict[str, str] = {}  # a step judged so for a step it needs -> that step

    def why(self, step: str) -> str | None:
        """TOO_LONG and why, for a step that could not start in such an allocation either
        (itself too long, or a step it needs), else None. Walked with a stack, not by
        recursion: a chain of thousands of steps listed dependents first is a suite."""
        if self.window is None:
            return None
        memo, state_of = self._memo, self.coord.sched.state_of
        stack = [step]
        while stack:
            s = stack[-1]
            if s in memo:
                stack.pop()
                continue
            out = self._own(s)
            if out is None:
                deps = [d for d in self._deps(s) if state_of(d) not in DONE]
                todo = [d for d in deps if d not in memo]
                if todo and s not in self._seen:  # its deps first, then s again
                    self._seen.add(s)
                    stack.extend(todo)
                    continue
                dep = next((d for d in deps if memo.get(d) is not None), None)
                out = None if dep is None else NEEDS.format(dep)
                if dep is not None:
                    self.needs[s] = dep
            memo[s] = out
            stack.pop()
        return memo[step]

    def _own(self, step: str) -> str | None:
        """Why the step itself is too long (its expected duration, or it ran out of this
        job's time: ran_out), else None."""
        out = self.ran_out.get(step)
        if out is not None:
            return out
        c = self.coord
        spec = c.specs.get(step)
        exp = None if spec is None else expected_s(spec, c.sched.deadline.recorded)
        if exp is None or exp <= SLACK * self.window:
            return None
        return (f"{TOO_LONG}: it takes about {_span(exp)}, and an allocation like this one gives steps "
                f"{_span(max(0.0, self.window))} before its drain point")

    def _deps(self, step: str) -> tuple:
        try:
            return self.coord.sched.deps_of(step)
        except KeyError:  # (not entered before the drain: its explicit ones)
            spec = self.coord.specs.get(step)
            return spec.deps if spec is not None else ()
