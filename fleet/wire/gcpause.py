"""The cyclic collector paused while a big structure of plain, acyclic objects is built
(the journals read at a fleet's start, the fold written from them).

CPython starts a collection after every 700 new container objects, and a full one (a
walk of every tracked object) each time the long-lived heap grew by a quarter: reading
a million steps' journals (several million dicts) set off full collection after full
collection over a heap of GiBs, about half the reading's CPU (benchmarks/README.md,
"A rerun of a million done steps"). Nothing built here is freed through a cycle:
reference counts free it all, so pausing loses nothing.
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused():
    """No automatic collection inside (as it was after: a paused one nested stays paused)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
