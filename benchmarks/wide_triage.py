"""Online choices of which wide steps wait long, on the Aurora-sized what-if (a probe).

    python benchmarks/wide_triage.py     # writes benchmarks/results/wide_triage.json

Issue 14's last target: the p90 wait of the wide (MPI) steps cut 5x (2,023 s -> 405 s)
with the makespan within 2 % of the base's (18,393 s). The best recorded before, the
order defer-widest with reservations (fleet.core.deferral), holds a STATIC share (9 %)
of the widest steps chosen when the suite is submitted: p90 783 s. This probe tries
rules that choose ONLINE, from the scheduler's state, which wide steps yield:

- "late-demote": defer-widest, and a wide step (not critical) that has waited more than
  H = h x the submission's median spanning estimate and still does not fit loses its
  turn: it goes to the back of its class of demand and gets no reservation (it cannot
  be made later than late; the others get the cores). `hold`: it is also held until
  ready + b x the median.
- "deadline" (Moore-Hodgson, online): critical-then-smallest with reservations; at most
  every 5 s of schedule, the ready wide steps not yet demoted are projected first come
  first served onto the cores that running steps free at their expected ends (cores
  only); while one would start later than its ready time + H, the widest (not critical)
  step at or before it in that order is demoted (held until ready + b x the median,
  then an ordinary step again), within a budget of `share` of the wide steps.
- "narrowest": defer-widest with the non-critical steps keyed by cores, not cores x
  estimate.

They patch the scheduler's pass in this process (a copy of Scheduler._schedule with
one hook; no window, no drain, no serial steps: none in this workload), so they are
probes, not fleet code. "late" counts wide steps that waited longer than 405 s: the p90
is at most 405 s exactly when at most 90 of the 908 do.
"""

from __future__ import annotations

import datetime as _dt
import gc
import heapq
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from aurora_whatif import aurora_nodes, workload  # noqa: E402
from reservations_whatif import mpi_waits  # noqa: E402

import fleet.core.ranks as R
import fleet.core.scheduler as SCH
from fleet.core import durations, states as S, waits as W
from fleet.core.deferral import Deferral
from fleet.core.graph import build_graph
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.core.simulate import simulate

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "wide_triage.json"
TARGET = 405.0
P: dict = {}


class Probe:
    """The hook's state: which wide steps are demoted, until when."""

    def __init__(self, static: bool):
        self.static = Deferral() if static else None
        self.demoted: dict[str, float] = {}
        self.held: dict[str, object] = {}
        self.waiting: dict[str, object] = {}  # ready wide steps not demoted (deadline)
        self.crit: set[str] = set()
        self.typical = 0.0
        self.budget = 0
        self.stamp = None
        self.rec = None

    def learn(self, steps, rank, cut, recorded):
        wide = [(s, durations.expected_s(s, recorded) or 0.0) for s in steps if s.span]
        self.typical = median(d for _, d in wide) if wide else 0.0
        self.budget += int(P.get("share", 1.0) * len(wide))
        self.crit |= {s.id for s, _ in wide if rank.get(s.id, 0.0) >= cut}
        self.rec = recorded
        if self.static is not None:
            self.static.learn(steps, rank, cut, recorded)

    def holds(self, job, now, running):
        if self.static is not None and self.static.holds(job, now, running):
            return True
        u = self.demoted.get(job.spec.id)
        return u is not None and running > 0 and now < u and P.get("hold", 1) > 0 and job.spec.id in self.held

    def why(self, job):
        return W.WaitReason(W.OTHER, detail="demoted")

    def demote(self, job, now, pool, res) -> bool:
        """The step at the head of its class did not fit: does it yield?"""
        if P["rule"] == "deadline":
            self.check(now, pool, res)
            return job.spec.id in self.held
        s = job.spec
        if self.static is not None and s.id in self.static.steps and now < self.static.until(job):
            return False
        if not s.span or s.id in self.demoted or s.id in self.crit or self.budget <= 0:
            return False
        if now - job.ready_at < P["h"] * self.typical:
            return False
        self.budget -= 1
        self.demoted[s.id] = job.ready_at + P["b"] * self.typical
        self.held[s.id] = job
        return True

    def check(self, now, pool, res):
        if self.stamp is not None and now < self.stamp + 5.0:
            return
        self.stamp = now
        for d in (self.waiting, self.held):
            for k in [k for k, j in d.items() if j.state != S.READY]:
                del d[k]
        for sid in [k for k in self.held if now >= self.demoted[k]]:
            self.waiting[sid] = self.held.pop(sid)
        H = P["h"] * self.typical
        while self.budget > 0:
            queue = sorted(self.waiting.values(), key=lambda j: (j.ready_at, j.seq))
            starts = project(pool, res, now, queue)
            late = next((n for n, (j, t) in enumerate(zip(queue, starts)) if t > j.ready_at + H), None)
            cand = [j for j in queue[:late + 1] if j.spec.id not in self.crit] if late is not None else []
            if not cand:
                return
            j = max(cand, key=lambda j: (j.demand.cores, j.ready_at, j.seq))
            self.budget -= 1
            self.demoted[j.spec.id] = j.ready_at + P["b"] * self.typical
            self.held[j.spec.id] = self.waiting.pop(j.spec.id)


