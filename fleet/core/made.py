"""The scheduler's per-step records made without the frozen dataclass's __init__.

Every step that runs costs the core one Start and one Finished (and one Slot, made
so in fleet.core.resources, which this module imports). A frozen dataclass's __init__ sets each field through object.__setattr__;
filling the instance's __dict__ directly gives the same object (equal, same repr, the
same fields in the same order) for a fraction of that (as fleet.core.viewfill does for
a JobView). tests/core/test_made.py holds each to its class's fields, so a field
added there cannot be missed here. Pure: no I/O, no clock.
"""

from __future__ import annotations

from fleet.core.decisions import Finished, Start

_new = object.__new__
_set = object.__setattr__


def start(step: str, attempt: int, placement: tuple, resume=None) -> Start:
    """Start(step, attempt, placement, resume)."""
    v = _new(Start)
    _set(v, "__dict__", {"step": step, "attempt": attempt, "placement": placement, "resume": resume})
    return v


def finished(step: str, attempt: int, outcome: str, reason: str = "", ran: bool = True) -> Finished:
    """Finished(step, attempt, outcome, reason, ran)."""
    v = _new(Finished)
    _set(v, "__dict__", {"step": step, "attempt": attempt, "outcome": outcome, "reason": reason, "ran": ran,
                         "overrules": False, "goes_on": False})
    return v
