"""The coordinator's heap: the cyclic collector kept off a big submission's objects,
and the memory freed given back to the system.

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
import os
import sys
import time

FREEZE_S = 0.25  # at most one freeze this often (a full collection walks what came since)
FULL_S = 0.05    # a full collection this long: what survived it is frozen (after_collection)

_last = 0.0
_full_t0 = 0.0
_costly = False  # a full collection took FULL_S or more since the last turn


def settle(force: bool = False) -> None:
    """Submission work was done: freeze what is on the heap now (rate limited)."""
    global _last
    now = time.monotonic()
    if force or now - _last >= FREEZE_S:
        _last = now
        gc.freeze()


# While steps run the heap grows too (the scheduler's and the records' state of every
# step that ran), and each full collection walks all of it that is not frozen: at
# 1,000,000 steps of 1 s there were 32 of up to 5.5 s each, stalling the loop
# (benchmarks/README.md, "A million steps of 1 s"). What survives a full collection is
# live at that moment, the moment CPython's documentation gives for gc.freeze(): so
# after a costly one the survivors are frozen, and the next full collection walks only
# what came since (a growing heap then costs collections in proportion to its growth,
# not its size). Cheap ones (a small heap) are left alone.

def _watch(phase: str, info: dict) -> None:
    global _full_t0, _costly
    if info.get("generation") != 2:
        return
    if phase == "start":
        _full_t0 = time.perf_counter()
    elif time.perf_counter() - _full_t0 >= FULL_S:
        _costly = True


def watch() -> None:
    """Notice costly full collections in this process (once; see after_collection)."""
    if _watch not in gc.callbacks:
        gc.callbacks.append(_watch)


def after_collection() -> bool:
    """Once per loop turn: freeze what survived a costly full collection (True if so)."""
    global _costly
    if not _costly:
        return False
    _costly = False
    gc.freeze()
    return True


# Memory Python frees does not always go back to the system: an object over 512 bytes
# (a big dict's table, a list, a message's buffer; ZeroMQ's buffers too) comes from the
# C library's malloc, which returns by itself only the free space at the top of its
# heaps and keeps the rest for reuse. A coordinator stays up for the whole allocation:
# after a big suite its heaps held more than 2 GiB of free memory, resident on the
# first node with the steps, until the fleet went down (benchmarks/README.md, "The
# coordinator's memory"). glibc's malloc_trim gives back the free pages anywhere in
# its heaps, so the loop calls it at most every TRIM_S. Elsewhere (no glibc) nothing
# is done.
TRIM_S = 10.0

_trim_fn = None  # glibc's malloc_trim, looked up once (False: there is none)
_trim_last = float("-inf")
trims = {"count": 0, "seconds": 0.0, "max_s": 0.0}  # what trimming cost, for status answers


def _malloc_trim():
    global _trim_fn
    if _trim_fn is None:
        try:
            import ctypes
            fn = ctypes.CDLL(None).malloc_trim
            fn.argtypes, fn.restype = (ctypes.c_size_t,), ctypes.c_int
            _trim_fn = fn
        except (OSError, AttributeError):
            _trim_fn = False
    return _trim_fn


def trim(force: bool = False) -> bool:
    """Once per loop turn: give the C library's free heap back to the system, at most
    every TRIM_S (or now, with force). True if it was done."""
    global _trim_last
    t0 = time.monotonic()
    if not force and t0 - _trim_last < TRIM_S:
        return False
    _trim_last = t0
    fn = _malloc_trim()
    if not fn:
        return False
    fn(0)  # (ctypes lets the GIL go: the coordinator's other threads go on meanwhile)
    took = time.monotonic() - t0
    trims["count"] += 1
    trims["seconds"] += took
    trims["max_s"] = max(trims["max_s"], took)
    return True


def figures() -> dict:
    """The coordinator's memory now and at its peak, and what trimming cost, for status."""
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    try:
        with open("/proc/self/statm", "rb") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        rss = -1
    # (The kernel's two counts are synced at different moments: the peak can read a few
    # pages below the RSS read just after it.)
    return {"rss": rss, "peak_rss": max(peak, rss), "heap_trims": trims["count"],
            "heap_trim_s": round(trims["seconds"], 3), "heap_trim_max_s": round(trims["max_s"], 3)}
