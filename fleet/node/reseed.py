"""Fresh random state for a forked call step.

A call step is a fork of its zygote, so it starts with a copy of every random generator
the zygote's preloads seeded: without a reseed, each step on a node would draw the same
"random" numbers. Python's ``random`` reseeds itself at fork (os.register_at_fork);
numpy's global RandomState (``numpy.random.random``, ``numpy.random.seed``, what scipy
uses when given no ``random_state``) does not, and a preload of ``numpy.random`` -- or of
scipy.linalg, scipy.stats, ... which import it -- seeds it once, in the zygote.

Only generators whose module the zygote imported are reseeded (nothing is imported
here), from 128 bits of OS entropy, as an unseeded import would have. Not reseeded: a
generator a preloaded module made at import (``RNG = default_rng()``), which is its own
object; torch's default generator, whose documented default seed is fixed in every
process anyway. A step that wants reproducible draws seeds them itself.
"""

from __future__ import annotations

import os
import sys


def reseed_preloaded() -> str | None:
    """Reseed numpy's global RandomState if numpy.random was inherited; a ``fleet:``
    line for the step's log if that failed, else None."""
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return None
    # An array seed (init_by_array), not seed(): as much entropy as seed() takes,
    # in ~15 us instead of ~150 us (seed() mixes it through a SeedSequence first).
    words = memoryview(os.urandom(16)).cast("I").tolist()
    try:
        np_random.seed(words)
    except Exception as exc:  # (a numpy that changed its legacy API): said, the step still runs
        return f"fleet: numpy.random inherited from the zygote could not be reseeded: {type(exc).__name__}: {exc}"
    return None
