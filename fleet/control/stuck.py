"""Steps that an allocation as long as this one could not start either: why a drain's
`not_started` step would not run in the next job of the same length.

A job script that resubmits itself on `fleet run`'s exit 3 runs the suite again in a
job like this one. A step whose expected duration (its `estimate`, else its recorded
one: fleet.core.durations) is longer than all the time this allocation gave steps,
from its first fleet's start to the drain point, is never started in such a job, and
neither is a step that needs it: resubmitting would only burn allocations (found
with the real Slurm: ten jobs of a few seconds each). Longer by more than a little room,
that is: 5 % of that time, at most a minute (fleet.core.longer.slack; before 2026-12-07
5 % whatever the job's length, 72 minutes of a 24-hour job). Such a step's not_started
reason starts with TOO_LONG, and `fleet run` exits 1 instead of 3 when every step the
drain left is so (fleet.control.runner). So does a step with no expected duration that
the drain interrupted after it had nearly all of this job's time before the drain (its
grace after the drain point is not counted: a step that started late and then took its
grace is no such step), and saved no progress (ran_out), and so does every step that
needs such a step. What decides is when this batch job's first fleet in the run directory
started, not when the job did: the next job's first fleet starts as late into its job, and
its scheduler refuses the same steps (the job's start would count the job script's prologue
and `fleet up`'s start-up as step time, and a step that fits only that would be resubmitted
for ever). A fleet brought up again later in the same job, the first one lost (`fleet run`
exit 5), measures from that first fleet's start too, as recorded in the run directory
(fleet.control.jobstart; Drain.window): from its own, a step that fits the job was judged
too long, and the resubmitting chain stopped (before 2026-12-07). A fleet outside a batch
job measures from its own start. The rule itself is the core's (fleet.core.longer), which
`fleet simulate --walltime` applies too.
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.core.durations import expected_s
from fleet.core.longer import LONGER, Longer, ran_out, slack  # noqa: F401 (ran_out: for fleet.control.drain)

TOO_LONG = LONGER  # (the words are the not_started record's: fleet report and fleet audit read them back)
DONE = (S.SUCCEEDED, S.SKIPPED)


class Stuck(Longer):
    """For one close: which not-started steps no allocation as long as this one could start
    (`window`: the seconds from the job's first fleet's start to the drain point,
    Drain.window; `ran_out`: the steps the drain interrupted that had all of it, and why:
    ran_out's), judged from the coordinator's scheduler and specs, with a live fleet's
    room over the window (fleet.core.longer.slack: the next job's fleet may come up a
    little sooner)."""

    def __init__(self, coord, window: float | None, ran_out: dict[str, str] | None = None):
        self.coord = coord
        super().__init__(window, ran_out, self._expected_of, self._deps, self._is_done, room=slack(window))

    def _expected_of(self, step: str) -> float | None:
        spec = self.coord.specs.get(step)
        return None if spec is None else expected_s(spec, self.coord.sched.deadline.recorded)

    def _is_done(self, step: str) -> bool:
        return self.coord.sched.state_of(step) in DONE

    def _deps(self, step: str) -> tuple:
        try:
            return self.coord.sched.deps_of(step)
        except KeyError:  # (not entered before the drain: its explicit ones)
            spec = self.coord.specs.get(step)
            return spec.deps if spec is not None else ()
