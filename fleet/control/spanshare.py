"""The memory reason of a step spread over several nodes that is not MPI: its share.

A non-MPI step that spans (`span = true`) runs its one process on its first node, held
there to that node's part of its placement: those cores, GPUs and memory (the node's
share of its declared `memory`); the other nodes' parts are held for it (ctx.placement)
but fleet starts nothing there. Its node words a memory kill against the limit it was
given ("used 100MiB of its memory 100MiB"), which reads as wrong beside a declaration
of 200MiB; said here as what it is: "its share on node1, 100MiB of its 200MiB".
"""

from __future__ import annotations

import dataclasses

from fleet.core.units import format_memory


def reworded(msg, view, spec):
    """The exit report `msg` with its reason naming the share where the limit was one
    (`view`: the step as placed, `spec`: its definition); `msg` itself otherwise."""
    if not msg.error or len(view.placement) < 2 or spec is None or spec.mpi or not spec.memory:
        return msg
    first = view.placement[0]
    total = sum(s.memory for s in view.placement)
    if first.memory >= total:
        return msg
    limit = f"its memory {format_memory(first.memory)}"
    if limit not in msg.error:
        return msg
    share = f"its share on {first.node}, {format_memory(first.memory)} of its {format_memory(total)}"
    return dataclasses.replace(msg, error=msg.error.replace(limit, share))
