"""A step's JobView made without the frozen dataclass's __init__.

The coordinator looks at a step's view on each of its reports (Started, Exited: is it
still running there, which attempt) and for the exit record's placement: two or three
views per step. A frozen dataclass's __init__ sets each of its nine fields through
object.__setattr__ (~2 us in CPython); filling the instance's __dict__ directly gives
the same object (equal, same fields in the same order) for a fraction of that. Pure:
no I/O, no clock.
"""

from __future__ import annotations

from typing import NamedTuple

from fleet.core.decisions import JobView

_new = object.__new__
_set = object.__setattr__


def view(j) -> JobView:
    """The JobView of a scheduler job `j` (fleet.core.scheduler._Job), equal to
    JobView(id, state, attempt, placement, started_at, wait_reason, spec, why, generation)."""
    v = _new(JobView)
    why = j.why
    _set(v, "__dict__", {"id": j.spec.id, "state": j.state, "attempt": j.attempt, "placement": j.placement,
                         "started_at": j.started_at, "wait_reason": why.text() if why is not None else None,
                         "spec": j.spec, "why": why, "generation": j.generation})
    return v


class Placed(NamedTuple):
    """What the coordinator checks an agent's report of a running step against (and the
    exit record's placement): two of a view's nine fields, for a fraction of its cost."""
    attempt: int
    placement: tuple
