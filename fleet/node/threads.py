"""How many threads a step's libraries use: the same on every path.

The zygote pins every thread-pool variable to 1 for itself before it preloads
anything (a pool started in the zygote would make it unable to fork safely). A step
gets every variable of :data:`THREAD_VARS` set to its own count -- its ``threads``
(an MPI step's threads per rank) if it has them, else its number of cores -- whether
it is a call step or a command, and whether or not a library was preloaded. A pool
that a preloaded library already started at one thread (OpenBLAS, MKL, BLIS, an
OpenMP runtime) is resized in the call step's child with threadpoolctl, which is
imported there, after the fork, never in the zygote.

Import-light on purpose: the zygote imports this before it sets the variables.
"""

from __future__ import annotations

import os

from fleet.core.units import THREAD_VARS  # (defined with the suite's checks: a step's env may not set them)

# Shared objects whose thread pool threadpoolctl can resize (names as in /proc/self/maps).
_POOL_LIBRARIES = ("openblas", "libmkl_rt", "libblis", "flexiblas", "libgomp", "libiomp", "libomp")

# Set by the zygote after its preloads: did they load a library with a thread pool?
# A forked child inherits the answer, so it need not look again.
preloaded_pools = False


def step_threads(launch) -> int:
    """The thread count of a step: its ``threads`` if the Launch carries them (> 0),
    else an MPI step's cores per rank (from FLEET_RANKS, "node:c,c;node:c,c"), else
    its number of cores, else (not pinned) the cores this process may use."""
    given = getattr(launch, "threads", 0) or 0
    if given > 0:
        return int(given)
    ranks = (launch.env or {}).get("FLEET_RANKS")
    if ranks:
        first = ranks.split(";")[0].rpartition(":")[2]
        return max(1, len([c for c in first.split(",") if c]))
    return len(launch.cores) or len(os.sched_getaffinity(0))


def thread_env(count: int) -> dict[str, str]:
    """Every thread-pool variable set to ``count``."""
    return {name: str(count) for name in THREAD_VARS}


def note_preloaded_pools(maps: str = "/proc/self/maps") -> bool:
    """Look once (in the zygote, after the preloads) for a loaded thread-pool library."""
    global preloaded_pools
    try:
        with open(maps) as f:
            text = f.read()
    except OSError:
        text = ""
    preloaded_pools = any(name in text for name in _POOL_LIBRARIES)
    return preloaded_pools


def resize_preloaded_pools(count: int) -> str | None:
    """In a call step's child: give the pools a preloaded library started at one
    thread ``count`` threads. Returns a line for the log if that failed, else None."""
    if not preloaded_pools or count == 1:
        return None  # nothing was started at a size other than the one we want
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=count)
    except Exception as exc:  # a step still runs, at the preloaded size; the log says so
        return (f"fleet: could not resize the preloaded thread pools to {count}: "
                f"{type(exc).__name__}: {exc}")
    return None
