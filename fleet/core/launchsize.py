"""How big a step's launch is, and the limits it must fit: validation refuses a step
that could never start, naming its field, rather than let it fail (or worse) when run.

A step's Launch travels to its node as one ZeroMQ frame, and a socket drops any frame
over its MAXMSGSIZE (fleet.wire.messages.MAX_FRAME) with the whole connection: before
2026-12-07 a step with 1 MiB of args took down every node it was tried on, then the
fleet. The coordinator checks each encoded Launch before it sends it too
(fleet.control.transport), for what this bound cannot see.

A command's strings are the kernel's: one argv or environment string over
MAX_ARG_STRLEN fails exec with "Argument list too long", whatever the total."""

from __future__ import annotations

from typing import Any

# The largest frame a node's socket takes: fleet.wire.messages.MAX_FRAME (the core does no
# wire; tests/core/test_launch_size.py holds the two equal).
LAUNCH_MAX = 1 << 20
# What fleet adds to a step's own fields in its Launch, at most: its paths (work directory,
# log, run directory, each up to a run directory of 2,048 bytes and an id of 1,900), the
# FLEET_* variables, its placement and the rest. An MPI launcher's rendered command too.
FLEET_PART = 64 * 1024
# The step's own part of it at most: its args, command, env, inputs and outputs.
STEP_PART = LAUNCH_MAX - FLEET_PART
# Linux's MAX_ARG_STRLEN (32 pages of 4 KiB): one argv or "NAME=value" string, with its NUL.
ARG_STRLEN = 128 * 1024

_OWN = ("args", "command", "env", "inputs", "outputs")


def nbytes(text: str) -> int:
    """The UTF-8 length of text (its length when ASCII, the common case: no copy)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def packed(value: Any) -> int:
    """At least as many bytes as msgpack takes for value (plain values, lists, tuples
    and dicts of them: what a step's fields are): each header counted at its largest."""
    if type(value) is tuple and all(type(x) is str and x.isascii() for x in value):  # (an argv, paths)
        return 5 + sum(map(len, value)) + 5 * len(value)
    total, stack = 0, [value]
    while stack:  # (no recursion: how deep tomllib nests is its own limit)
        x = stack.pop()
        if type(x) is str:
            total += 5 + nbytes(x)
        elif isinstance(x, dict):
            total += 5
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            total += 5
            stack.extend(x)
        else:  # a number, a boolean, None
            total += 9
    return total


def own_part(spec) -> int:
    """At least as many bytes as a step's own fields (args, command, env, inputs,
    outputs: at most STEP_PART, as validated) take in its Launch."""
    return sum(packed(v) for v in (getattr(spec, f) for f in _OWN) if v)


def arg_string(text: str, what: str) -> str | None:
    """Why `what`, one string a command is exec'd with, cannot be (over ARG_STRLEN);
    None if it can."""
    if len(text) < ARG_STRLEN // 4:  # (the common case: too few characters to be too many bytes)
        return None
    n = nbytes(text)
    if n < ARG_STRLEN:
        return None
    return (f"{what} is {n:,} bytes, and Linux runs no command with a single argument or environment variable "
            f"over {ARG_STRLEN - 1:,} (MAX_ARG_STRLEN: \"Argument list too long\"); pass it in a file")


def too_big(values: dict[str, Any]) -> tuple[str, str] | None:
    """(field, why) if a step of these checked field values could not be sent to its
    node (its own part over STEP_PART), naming its biggest field; else None."""
    total = 0
    for f in _OWN:  # (every step is checked: a million of them at ~1 us each)
        v = values.get(f)
        if v:
            total += packed(v)
    if total <= STEP_PART:
        return None
    sizes = {f: packed(values[f]) for f in _OWN if f in values}
    field = max(sizes, key=sizes.__getitem__)
    own = [f for f in _OWN if f in sizes]
    parts = f"{', '.join(own)} take {total:,} bytes ({field} {sizes[field]:,})" if len(own) > 1 else \
        f"{field} {'takes' if field in ('command', 'env') else 'take'} {total:,} bytes"
    return field, (f"this step's {parts}, and a step's launch travels to its node as one message of at "
                   f"most {LAUNCH_MAX:,} bytes (1 MiB), {FLEET_PART:,} of them fleet's: at most {STEP_PART:,} "
                   f"are the step's; pass big values in a file (inputs) instead")
