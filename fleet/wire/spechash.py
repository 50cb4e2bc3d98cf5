"""A step's definition hash (fleet.wire.records.spec_hash), the same value made faster.

The hash is sha256 of repr(spec.identity()), its first 16 hex digits; markers and
attempt records on disk hold it, and a rerun compares it, so its value for a definition
must not change (it did once: on 2026-12-06 the scheduling fields left the identity, and
a marker written before names legacy_hash, which fleet.wire.records reads too). identity() builds a tuple of (name, frozen value) pairs (a generator and a
function call per field) that repr then walks: ~17 us per step in CPython, taken for
every step that runs. Here the same text is made from each field's piece,
"(name, repr(value))" joined by ", " in brackets (what repr gives for a tuple of pairs):
a plain value's piece spelt by one format, an empty one's remembered (per-step cost
~4 us, where remembering every shared value's piece cost ~11 with a million steps'
unique ids churning the table). A field that is not a
plain value (args, command lists) goes through the same _freeze as identity().
The text between the fields that changed since the step before is kept as a template
(see _Speller): a step of a big array table spells only its own few pieces.
tests/wire/test_spechash.py compares the two over varied steps.
"""

from __future__ import annotations

import hashlib
import operator
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


def _piece(name: str, v) -> str:
    """One field's "(name, repr(frozen value))"."""
    t = type(v)
    if t in _PLAIN:
        return f"('{name}', {v!r})"
    if t in _EMPTY and not v:
        piece = _pieces.get((name, t))
        if piece is None:
            piece = _pieces[name, t] = repr((name, _suite._freeze(v)))
        return piece
    if t is tuple and all(type(x) is str for x in v):  # deps, inputs, argv: _freeze gives the tuple itself
        return repr((name, v))
    return repr((name, _suite._freeze(v)))


class _Speller:
    """repr(spec.identity(names)) for one tuple of field names, with its own template: the
    text of the last step it spelt (its field values, which of them were the very objects
    of the step before, the text between the others). Steps of one array table share most
    field values as the same objects (only id, task, workdir differ), so the next such
    step's text is that template filled with its few own pieces. One tuple, replaced
    whole: the worker thread and the loop may both hash, and each reads a consistent
    template (a lost update costs one rebuild, never a wrong text)."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.values = operator.attrgetter(*names)
        self.template: tuple | None = None

    def text(self, spec) -> str:
        names, vals, tpl = self.names, self.values(spec), self.template
        same = (False,) * len(vals) if tpl is None else tuple(map(operator.is_, vals, tpl[0]))
        if tpl is not None and same == tpl[1]:
            holes, segs = tpl[2], tpl[3]
        else:  # a new template: this step's pieces, with a hole where a value changed
            holes = tuple(i for i, s in enumerate(same) if not s)
            segs = ("(" + ", ".join(_HOLE if not s else _piece(n, v) for n, v, s in zip(names, vals, same))
                    + ")").split(_HOLE)
        self.template = (vals, same, holes, segs)
        parts = [segs[0]]
        for k, i in enumerate(holes):
            parts.append(_piece(names[i], vals[i]))
            parts.append(segs[k + 1])
        if spec.protocol:  # only when set (StepSpec.identity): after every other field
            parts[-1] = parts[-1][:-1] + ", " + repr(("protocol", spec.protocol)) + ")"
        if spec.env:  # the same, after protocol
            parts[-1] = parts[-1][:-1] + ", " + repr(("env", spec.env)) + ")"
        return "".join(parts)


_HOLE = "\0"  # in no piece: repr escapes it
_current = _Speller(_suite._IDENTITY)
_legacy = _Speller(_suite.LEGACY_IDENTITY)


def text(spec) -> str:
    """repr(spec.identity()), made piece by piece (see the module doc)."""
    return _current.text(spec)


def legacy_hash(spec) -> str:
    """The hash markers written before 2026-12-06 name for this definition (scheduling
    fields included: fleet.core.suite.LEGACY_IDENTITY)."""
    return hashlib.sha256(_legacy.text(spec).encode()).hexdigest()[:16]


def spec_hash(spec) -> str:
    """The first 16 hex digits of sha256(repr(spec.identity())), as ever."""
    return hashlib.sha256(text(spec).encode()).hexdigest()[:16]
