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
the encoder itself. Numbers are spelled by fleet.wire.numtext, which the nodes share: a
step's own times come spelled from its node (fleet.wire.messages.Exited.spelt).
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii as esc

from fleet.wire.numtext import dumps, num

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
    return dumps(v)

