"""How long a step is expected to take: one accessor for every part that asks
(the drain before the allocation's end, `fleet simulate`, reservations).

A step's own `estimate` comes first; else a recorded duration of the same step from
an earlier run (the work seconds its done marker holds, passed in by whoever read the
markers); else nothing is known (None), and the caller says what that means for it.
"""

from __future__ import annotations

from typing import Mapping

from fleet.core.suite import StepSpec


def expected_s(spec: StepSpec, recorded: Mapping[str, float] | None = None) -> float | None:
    """The step's expected duration in seconds: its estimate, else its recorded
    duration, else None."""
    if spec.estimate is not None:
        return float(spec.estimate)
    if recorded:
        return recorded.get(spec.id)
    return None


def recorded(markers: Mapping[str, dict | None], skip=frozenset()) -> dict[str, float]:
    """The recorded work seconds of each step whose marker holds them, but those in
    `skip` (steps done, which will not run): what a submission passes to the scheduler."""
    out: dict[str, float] = {}
    for sid, rec in markers.items():
        if rec is None or sid in skip:
            continue
        w = rec.get("work_s")
        if isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0:
            out[sid] = float(w)
    return out
