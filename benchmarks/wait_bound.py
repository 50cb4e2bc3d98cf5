"""A lower bound on the p-th percentile wait of wide steps under ANY order of starts.

Given each wide step's ready time r (the end of its last dependency, as in the
schedule measured), its cores c and duration d, and the allocation's cores C: if at
least the fraction p of the steps wait at most W, each of those starts in [r, r + W],
so within any window [a, T] it runs at least c times the least overlap of
[s, s + d] with the window, over s in that range. All that work must fit in
C * (T - a), even leaving out the (1 - p) share of the steps whose share in
the window is largest. The smallest W for which no window is overfull is a lower
bound on the p-th percentile wait: it ignores every other step's use of the cores,
GPUs, node boundaries and that wide steps cannot be split (a fluid relaxation), so
any real schedule, whatever its order or reservations, waits at least this long.
"""

from __future__ import annotations

import numpy as np


def overfull(r, c, d, C: float, W: float, keep: int, step: float = 50.0,
             lengths=(50, 100, 200, 400, 800, 1600, 3200, 6400)) -> tuple[float, float] | None:
    """A window [a, T] that the steps' least work overfills at wait W, or None.

    A step started at s in [r, r + W] runs [s, s + d]; its overlap with [a, T] is
    least at one end of that range, so c times that least overlap is work the
    window must hold whatever the order."""
    L = np.asarray(lengths, dtype=float)[:, None]
    drop = len(r) - keep
    for a in np.arange(0.0, float((r + W + d).max()), step):
        T = a + L

        def overlap(s):
            return np.clip(np.minimum(T, s + d) - np.maximum(a, s), 0.0, None)
        work = c * np.minimum(overlap(r), overlap(r + W))
        k = work.shape[1] - drop
        need = np.partition(work, k - 1, axis=1)[:, :k].sum(axis=1) if drop > 0 else work.sum(axis=1)
        bad = np.nonzero(need > C * L[:, 0])[0]
        if bad.size:
            return float(a), float(T[bad[0], 0])
    return None


def p_bound(ready, cores, dur, C: float, p: float = 0.9, hi: float = 20000.0, tol: float = 5.0) -> float:
    """The smallest W (to `tol` s) such that the p-th percentile wait can be at most W
    as far as this relaxation can tell; the percentile is sorted-waits[int(n * p)]."""
    r, c, d = (np.asarray(x, dtype=float) for x in (ready, cores, dur))
    keep = int(len(r) * p) + 1
    lo = 0.0
    if overfull(r, c, d, C, lo, keep) is None:
        return 0.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if overfull(r, c, d, C, mid, keep) is None:
            hi = mid
        else:
            lo = mid
    return hi
