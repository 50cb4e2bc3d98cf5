"""A step's definition hash (fleet.wire.records.spec_hash), the same value made faster.

The hash is sha256 of repr(spec.identity()), its first 16 hex digits; markers and
attempt records on disk hold it, and a rerun compares it, so its value must never
change. identity() builds a tuple of (name, frozen value) pairs (a generator and a
function call per field) that repr then walks: ~17 us per step in CPython, taken for
every step that runs. Here the same text is made from each field's piece,
"(name, repr(value))" joined by ", " in brackets (what repr gives for a tuple of pairs),
and a piece is remembered for values steps share (an array's command, cores, priority
...): the per-step cost is a few dictionary lookups and one join. A field that is not a
plain value (args, command lists) goes through the same _freeze as identity().
tests/wire/test_spechash.py compares the two over varied steps.
"""

from __future__ import annotations

import hashlib

from fleet.core import suite as _suite

# Values whose pieces are remembered: equal keys have equal reprs (not floats: 0.0 == -0.0).
_KEYED = frozenset({str, int, bool, type(None)})
_pieces: dict[tuple, str] = {}  # (field, type, value) -> "('field', value)"; bounded below
_MAX_PIECES = 1 << 16


def text(spec) -> str:
    """repr(spec.identity()), made piece by piece (see the module doc)."""
    parts = []
    for name in _suite._IDENTITY:
        v = getattr(spec, name)
        key = (name, type(v), v) if type(v) in _KEYED or v == () else None
        piece = _pieces.get(key) if key is not None else None
        if piece is None:
            piece = repr((name, _suite._freeze(v)))
            if key is not None:
                if len(_pieces) >= _MAX_PIECES:  # unique values (ids, work dirs) must not grow it
                    _pieces.clear()
                _pieces[key] = piece
        parts.append(piece)
    if spec.protocol:
        parts.append(repr(("protocol", spec.protocol)))
    return "(" + ", ".join(parts) + ")"


def spec_hash(spec) -> str:
    """The first 16 hex digits of sha256(repr(spec.identity())), as ever."""
    return hashlib.sha256(text(spec).encode()).hexdigest()[:16]