def project(pool, res, now, queue):
    """Start times of `queue` in order, first come first served, on the cores free now
    and those the running steps free at their expected ends (cores only)."""
    ends = sorted(e for e in res._ends if (g := res._live.get(e[2])) is not None and g[0] == e[1])
    free, i, out = pool.free_cores + res.held_cores, 0, []
    for j in queue:
        t = now
        while free < j.demand.cores and i < len(ends):
            e, _, sid = ends[i]
            i += 1
            free += sum(len(s.cores) for s in res._live[sid][1].placement)
            t = max(t, e)
        out.append(t if free >= j.demand.cores else math.inf)
        free -= j.demand.cores
    return out


def _schedule(self, now, out):
    """Scheduler._schedule with one hook where a step fails to place."""
    self.window.begin(now, out)
    if self._unresolved and self.pool.nodes():
        pending, self._unresolved = self._unresolved, []
        for job in pending:
            if job.state == S.WAITING:
                self._resolve(job, out)
    pool, res, dfr = self.pool, self._res, self.ranks.deferral
    res.begin(pool, now, self._classes)
    heads = self._heads(pool, res, now)
    started = 0
    while heads:
        (_, _, sid), key = heapq.heappop(heads)
        cls, job = self._classes[key], self._jobs[sid]
        if dfr is not None and dfr.holds(job, now, len(self._running)):
            self._wait(job, dfr.why(job), len(cls.heap) - 1, out)
            continue
        placement = res.place(job, key, pool, now, cls.exclusive)
        if placement is None:
            cls.blocked_at = pool.releases.end()
            if isinstance(dfr, Probe) and key not in res.plans and dfr.demote(job, now, pool, res):
                e = heapq.heappop(cls.heap)  # to the back of its class
                job.qkey = (math.inf,) + tuple(e[1]) if isinstance(e[1], tuple) else e[1]
                heapq.heappush(cls.heap, (e[0], job.qkey, e[2]))
                self._wait(job, dfr.why(job), len(cls.heap) - 1, out)
                if cls.heap[0][2] != sid:
                    heapq.heappush(heads, (cls.heap[0], key))
                continue
            why = W.short_of(self.pool, job.demand)
            self._wait(job, res.held_back(job, key, pool, now) or why, len(cls.heap) - 1, out)
            continue
        heapq.heappop(cls.heap)
        cls.blocked_at = None
        if not cls.heap:
            del self._classes[key]
        self._set(job, "start")
        job.placement, job.started_at, job.why = placement, now, None
        res.started(job, now)
        self._running[sid] = job
        for slot in placement:
            self._on_node[slot.node].add(sid)
        out.append(SCH.Start(sid, job.attempt, placement, self._resume_of(sid)))
        started += 1
        if cls.heap:
            heapq.heappush(heads, (cls.heap[0], key))
        if started >= self.pass_starts and heads:
            out.append(SCH.GoOn())
            return


