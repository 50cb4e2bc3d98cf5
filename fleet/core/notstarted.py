"""Why each step a simulated allocation's end left did not run (`fleet simulate
--walltime`), with the live fleet's verdict on it: a step no allocation as long as this
one could start either (too long itself, or needing such a step) "needs a longer
allocation" (fleet.core.longer, as a live drain's close says: fleet.control.stuck), and
when every step left is so, no job of this length finishes the suite (a live `fleet
run` then exits 1, not 3). A simulated fleet starts at the submission: the time an
allocation gives steps is the time to its drain point, with no room over it (a live
fleet's slack, fleet.core.longer: no fleet comes up sooner than the submission), so a
step the deadline never starts is judged so (before 2026-12-07 one up to 5 % longer
than that time was not, and `0 step(s) need a longer allocation` was said of it).

The other steps keep the reason they did not start: the allocation's end held them
back (the Deadline's words: "expected to take ..., ... left before the drain point"),
a step they need did not run, they were handed to a node ahead and dropped there at the
drain point, or the drain point came while they waited (and what for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from fleet.core import waits as W
from fleet.core.durations import expected_s
from fleet.core.longer import Longer, ran_out


@dataclass(frozen=True)
class Left:
    """What a simulated drain left: `why` each step never started (id -> reason, setup
    order), `longer` the steps, interrupted or not started, that need a longer
    allocation (id -> reason), and `longer_only`: every step left does."""

    why: dict = field(default_factory=dict, hash=False)
    longer: dict = field(default_factory=dict, hash=False)
    longer_only: bool = False


def left(steps, deps: Mapping[str, tuple], placed: Mapping, interrupted: Mapping[str, float],
         never: tuple[str, ...], waits: Mapping[str, W.WaitReason], dropped: set, drain_s: float) -> Left:
    """The reasons and the verdict for the steps that never started (`never`), from the
    steps' specs, the simulation's starts (`placed`: id -> SimStep), the steps stopped at
    the drain point (`interrupted`), each step's last wait (`waits`), the steps dropped
    from a node's queue at the drain (`dropped`) and the drain point (`drain_s`)."""
    specs = {s.id: s for s in steps}
    ran = {sid: ran_out(drain_s - placed[sid].start_s, drain_s, False) for sid in interrupted if sid in placed}
    verdict = Longer(drain_s, {s: r for s, r in ran.items() if r},
                     lambda s: expected_s(specs[s]) if s in specs else None, lambda s: deps.get(s, ()),
                     lambda s: s in placed and s not in interrupted, room=0.0)  # (no fleet comes up sooner)
    why, longer = {}, {}
    for sid in list(interrupted) + list(never):
        too = verdict.why(sid)
        if too is not None:
            longer[sid] = too
    for sid in never:
        why[sid] = longer.get(sid) or _other(sid, deps.get(sid, ()), placed, interrupted, waits, dropped)
    every = len(interrupted) + len(never)
    return Left(why, longer, every > 0 and len(longer) == every)


def _other(sid: str, deps, placed, interrupted, waits, dropped) -> str:
    """Why a step that needs no longer allocation did not start."""
    wait = waits.get(sid)
    if wait is not None and wait.cause == W.DEADLINE:
        return wait.text()
    if sid in dropped:
        return "handed to its node ahead, it waited there behind a step still running at the drain point"
    for d in deps:
        if d in interrupted:
            return f"it needs {d}, which was stopped at the drain point"
        if d not in placed:
            return f"it needs {d}, which did not start"
    if wait is not None:
        return f"the drain point came while it waited: {wait.text()}"
    return "the drain point came before it could start"
