"""Messages sent on every step, encoded by shape: a msgpack array, not a map.

Started, Exited and Launch cross the wire once or twice per step (Launch coordinator ->
agent -> zygote; Started and Exited zygote -> agent -> coordinator). As maps they carry
every field's name (Exited 19, Launch 31) and decoding them built a dict of names, checked
each key, and called the frozen dataclass's __init__ (one object.__setattr__ per field):
the coordinator's largest decoding cost per step. By shape, the array is
``[version, type, field1, field2, ...]`` in the class's field order; the decoder zips the
values with the names it knows and applies the same per-field type checks as a map's
(fleet.wire.messages.decode), then fills the message without its __init__ (equal to
``cls(**fields)``: fields missing at the end take their defaults).

Both ends of every hop are the same install of fleet (the version check refuses any
other: the protocol version was bumped to 2 with this form), so the field order is the
same at both ends. A map of any type is still decoded as before; an array of any type is
decoded here, so a sender may use either.
"""

from __future__ import annotations

import dataclasses
import operator
import threading

import msgpack

from fleet.wire import messages as M
from fleet.wire import shapefast


class _Shape:
    """One message class's field names, in order, how many have no default, its
    defaults (factories called per message) and a getter of its values in order."""

    __slots__ = ("names", "required", "defaults", "factories", "values", "_exact", "_decoder")

    def __init__(self, cls):
        fields = dataclasses.fields(cls)
        self.names = tuple(f.name for f in fields)
        self.required = sum(1 for f in fields
                            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        self.defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
        self.factories = tuple((f.name, f.default_factory) for f in fields
                               if f.default_factory is not dataclasses.MISSING)
        self.values = operator.itemgetter(*self.names)
        self._exact = None
        self._decoder = None

    def exact(self, cls) -> tuple:
        """Per field, in order, the types taken as they come (fleet.wire.messages._EXACT)."""
        if self._exact is None:
            self._exact = tuple(M._EXACT[cls][name] for name in self.names)
        return self._exact

    def decoder(self, cls, kind: str):
        """decode() of a full array of this class, as one generated function
        (fleet.wire.shapefast): the same checks, without a loop and dict per message."""
        if self._decoder is None:
            self._decoder = shapefast.compile_decoder(cls, kind, self.names, self.exact(cls), M._KINDS[cls], _checked)
        return self._decoder


class _Shapes(dict):
    def __missing__(self, cls):
        shape = self[cls] = _Shape(cls)
        return shape


_SHAPES = _Shapes()


# One packer per thread, reused: msgpack.packb makes (and frees) a Packer and its buffer
# per call, ~1 us of a Launch's encoding on the coordinator's loop.
_local = threading.local()


def encode(msg) -> bytes:
    """``[version, type, *fields]``: the message's fields in its class's order."""
    try:
        pack = _local.pack
    except AttributeError:
        pack = _local.pack = msgpack.Packer(use_bin_type=True).pack
    return pack([M.VERSION, msg.TYPE, *_SHAPES[type(msg)].values(msg.__dict__)])


# A message type's whole array length and its decoder, once one was decoded: the rest of
# its kind go straight to it (a type name is one of a few: fleet.wire.messages._TYPES).
_FULL: dict[str, tuple] = {}


def decode(body: list):
    """The message an array holds (see the module doc); ProtocolError as for a map."""
    if len(body) < 2:
        raise M.ProtocolError("an array message without its version and type")
    version, kind = body[0], body[1]
    if type(version) is not int or version != M.VERSION:  # True == 1 and 1.0 == 1 are no version
        raise M.VersionMismatch(version)
    full = _FULL.get(kind) if type(kind) is str else None
    if full is not None and len(body) == full[0]:  # every field there, as fleet sends them: its decoder
        return full[1](body)
    cls = M._TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise M.ProtocolError(f"unknown message type {kind!r}")
    shape = _SHAPES[cls]
    n = len(body) - 2
    if n == len(shape.names):  # every field there (what fleet sends): one generated function
        if type(kind) is str:  # (not a subclass: its hash and equality are str's)
            _FULL[kind] = (len(body), shape.decoder(cls, kind))
        return shape.decoder(cls, kind)(body)
    if n > len(shape.names):
        raise M.ProtocolError(f"{kind}: {n} fields, it has {len(shape.names)}")
    if n < shape.required:
        raise M.ProtocolError(f"{kind}: missing fields {list(shape.names[n:shape.required])}")
    values = dict(zip(shape.names, body[2:]))
    for name, value, plain in zip(shape.names, body[2:], shape.exact(cls)):
        if type(value) not in plain:  # else a plain value of a wanted type: nothing to check or convert
            values[name] = _checked(cls, kind, name, value)
    return _filled(cls, shape, n, values)


def _checked(cls, kind: str, name: str, value):
    """A map's decoding's check of one field (fleet.wire.messages.decode): the value,
    converted to tuples where the field is one."""
    want = M._KINDS[cls][name]
    if want and not any(M._is(value, w) for w in want):
        raise M.ProtocolError(f"{kind}: field {name!r} is not a {' | '.join(want)}")
    return M._tuples(value) if "tuple" in want else value


def _filled(cls, shape: _Shape, n: int, values: dict):
    """The message without its frozen __init__: equal to cls(**values)."""
    msg = object.__new__(cls)
    d = msg.__dict__
    if n < len(shape.names):
        d.update(shape.defaults)
        for name, factory in shape.factories:
            d[name] = factory()
    d.update(values)
    if n < len(shape.names):  # the defaults came first: put the fields back in their order
        ordered = {name: d[name] for name in shape.names}
        d.clear()
        d.update(ordered)
    return msg