def _enqueue(self, job, _orig=SCH.Scheduler._enqueue):
    _orig(self, job)
    d = self.ranks.deferral
    if isinstance(d, Probe) and job.spec.span and job.spec.id not in d.held:
        d.waiting[job.spec.id] = job


def _key(self, job, _orig=R.Ranks._key):
    if P.get("key") != "cores" or self.order == "setup" or job.spec.id in self._first:
        return _orig(self, job)
    e = durations.expected_s(job.spec, self._recorded) or 0.0
    return (float(job.demand.cores) + e / 1e6, job.seq)


def install(rule: str | None):
    """Patch this process's scheduler for one probe (None: as shipped)."""
    if rule is None:
        return
    SCH.Scheduler._schedule, SCH.Scheduler._enqueue, R.Ranks._key = _schedule, _enqueue, _key
    orig = R.Ranks.__init__

    def init(self, order="setup"):
        orig(self, "critical-then-smallest" if order == "probe" else order)
        if order == "probe":
            self.deferral = Probe(static=rule != "deadline")
    R.Ranks.__init__ = init
    R.MODES = R.MODES + ("probe",)


RUNS = (  # (name, order, reservations, probe rule and parameters)
    ("setup/without (base)", "setup", None, None),
    ("defer-widest/with", "defer-widest", RESERVE_AFTER_S, None),
    ("narrowest", "probe", RESERVE_AFTER_S, {"rule": "narrow", "key": "cores", "h": 1e9, "b": 0}),
    ("late-demote h=0.25 hold", "probe", RESERVE_AFTER_S, {"rule": "late", "h": 0.25, "b": 1.0, "hold": 1}),
    ("late-demote h=0.25", "probe", RESERVE_AFTER_S, {"rule": "late", "h": 0.25, "b": 1.0, "hold": 0}),
    ("late-demote h=0.5 narrowest", "probe", RESERVE_AFTER_S,
     {"rule": "late", "key": "cores", "h": 0.5, "b": 1.0, "hold": 0}),
    ("deadline h=0.2 share=0.09", "probe", RESERVE_AFTER_S, {"rule": "deadline", "h": 0.2, "b": 1.0, "share": 0.09}),
    ("deadline h=0.3 share=0.09", "probe", RESERVE_AFTER_S, {"rule": "deadline", "h": 0.3, "b": 1.0, "share": 0.09}),
)


def one(name, order, ra, params) -> dict:
    """One run in a fresh process (each probe patches the scheduler)."""
    code = (f"import sys; sys.path[:0] = {[str(HERE.parent), str(HERE)]!r}; import wide_triage as T, json; "
            f"print(json.dumps(T.run({order!r}, {ra!r}, {params!r})))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def run(order, ra, params) -> dict:
    if params:
        P.update(params)
    install(params["rule"] if params else None)
    steps = workload(100_000)
    graph, _ = build_graph(steps)
    gc.collect()
    t = time.perf_counter()
    r = simulate(steps, graph, aurora_nodes(), reserve_after=ra, order=order)
    e = r.steps
    waits = [e[s.id].start_s - max([0.0] + [e[d].end_s for d in graph.deps[s.id]]) for s in steps if s.mpi]
    return {"makespan_s": round(r.makespan_s, 1), "mpi_wait": mpi_waits(r, steps, graph),
            "late": sum(w > TARGET for w in waits), "simulate_s": round(time.perf_counter() - t, 1),
            "params": params or {}}


def main() -> int:
    load = os.getloadavg()
    rows = {}
    for name, order, ra, params in RUNS:
        rows[name] = one(name, order, ra, params)
        print(name, rows[name], file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    res = {"benchmark": "wide_triage", "command": "python benchmarks/wide_triage.py", "commit": commit,
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "load_average": {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]},
           "runs": rows}
    RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
