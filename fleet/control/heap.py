"""Keeping the cyclic garbage collector off a big submission's objects.

A million-step submission brings millions of objects (step definitions, their graph,
the scheduler's jobs) that live as long as the fleet. CPython's collector walks every
tracked object in a full collection, and runs one each time the long-lived heap has
grown by a quarter: at a million steps one took 1.5 s, holding the GIL, so the loop
stalled (a status answer waited) several times during the submission (9.7 s in all;
benchmarks/README.md, "A million-step submission"). None of these objects is garbage
while the fleet runs, and none is freed through a cycle when it goes (references
counts free them), so while a submission is on its way in they are moved out of the
collector's sight (gc.freeze), at most every FREEZE_S: the collector then walks only
what came since. What a freeze can keep is cyclic garbage made just before it (young
objects not yet collected): the coordinator makes little, and only while submissions
come in.
"""

from __future__ import annotations

import gc
import time

FREEZE_S = 0.25  # at most one freeze this often (a full collection walks what came since)

_last = 0.0


def settle(force: bool = False) -> None:
    """Submission work was done: freeze what is on the heap now (rate limited)."""
    global _last
    now = time.monotonic()
    if force or now - _last >= FREEZE_S:
        _last = now
        gc.freeze()
