"""The dependency floor's graph: the steps' recorded dependencies, and their families.

A step that submitted children (`ctx.submit`, `$FLEET_SUBMIT_DIR`) ends only after them
(a step's dependents start once its whole family has ended), and a child is submitted
by one of its parent's stages: none of them can start before that stage ended. So a
parent is a chain of its stages (the phases of its last attempt: one per `wait`, `next`
or `restart` it went on from), then its end; each child follows the stage that
submitted it (the last to start before the child's `step` record), a stage after a wait
for children follows every child submitted before it started, and the parent's end
follows all of them. A child is a step whose id, cut at its last "/", names a step of
the run that started before the child was declared (fleet.core.childsteps,
fleet.report.families). Before 2026-12-07 the floor used the `step` records' deps
alone: a parent's children were on no chain with it, and a step's duration was its
last stage's work.
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.report.model import Attempt, Step

_GOES_ON = (S.WAIT, S.NEXT, S.RESTART)
_SEP = "\x00"  # between a parent's id and its stage's number in a stage's key (no id holds it)


def graph(steps: dict[str, Step], now: float) -> tuple[dict, dict, dict]:
    """(deps, work, work with startup) keyed by step id, and by `<id>\\0<n>` for stage n
    of a parent before its end (the parent's own key is its end, of no duration):
    what fleet.core.graph.critical_path takes. One walk of the steps, and one more of
    each parent's children."""
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
        parent = s.id.rpartition("/")[0]
        p = steps.get(parent) if parent else None
        if p is not None and p.attempts and p.attempts[0].start <= s.submitted:
            kids.setdefault(parent, []).append(s)
        work[s.id] = both[s.id] = 0.0
        for a in run:
            w, b = _durations(a, now)
            work[s.id] += w
            both[s.id] += b
    for parent, children in kids.items():
        _family(parent, children, stages[parent], deps, work, both, now)
    return deps, work, both


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
    """The stages of the step's last run: its last attempt and those it went on from."""
    atts = s.attempts
    i = len(atts) - 1
    while i > 0 and atts[i - 1].outcome in _GOES_ON and atts[i - 1].attempt == atts[i].attempt \
            and atts[i - 1].fleet == atts[i].fleet:
        i -= 1
    return atts[i:]


def _durations(a: Attempt, now: float) -> tuple[float, float]:
    """A stage's own work, and with its startup (a running one's: the time since it started)."""
    if a.outcome == S.RUNNING:
        d = max(0.0, now - (a.started or a.start))
        return d, d
    w = a.work_s or 0.0
    return w, w + (a.startup_s or 0.0)


def _family(parent: str, children: list[Step], run: list[Attempt], deps: dict, work: dict, both: dict,
            now: float) -> None:
    """The parent split into its stages and its end, its children between them."""
    keys = [f"{parent}{_SEP}{i}" for i in range(len(run))]
    for i, (k, a) in enumerate(zip(keys, run)):
        deps[k] = list(deps[parent]) if i == 0 else [keys[i - 1]]
        work[k], both[k] = _durations(a, now)
        if i and run[i - 1].outcome == S.WAIT:  # (it waited for every child it had by then)
            deps[k] += [c.id for c in children if c.submitted < a.start]  # (one declared as it began: after it)
    for c in children:
        by = [k for k, a in zip(keys, run) if a.start <= c.submitted]
        if by:  # (none: submitted by an earlier run of the parent, which ended before this one)
            deps[c.id] = [*deps[c.id], by[-1]]
    deps[parent] = [keys[-1]] + [c.id for c in children]
    work[parent] = both[parent] = 0.0
