"""A frozen, slotted dataclass's instances made without its __init__.

A frozen dataclass's __init__ sets each field through object.__setattr__, a call per
field; a step definition (fleet.core.suite.StepSpec) has over two dozen, and a big
array suite makes one per step. `filler(cls)` gives a function that takes every field
by keyword (none may be left out: a field added to the class is an error until its
caller passes it), stores them on an instance of a twin class with the same slots
(plain stores, no call), and then makes the instance the real class's: the two have
one layout, so CPython lets its class be assigned. The object is what __init__ would
have made (equal, same repr and hash: tests/core/test_slotfill.py); it runs no
__post_init__, so it is for classes that have none. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import fields


def filler(cls):
    """A function(**every field) -> cls instance, for a frozen slotted dataclass `cls`."""
    if "__post_init__" in vars(cls):
        raise TypeError(f"{cls.__name__} has a __post_init__, which a filler would skip")
    names = [f.name for f in fields(cls)]
    if tuple(names) != tuple(cls.__slots__):
        raise TypeError(f"{cls.__name__}: its slots are not its fields in order")
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": tuple(names)})
    src = (f"def fill(*, {', '.join(names)}):\n    o = _new(_twin)\n"
           + "".join(f"    o.{n} = {n}\n" for n in names)
           + "    o.__class__ = _cls\n    return o\n")
    scope = {"_new": object.__new__, "_twin": twin, "_cls": cls}
    exec(src, scope)  # as dataclasses makes __init__: one plain store per field
    return scope["fill"]
