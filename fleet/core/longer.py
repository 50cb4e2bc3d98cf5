"""The "needs a longer allocation" verdict: which steps an allocation as long as this
one could not start either, in the pure core, for a live drain (fleet.control.stuck)
and for `fleet simulate --walltime` (fleet.core.simulate) alike.

A step whose expected duration is longer than all the time an allocation gives steps
(`window`: from the fleet's start, the batch job's first fleet's, to its drain point:
fleet.control.jobstart) is never started in a job of that length, and neither is a
step that needs it: resubmitting would only burn allocations. So is a step the drain
interrupted after it had nearly all of that time and saved no progress (ran_out), and
every step that needs one. SLACK leaves room for a fleet that comes up a little sooner.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

# The reason a step gets that no allocation like the drained one could start either, and
# that of a step needing such a step (NEEDS.format(that step)): the not_started record's
# words (fleet.wire.events), which `fleet report` and `fleet audit` read back.
LONGER = "needs a longer allocation"
NEEDS = LONGER + ": it needs {}, which does"
SLACK = 1.05  # a step is too long when it takes more than this times the allocation's time
RAN_OUT = 0.9  # an interrupted step that ran this share of the allocation's time had all it could get


def span(seconds: float) -> str:
    """Seconds as the verdict says them: whole seconds, or minutes from 2 min on."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.3g} min"


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


def too_long(expected: float | None, window: float | None) -> str | None:
    """LONGER and why, for a step expected to take `expected` seconds (None: unknown), if
    that is more than an allocation giving steps `window` seconds can give it; else None."""
    if window is None or expected is None or expected <= SLACK * window:
        return None
    return (f"{LONGER}: it takes about {span(expected)}, and an allocation like this one gives steps "
            f"{span(max(0.0, window))} before its drain point")


class Longer:
    """For one drain: which steps no allocation as long as this one could start (`window`:
    its seconds from the fleet's start to the drain point, None: no end known; `ran_out`:
    the steps the drain interrupted that had all of it, and why). What a step is expected
    to take, what it needs and whether a step is done come from the callables."""

    def __init__(self, window: float | None, ran_out: Mapping[str, str] | None,
                 expected: Callable[[str], float | None], deps: Callable[[str], Iterable[str]],
                 done: Callable[[str], bool]):
        self.window = window
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
            out = self.ran_out.get(s) or too_long(self._expected(s), self.window)
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
