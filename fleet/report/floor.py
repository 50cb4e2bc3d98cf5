"""The dependency floor's graph: the steps' recorded dependencies, and their families.

A step that submitted children (`ctx.submit`, `$FLEET_SUBMIT_DIR`) ends only after them
(a step's dependents start once its whole family has ended), and a child is submitted
by one of its parent's stages: none of them can start before that stage ended. So a
parent is a chain of its stages (the phases of its last run: one per `wait`, `next` or
`restart` it went on from, and a failed attempt whose retry went on at its stage, of no
work), then its end; each child follows the stage that submitted its last run (the last
to start before the child's latest `step` record before that run), a stage after a
wait for children follows the children submitted since the previous such stage (those
before, through it), and the parent's end follows all of them. A child is what
fleet.report.families.parent_of says (its record names its parent), that depends on no
parent's end and was declared after the parent started. Should the families still
close a cycle (a damaged stream), the floor takes the recorded dependencies alone.
Linear in the steps, children and stages.
Before 2026-12-07 the floor used the `step` records' deps alone: a parent's children
were on no chain with it, and a step's duration was its last stage's work. Until
2026-12-07 too, a retried parent's failed attempt and a child's later submissions were
not seen (_stages, _declared): the floor could come out above the wall.
"""

from __future__ import annotations

from bisect import bisect_right

from fleet.core import states as S
from fleet.report.model import Attempt, Step

_GOES_ON = (S.WAIT, S.NEXT, S.RESTART)
_SEP = "\x00"  # between a parent's id and its stage's number in a stage's key (no id holds it)


def graph(steps: dict[str, Step], now: float) -> tuple[dict, dict, dict]:
    """(deps, work, work with startup) keyed by step id, and by `<id>\\0<n>` for stage n
    of a parent before its end (the parent's own key is its end, of no duration):
    what fleet.core.graph.critical_path takes. One walk of the steps, and one more of
    each parent's stages and children."""
    deps: dict[str, list] = {}
    work: dict[str, float] = {}
    both: dict[str, float] = {}
    kids: dict[str, list[Step]] = {}
    stages: dict[str, list[Attempt]] = {}
    for s in steps.values():
        deps[s.id] = s.deps  # (shared, not copied: _family replaces what it adds to)
        if not s.attempts:
            continue
        stages[s.id] = run = _stages(s)
        p = steps.get(s.parent) if s.parent else None
        if p is not None and p.attempts and p.attempts[0].start <= s.submitted and p.id not in s.deps:
            kids.setdefault(p.id, []).append((s, _declared(s, run[0])))
        work[s.id] = both[s.id] = 0.0
        for a in run:
            w, b = _durations(a, now, a is run[-1])
            work[s.id] += w
            both[s.id] += b
    if not kids:
        return deps, work, both
    plain = dict(deps), dict(work), dict(both)
    for parent, children in kids.items():
        _family(parent, children, stages[parent], deps, work, both, now)
    return (deps, work, both) if _acyclic(deps) else plain


def names(path: list[str]) -> list[str]:
    """A chain of keys as step ids: a parent's stages and its end are the parent, once
    where they follow each other."""
    out: list[str] = []
    for k in path:
        sid = k.partition(_SEP)[0]
        if not out or out[-1] != sid:
            out.append(sid)
    return out


def _stages(s: Step) -> list[Attempt]:
    """The stages of the step's last run: its last attempt and those it went on from. A
    retry goes on at the stage that failed (fleet.core.phases), which runs again: the
    failed attempt is a stage of no work (_durations), kept so that the children it
    submitted follow the stage before it and the retry follows it (before 2026-12-07 it
    was left out, its children were taken for the earlier stage's, and after a wait the
    retry was chained behind them: a floor above the wall)."""
    atts = s.attempts
    last = atts[-1]
    n, i = last.attempt, len(atts) - 1
    out = [last]
    while i > 0:
        a = atts[i - 1]
        if a.fleet != last.fleet:
            break
        if a.outcome in _GOES_ON and a.attempt == n:
            out.append(a)
        elif a.retried and a.attempt == n - 1 and a.outcome not in _GOES_ON:
            out.append(a)
            n -= 1
        else:
            break
        i -= 1
    return out[::-1]


def _declared(c: Step, first: Attempt) -> float:
    """When the child's last run was submitted: its latest `step` record before that run's
    first start (one declared again while that run went on keeps the one before). Before
    2026-12-07 always its first: a child its parent submitted again, that ran again, was
    taken for the earlier stage's, and a stage after a wait was chained behind its run."""
    return first.declared if first.declared is not None else c.submitted


def _durations(a: Attempt, now: float, last: bool = True) -> tuple[float, float]:
    """A stage's own work, and with its startup (a running one's: the time since it
    started); none for a failed attempt before the run's last (`last` False), which its
    retry ran again."""
    if not last and a.outcome not in _GOES_ON:
        return 0.0, 0.0
    if a.outcome == S.RUNNING:
        d = max(0.0, now - (a.started or a.start))
        return d, d
    w = a.work_s or 0.0
    return w, w + (a.startup_s or 0.0)


def _family(parent: str, children: list[tuple[Step, float]], run: list[Attempt], deps: dict, work: dict,
            both: dict, now: float) -> None:
    """The parent split into its stages and its end, its children (each with when its
    last run was submitted) between them."""
    keys = [f"{parent}{_SEP}{i}" for i in range(len(run))]
    starts = [a.start for a in run]
    by: list[list[str]] = [[] for _ in run]  # each stage's children
    before: list[str] = []  # submitted by an earlier run of the parent (which ended before this one)
    for c, declared in children:
        k = bisect_right(starts, declared) - 1  # (one declared as a stage began: that stage's)
        if k >= 0:
            by[k].append(c.id)
            deps[c.id] = [*deps[c.id], keys[k]]
        else:
            before.append(c.id)
    pending = before  # children since the last wait for them: the next one waits for these
    for i, (k, a) in enumerate(zip(keys, run)):
        deps[k] = list(deps[parent]) if i == 0 else [keys[i - 1]]
        work[k], both[k] = _durations(a, now, i == len(run) - 1)
        # (it waited for every child it had by then; a retry follows a failed stage, not a
        # wait: the children that stage submitted run beside the retry, on to the next wait)
        if i and run[i - 1].outcome == S.WAIT:
            deps[k] += pending
            pending = []
        pending += by[i]
    deps[parent] = [keys[-1]] + [c.id for c, _ in children]
    work[parent] = both[parent] = 0.0


def _acyclic(deps: dict) -> bool:
    """Whether the graph has no cycle (Kahn's count; a dependency on no key is none)."""
    indeg = dict.fromkeys(deps, 0)
    after: dict[str, list] = {}
    for k, ds in deps.items():
        for d in ds:
            if d in indeg:
                indeg[k] += 1
                after.setdefault(d, []).append(k)
    todo = [k for k, n in indeg.items() if n == 0]
    seen = 0
    while todo:
        k = todo.pop()
        seen += 1
        for w in after.get(k, ()):
            indeg[w] -= 1
            if indeg[w] == 0:
                todo.append(w)
    return seen == len(indeg)
