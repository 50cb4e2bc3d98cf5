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


def window_work(r, c, d, C: float, W: float, step: float = 50.0,
                lengths=(50, 100, 200, 400, 800, 1600, 3200, 6400)):
    """The windows [a, a + L] whose least work at wait W (as in `overfull`) exceeds
    their room with every step kept: each step's least work in each (rows), the room."""
    rows, room = [], []
    for a in np.arange(0.0, float((r + W + d).max()), step):
        for length in lengths:
            T = a + length

            def overlap(s):
                return np.clip(np.minimum(T, s + d) - np.maximum(a, s), 0.0, None)
            work = c * np.minimum(overlap(r), overlap(r + W))
            if work.sum() > C * length:  # a window no choice of steps overfills constrains nothing
                rows.append(work)
                room.append(C * length)
    return np.array(rows), np.array(room)


def most_within(r, c, d, C: float, W: float, integral: bool = False, chosen: list | None = None) -> float:
    """The most steps that can all wait at most W, as far as the windows tell, with ONE
    set of steps left out in every window (unlike `overfull`): a linear program over
    x_i in [0, 1] (steps kept), or with `integral` the integer program (scipy's HiGHS;
    `chosen` gets the indices of the steps it leaves out)."""
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp
    A, b = window_work(r, c, d, C, W)
    if not len(b):
        return float(len(r))
    if integral:
        res = milp(-np.ones(len(r)), constraints=[LinearConstraint(A / 1e6, -np.inf, b / 1e6)],
                   integrality=np.ones(len(r)), bounds=Bounds(0, 1), options={"time_limit": 120})
    else:
        res = linprog(-np.ones(len(r)), A_ub=A / 1e6, b_ub=b / 1e6, bounds=(0, 1), method="highs")
    if chosen is not None:
        chosen.extend(int(i) for i in np.nonzero(res.x < 0.5)[0])
    return -float(res.fun)


def p_bound_one_set(ready, cores, dur, C: float, p: float = 0.9, hi: float = 20000.0, tol: float = 5.0) -> float:
    """As `p_bound`, but one set of steps (the 1 - p share) is left out of every window:
    the smallest W at which the linear program keeps the p share of the steps. A lower
    bound on the p-th percentile wait for these ready times (still fluid: cores only)."""
    r, c, d = (np.asarray(x, dtype=float) for x in (ready, cores, dur))
    keep = int(len(r) * p) + 1
    lo = 0.0
    if most_within(r, c, d, C, lo) >= keep - 1e-6:
        return 0.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if most_within(r, c, d, C, mid) >= keep - 1e-6:
            hi = mid
        else:
            lo = mid
    return hi
