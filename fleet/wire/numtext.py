"""Numbers spelled as json spells them, for JSON lines put together by shape.

The coordinator writes its per-step lines by shape (fleet.control.linetext), and a
float's spelling is most of their cost: about a microsecond each in CPython, ten of
them in a step's `exit` line. Nine are the step's own times and rusage, known where
the step ended (the tenth, `t`, is the coordinator's), so the zygote spells them
there (exit_numbers) and its Exited carries them (fleet.wire.messages.Exited.spelt):
with 10,000 nodes, the spelling is spread over the nodes instead of queued on the one
coordinator loop. Both ends spell
with these functions, so a line is byte for byte the same whoever spelled its numbers
(tests/control/test_linetext.py).
"""

from __future__ import annotations

import json

# Any value as json spells it in these lines (events.jsonl's encoder, made here too: the
# nodes import this module and not the event log's).
dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode
_frepr, _irepr = float.__repr__, int.__repr__
_INF = float("inf")

# How many numbers exit_numbers spells, in its order.
EXIT_NUMBERS = 9


def num(v) -> str:
    """An int or float as json writes it (None: null)."""
    t = type(v)
    if t is float:
        return _frepr(v) if -_INF < v < _INF else dumps(v)
    if t is int:
        return _irepr(v)
    return dumps(v)


def r6(v) -> str:
    """round(v, 6) as json writes it (a record's time, a duration), at half the cost for a
    float in [1e-4, 8e9) -- durations, and wall-clock times until the year 2223 -- where
    it is "%.6f" without its trailing zeros: doubles there are closer together than
    1e-6, so the nearest 6-decimal value has a double of its own, and no shorter
    spelling (repr's) lands on it (tests/control/test_linetext.py)."""
    if type(v) is float and 1e-4 <= v < 8e9:
        s = ("%.6f" % v).rstrip("0")
        return s + "0" if s[-1] == "." else s
    return num(round(v, 6))


def exit_numbers(decided_at, first_at, work_start, work_end, ended_at, utime, stime, worked=None) -> list:
    """An ended step's numbers as its `exit` line spells them, in this order: decided_at,
    first_at, work_start, work_end, ended_at, startup_s, work_s, utime, stime (the
    durations as the record has them: rounded to the microsecond, never negative;
    work_s as work_seconds gives it)."""
    return [num(decided_at), num(first_at), num(work_start), num(work_end), num(ended_at),
            r6(max(0.0, work_start - decided_at)), num(work_seconds(work_start, work_end, worked)), num(utime),
            num(stime)]


def work_seconds(work_start: float, work_end: float, worked: float | None) -> float:
    """A step's work as its records give it (`work_s`): `worked`, its length by its node's
    monotonic clock (P.Exited.worked_s), or, from a node that sent none (a launch that
    never started), its wall stamps' difference; to the microsecond, never negative."""
    return round(max(0.0, worked if worked is not None else work_end - work_start), 6)
