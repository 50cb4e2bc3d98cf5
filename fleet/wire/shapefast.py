"""One generated decoding function per message class sent by shape (fleet.wire.shapes).

Started and Exited reach the coordinator once per step each. The general decoder zips
the array with the field names into a dict, loops over the fields checking each value's
type, and fills the message: ~5 and ~11 us in CPython. The function made here for a
class does the same for an array holding every field -- the same exact-type test per
field, the same fallback check (and tuple conversion) for anything else, the message
filled without the frozen __init__ -- as straight-line code: one unpacking, one test per
field, one dict display. Arrays that leave out trailing fields still take the general
path. The code is made from the class's own field names (identifiers by construction),
never from anything received.
"""

from __future__ import annotations


def compile_decoder(cls, kind: str, names: tuple, exact: tuple, kinds: dict, checked):
    """decode(body) for a ``[version, type, *fields]`` array of `cls` holding all of its
    fields (the caller checked version, type and length); ProtocolError as the general
    path raises it. `checked(cls, kind, name, value)` is the general path's check."""
    local = [f"f{i}" for i in range(len(names))]
    lines = ["def decode(body):", f"    _v, _k, {', '.join(local)}, = body"]
    env = {"cls": cls, "kind": kind, "checked": checked, "new": object.__new__, "setattr": object.__setattr__,
           "flat": _flat}
    for i, (name, plain) in enumerate(zip(names, exact)):
        if not kinds[name]:  # an unchecked field: taken as it comes, as the general path does
            continue
        if "tuple" in kinds[name]:  # a list or tuple, nested ones made tuples (fleet.wire.messages._tuples)
            lines.append(f"    f{i} = flat(f{i}, checked, cls, kind, {name!r})"
                         f" if type(f{i}) is list else checked(cls, kind, {name!r}, f{i})")
            continue
        env[f"T{i}"] = plain
        test = f"type(f{i}) is not {_one(plain, env, i)}" if len(plain) == 1 else f"type(f{i}) not in T{i}"
        lines.append(f"    if {test}: f{i} = checked(cls, kind, {name!r}, f{i})")
    fields = ", ".join(f"{name!r}: f{i}" for i, name in enumerate(names))
    lines += ["    msg = new(cls)", f"    setattr(msg, '__dict__', {{{fields}}})", "    return msg"]
    exec("\n".join(lines), env)  # noqa: S102 -- field names of our own classes only
    return env["decode"]


def _flat(value: list, checked, cls, kind: str, name: str) -> tuple:
    """A list field's tuple: at once if no item is itself a list or tuple (a step's
    cores), else through the general path (nested conversion)."""
    for v in value:
        if type(v) is list or type(v) is tuple:
            return checked(cls, kind, name, value)
    return tuple(value)


def _one(plain: frozenset, env: dict, i: int) -> str:
    env[f"U{i}"] = next(iter(plain))
    return f"U{i}"
