"""The nodes part of `fleet status`, bounded whatever the allocation's size.

At 10,000 nodes a row per node made every status answer ~1.3 MB, built, sent and drawn
at each call (and every second of `fleet status --watch`). The default answer now holds:

- ``nodes_summary``: counts (alive, lost, not in the pool), cores/gpus/memory held and used
  totals, the zygote restarts of the live nodes, how many offer no core (``no_cores``), and
  how many nodes are idle, under half busy, half or more busy, or full;
- ``nodes``: the rows of the nodes that need attention (lost, joined but not in the
  pool, quiet for more than half the heartbeat timeout, memory in use well beyond what
  their steps hold or nearly full, a fork server (zygote) restarted by its agent, no core for
  steps: fleet.control.nocores), at most ATTENTION_LISTED of them, each with its
  ``attention`` reason; ``nodes_attention`` says how many there are in all. A fleet of at
  most NODES_IN_FULL nodes lists every node there (``nodes_shown`` "all"), as before.

The whole table is answered on request (a Status with ``nodes_from``), NODES_PAGE rows
per answer; fleet.control.api.Fleet.status(nodes=True) asks page after page.

An older client (same protocol) reads ``nodes`` as it did: it shows the listed rows and
ignores the rest. A newer client asking an older coordinator for pages is told
"malformed message: unknown field" (the codec refuses unknown fields)."""

from __future__ import annotations

import time

NODES_IN_FULL = 32   # a fleet this small lists every node in its default answer
ATTENTION_LISTED = 20  # nodes that need attention listed in full, at most
NODES_PAGE = 1000    # rows per answer of the full table (~130 KB)
NEAR_FULL = 0.9      # memory in use over this share of the node's: nearly full
BEYOND_HELD = 8      # in use beyond what steps hold by more than memory / this: attention
BUCKETS = ("idle", "under_half", "half_or_more", "full")


def _row(pool, a, spec) -> dict:
    """One node's row, as `fleet status` lists it."""
    if spec is None:
        return dict(node=a.node, host=a.host, alive=False)
    free_c, free_g, free_m = pool.free_on(a.node)
    return dict(node=a.node, host=a.host, alive=a.alive, cores=len(spec.cores), cores_busy=len(spec.cores) - free_c,
                gpus=len(spec.gpus), gpus_busy=len(spec.gpus) - free_g, memory=spec.memory,
                memory_held=spec.memory - free_m, memory_used=a.memory_used, memlimit=a.memlimit,
                **({"zygote_restarts": a.restarts} if a.restarts else {}))


def page(sched, agents: list, start: int) -> dict:
    """NODES_PAGE rows of the whole table from `start` (agents in the order listed);
    ``nodes_next`` is where the next page starts, None after the last."""
    start = max(0, start)
    rows = [_row(sched.pool, a, sched.pool.spec_of(a.node)) for a in agents[start:start + NODES_PAGE]]
    end = start + len(rows)
    return dict(nodes=rows, nodes_from=start, nodes_total=len(agents), nodes_next=end if end < len(agents) else None)


def _why(a, spec, free_m: int, quiet_s: float | None, now_m: float) -> str:
    """Why a node needs attention ("" if it does not)."""
    if not a.alive:
        return "lost"
    if spec is None:
        return "not in the pool"  # (yet, or turned away): it gets no steps
    if quiet_s is not None and now_m - a.last_seen > quiet_s:
        return f"quiet {now_m - a.last_seen:.0f} s"
    if a.no_cores:
        return f"no core for steps: {a.no_cores}"
    used = a.memory_used
    if used >= 0 and spec.memory > 0:
        if used >= NEAR_FULL * spec.memory:
            return "memory nearly full"
        if used > spec.memory - free_m + spec.memory // BEYOND_HELD:
            return "memory in use beyond what its steps hold"
    if a.restarts:
        return f"its fork server (zygote) restarted {a.restarts} time(s)"
    return ""


def summary(sched, agents: list, quiet_s: float | None = None) -> dict:
    """The default answer's nodes part (the module's docstring): one pass over the agents
    (local sums: 10,000 nodes in a few ms). `quiet_s`: silence (s) after which a live
    node is listed as quiet (None: never)."""
    pool, now_m = sched.pool, time.monotonic()
    alive = lost = cores = busy_c = gpus = busy_g = memory = held = used = reported = restarts = no_cores = 0
    hist = [0, 0, 0, 0]
    listed, attention = [], 0
    full = len(agents) <= NODES_IN_FULL
    for a in agents:
        spec = pool.spec_of(a.node)
        if spec is None or not a.alive:
            lost += not a.alive
            free_m = 0
        else:
            alive += 1
            free_c, free_g, free_m = pool.free_on(a.node)
            n_c = len(spec.cores)
            b = n_c - free_c
            cores += n_c
            busy_c += b
            gpus += len(spec.gpus)
            busy_g += len(spec.gpus) - free_g
            memory += spec.memory
            held += spec.memory - free_m
            if a.memory_used >= 0:
                used += a.memory_used
                reported += 1
            hist[0 if b == 0 else 3 if b >= n_c else 1 if 2 * b < n_c else 2] += 1
            restarts += a.restarts
            no_cores += bool(a.no_cores)
            if not full and not a.restarts and not a.no_cores and (quiet_s is None or now_m - a.last_seen <= quiet_s) and a.memory_used < min(
                    NEAR_FULL * spec.memory, spec.memory - free_m + spec.memory // BEYOND_HELD):
                continue  # the common case, and no attention by _why's rules either: nothing to say
        why = _why(a, spec, free_m, quiet_s, now_m)
        attention += bool(why)
        if full or (why and len(listed) < ATTENTION_LISTED):
            listed.append(dict(_row(pool, a, spec), **({"attention": why} if why else {})))
    t = dict(nodes=len(agents), alive=alive, lost=lost, not_in_pool=len(agents) - alive - lost, cores=cores,
             cores_busy=busy_c, gpus=gpus, gpus_busy=busy_g, memory=memory, memory_held=held, memory_used=used,
             memory_reported=reported, busy=dict(zip(BUCKETS, hist)), zygote_restarts=restarts,
             no_cores=no_cores)
    return dict(nodes_summary=t, nodes=listed, nodes_attention=attention, nodes_shown="all" if full else "attention")
