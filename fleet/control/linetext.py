"""JSON text for the coordinator's per-step lines, written by shape.

A record built as a dict and handed to json's encoder costs the loop, per line, the
encoder's setup (JSONEncoder.encode makes a C encoder and its closures on every call),
the dict, and one hash per key. The lines written on every step (the `exit` record, the
journal's `done` line and the marker it carries) have a fixed shape: their text is put
together here from the values, each value spelled as json spells it. Strings go through
json's own C escaper (ensure_ascii, as the encoders of fleet.wire.events and
fleet.control.journal), ints and finite floats through their repr (json's spelling), so
the text is byte for byte what the encoder gives (tests/control/test_linetext.py). A
value of any other kind (a float that is not finite: json spells it NaN) is spelled by
the encoder itself.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as esc

_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode
_frepr, _irepr = float.__repr__, int.__repr__
_INF = float("inf")

# Strings that recur on every step (node names, outcomes, the fleet's id), escaped once.
_escaped: dict[str, str] = {}


def text(v: str) -> str:
    """A recurring string (a node's name, an outcome) as JSON, escaped once."""
    out = _escaped.get(v)
    if out is None:
        if len(_escaped) > 100_000:  # node names: bounded by the allocation; never many
            _escaped.clear()
        out = _escaped[v] = esc(v)
    return out


def num(v) -> str:
    """An int or float as json writes it (None: null)."""
    t = type(v)
    if t is float:
        return _frepr(v) if -_INF < v < _INF else _dumps(v)
    if t is int:
        return _irepr(v)
    return _dumps(v)


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


def ints(values) -> str:
    """A list of ints (cores, GPUs) as json writes it."""
    if not values:
        return "[]"
    return "[" + ",".join(map(num, values)) + "]"


def value(v) -> str:
    """Any value as json writes it: the common kinds by hand, the rest by the encoder."""
    t = type(v)
    if t is str:
        return esc(v)
    if t is float or t is int:
        return num(v)
    if v is None:
        return "null"
    return _dumps(v)


class Num:
    """A number whose repr is json's spelling (NaN, Infinity): for a %r of a template."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __repr__(self) -> str:
        return num(self.v)
