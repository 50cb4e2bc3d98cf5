"""A step's definition hash (fleet.wire.records.spec_hash), the same value made faster.

The hash is sha256 of repr(spec.identity()), its first 16 hex digits; markers and
attempt records on disk hold it, and a rerun compares it, so its value must never
change. identity() builds a tuple of (name, frozen value) pairs (a generator and a
function call per field) that repr then walks: ~17 us per step in CPython, taken for
every step that runs. Here the same text is made from each field's piece,
"(name, repr(value))" joined by ", " in brackets (what repr gives for a tuple of pairs):
a plain value's piece spelt by one format, an empty one's remembered (per-step cost
~4 us, where remembering every shared value's piece cost ~11 with a million steps'
unique ids churning the table). A field that is not a
plain value (args, command lists) goes through the same _freeze as identity().
tests/wire/test_spechash.py compares the two over varied steps.
"""

from __future__ import annotations

import hashlib
from types import MappingProxyType

from fleet.core import suite as _suite

# Plain values: repr(v) is repr(_freeze(v)), so "(name, value)" is spelt directly (the
# field names are identifiers: repr(name) is name in quotes). Not remembered: most steps'
# pieces of these are unique (id, task, workdir) and a table of them only churned.
_PLAIN = frozenset({str, int, float, bool, type(None)})
# An empty tuple, list or mapping (args, deps, inputs ...: most steps) freezes to ();
# its piece is remembered by (field, type).
_EMPTY = frozenset({tuple, list, dict, MappingProxyType})
_pieces: dict[tuple, str] = {}


def text(spec) -> str:
    """repr(spec.identity()), made piece by piece (see the module doc)."""
    parts = []
    for name in _suite._IDENTITY:
        v = getattr(spec, name)
        t = type(v)
        if t in _PLAIN:
            parts.append(f"('{name}', {v!r})")
        elif t in _EMPTY and not v:
            piece = _pieces.get((name, t))
            if piece is None:
                piece = _pieces[name, t] = repr((name, _suite._freeze(v)))
            parts.append(piece)
        else:
            parts.append(repr((name, _suite._freeze(v))))
    if spec.protocol:
        parts.append(repr(("protocol", spec.protocol)))
    return "(" + ", ".join(parts) + ")"


def spec_hash(spec) -> str:
    """The first 16 hex digits of sha256(repr(spec.identity())), as ever."""
    return hashlib.sha256(text(spec).encode()).hexdigest()[:16]
