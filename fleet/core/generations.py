"""What a new submission does with steps the scheduler already knows.

A live fleet (`fleet up`) takes several submissions; each may bring steps an earlier
one brought. Deps first, each known step is:

- kept: it is still to run (waiting, ready or running) as submitted, or another fleet
  runs it; or it succeeded and its marker still says done;
- renewed: a new generation replaces the waiting, ready or finished one (its attempts
  count from 1 again);
- queued after: it is running, and the new definition runs when that attempt ends.

A step runs anew when its definition changed, when it ended without success, when its
marker no longer says done (or `--force`), or when one of its deps will run (make's
rule): what runs makes its dependents run, so no marker is trusted past it.
"""

from __future__ import annotations

from typing import Mapping

from fleet.core import states as S
from fleet.core.decisions import Submitted
from fleet.core.graph import _kahn

NEW, KEEP, RENEW, AFTER = "new", "keep", "renew", "after"


def resubmission(ev: Submitted, jobs: Mapping) -> tuple[dict[str, str], set[str]]:
    """What the submission does with each of its steps (NEW, KEEP, RENEW or AFTER), and
    which of the new or renewed ones it skips as done. `jobs` maps the ids the scheduler
    knows to records with `state` and `spec`."""
    steps = {s.id: s for s in ev.steps}
    deps = {sid: tuple(ev.deps.get(sid, s.deps)) for sid, s in steps.items()}
    order, _ = _kahn(deps)
    if len(order) < len(deps):  # a cycle (refused before here): the rest in setup order
        placed = set(order)
        order += [k for k in deps if k not in placed]
    plan: dict[str, str] = {}
    skip: set[str] = set()
    runs: set[str] = set()  # will run (again) in this fleet
    for sid in order:
        old = jobs.get(sid)
        dep_runs = any(d in runs for d in deps[sid])
        done = sid in ev.done and not dep_runs
        if old is None:
            what = NEW
        elif old.state in S.FINAL:
            same = old.spec.identity() == steps[sid].identity()
            what = KEEP if old.state in S.GOOD and done and same else RENEW
        elif old.state == S.ELSEWHERE or (not dep_runs and old.spec.identity() == steps[sid].identity()):
            what = KEEP  # another fleet runs it, or it is still to run as submitted
        else:
            what = AFTER if old.state == S.RUNNING else RENEW
        plan[sid] = what
        if what in (NEW, RENEW) and done:
            skip.add(sid)
        elif what != KEEP or old.state not in S.FINAL:
            runs.add(sid)
    return plan, skip
