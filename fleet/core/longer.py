"""The "needs a longer allocation" verdict: which steps an allocation as long as this
one could not start either, in the pure core, for a live drain (fleet.control.stuck)
and for `fleet simulate --walltime` (fleet.core.simulate) alike.

A step whose expected duration is longer than all the time an allocation gives steps
(`window`: from the fleet's start, the batch job's first fleet's, to its drain point:
fleet.control.jobstart) is never started in a job of that length, and neither is a
step that needs it: resubmitting would only burn allocations. So is a step the drain
interrupted after it had nearly all of that time and saved no progress (ran_out), and
every step that needs one.

A live fleet gives a step a little room (slack): the next job's first fleet may come up a
little sooner into its job and give steps a little more, so a step up to that much longer
than this job gave is not judged so. The room is absolute and small, at most SLACK_S and
at most SLACK_SHARE of the window: before 2026-12-07 it was 5 % of the window (72 minutes
of a 24-hour job), and a step that the deadline never starts in such a job, yet within
that 5 %, was not judged so, and a resubmitting job script ran job after job that never
started it. `fleet simulate` gives none: its clock starts at the submission, no fleet
comes up sooner than that.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from fleet.core.deadline import apart

# The reason a step gets that no allocation like the drained one could start either, and
# that of a step needing such a step (NEEDS.format(that step)): the not_started record's
# words (fleet.wire.events), which `fleet report` and `fleet audit` read back.
LONGER = "needs a longer allocation"
NEEDS = LONGER + ": it needs {}, which does"
SLACK_S = 60.0  # a live fleet's room (slack): at most this many seconds...
SLACK_SHARE = 0.05  # ...and at most this share of the time the allocation gives steps
RAN_OUT = 0.9  # an interrupted step that ran this share of the allocation's time had all it could get


def span(seconds: float) -> str:
    """Seconds as the verdict says them: whole seconds, or minutes from 2 min on (three
    digits, whole minutes from 1000 on: `.3g` said a 24-hour job's "1.44e+03 min")."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    return f"{minutes:.3g} min" if minutes < 1000 else f"{minutes:.0f} min"


def slack(window: float | None) -> float:
    """The room a live fleet gives a step over `window` (see above): SLACK_SHARE of it,
    at most SLACK_S."""
    return 0.0 if window is None or window <= 0 else min(SLACK_SHARE * window, SLACK_S)


def ran_out(ran: float, window: float | None, saved: bool) -> str | None:
    """LONGER and why, for a step the drain interrupted after it ran `ran` seconds (from
    its start to the drain, not to its exit) of the `window` an allocation like this one
    gives steps, if that was nearly all of it and the step `saved` no progress of its own
    (fleet.Restart, a stage: then the next job goes on from there); else None. A step
    with no expected duration is judged so, once it has had a whole allocation and not
    finished."""
    if window is None or window <= 0 or saved or ran < RAN_OUT * window:
        return None
    return (f"{LONGER}: it ran {span(ran)} of the {span(window)} an allocation like this one gives steps, "
            f"and had not ended")


def too_long(expected: float | None, window: float | None, room: float = 0.0) -> str | None:
    """LONGER and why, for a step expected to take `expected` seconds (None: unknown), if
    that is more than `room` seconds over what an allocation giving steps `window`
    seconds can give it (a live fleet's room: slack(window)); else None."""
    if window is None or expected is None or expected <= window + room:
        return None
    took, gives = span(expected), span(max(0.0, window))
    if took == gives:  # (a step a little too long: "about 10 s ... gives steps 10 s" read as a contradiction)
        took, gives = (f"{x} s" for x in apart(expected, max(0.0, window)))
    return (f"{LONGER}: it takes about {took}, and an allocation like this one gives steps "
            f"{gives} before its drain point")


class Longer:
    """For one drain: which steps no allocation as long as this one could start (`window`:
    its seconds from the fleet's start to the drain point, None: no end known; `ran_out`:
    the steps the drain interrupted that had all of it, and why; `room`: the seconds a
    step may take over the window, a live fleet's slack(window), none in a simulation).
    What a step is expected to take, what it needs and whether a step is done come from
    the callables."""

    def __init__(self, window: float | None, ran_out: Mapping[str, str] | None,
                 expected: Callable[[str], float | None], deps: Callable[[str], Iterable[str]],
                 done: Callable[[str], bool], room: float = 0.0):
        self.window, self.room = window, room
        self.ran_out = dict(ran_out or {})
        self._expected, self._deps_of, self._done = expected, deps, done
        self._memo: dict[str, str | None] = {}
        self._seen: set[str] = set()  # steps whose deps were put on the walk's stack
        self.needs: dict[str, str] = {}  # a step judged so for a step it needs -> that step

    def why(self, step: str) -> str | None:
        """LONGER and why, for a step that could not start in such an allocation either
        (itself too long, or a step it needs), else None. Walked with a stack, not by
        recursion: a chain of thousands of steps listed dependents first is a suite."""
        if self.window is None:
            return None
        memo, done = self._memo, self._done
        stack = [step]
        while stack:
            s = stack[-1]
            if s in memo:
                stack.pop()
                continue
            out = self.ran_out.get(s) or too_long(self._expected(s), self.window, self.room)
            if out is None:
                deps = [d for d in self._deps_of(s) if not done(d)]
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
