"""Which steps of a submission must fit the allocation, and have their inputs no step
produces on disk: those it would start here.

A step that can never fit the allocation (fleet.control.checks.fit_problems) refuses the
submission, and nothing starts. That is asked of the steps the submission would start on
this fleet: its shard's own (not another shard's it only waits for), narrowed to
`--only`'s (with `--with-deps`, and every step they depend on), less those it would skip
as already done (fleet.control.submissions._done decides, as it does for the run). A step
left out is never started by the submission, so it cannot keep the rest from running:
`--only small` runs on an allocation too small for the suite's widest step, and a run
that resumes on a smaller allocation is not refused for a wide step that succeeded in
an earlier one. (Before 2026-12-06 every step of the suite had to fit.) So for a missing
input (one no step produces, not on disk): `--only b` is not refused because another
step's dataset is missing (before 2026-12-06 every step's inputs were looked for).
"""

from __future__ import annotations

from pathlib import Path

from fleet.control import shard
from fleet.core.graph import Graph, topological_order
from fleet.core.problems import Problem
from fleet.core.suite import Suite
from fleet.wire import messages as P


def narrowed(suite: Suite, graph: Graph, msg: P.Submit, run_dir: Path, found: list[Problem]) -> list[Problem]:
    """Of `found` (each about a step: it cannot fit, an input of it is missing), those of
    the steps `msg` would start: its shard's, its selection's, less those done."""
    if not found:
        return found
    runs = _runs(suite, graph, msg)
    found = [p for p in found if runs(p.step)]
    if found and not msg.force:  # (markers read only for these, and the steps they depend on)
        done = _done_of(suite, graph, {p.step for p in found}, runs, run_dir)
        found = [p for p in found if p.step not in done]
    return found


def _runs(suite: Suite, graph: Graph, msg: P.Submit):
    """Whether the submission runs a step here (done or not): its shard's own, narrowed to
    --only's and, with --with-deps, the steps they depend on (another shard's: waited for,
    never run here). A malformed shard runs every step: its problem is said when the suite
    is split (fleet.control.submissions._shard), with every step's fit, as before."""
    if msg.shard:
        try:
            i, n = shard.parse(msg.shard)
        except shard.ShardError:
            return lambda sid: True
        by_id = {s.id: s for s in suite.steps}
        owned = lambda sid: sid in by_id and shard.owner(by_id[sid].task, n) == i  # noqa: E731
    else:
        owned = lambda sid: True  # noqa: E731
    if not msg.only:
        return owned
    chosen = {sid for sid in msg.only if owned(sid)}  # (an unknown id is the selection's to refuse)
    todo = list(chosen) if msg.with_deps else []
    while todo:
        for d in graph.deps.get(todo.pop(), ()):
            if d not in chosen and owned(d):
                chosen.add(d)
                todo.append(d)
    return chosen.__contains__


def _done_of(suite: Suite, graph: Graph, unfit: set, runs, run_dir: Path) -> set[str]:
    """Which of the `unfit` steps the submission would skip as done: their success on
    record is of this definition, against their deps' markers now, and those deps are
    done too (fleet.control.submissions._done, over the unfit steps and the steps they
    depend on; one the submission does not run counts as done if it succeeded, as the
    selection and the shard settle it)."""
    from fleet.control.markerscan import read_markers
    from fleet.control.submissions import _done  # (it imports this module)
    need: set[str] = set()
    todo = list(unfit)
    while todo:
        sid = todo.pop()
        if sid not in need:
            need.add(sid)
            if runs(sid):
                todo.extend(graph.deps.get(sid, ()))
    outside = {sid for sid in need if not runs(sid)}
    order = [sid for sid in topological_order(graph) if sid in need]
    by_id = {s.id: s for s in suite.steps if s.id in need}
    deps = {sid: (() if sid in outside else graph.deps.get(sid, ())) for sid in order}
    done, _ = _done(by_id, order, deps, outside, read_markers(run_dir, order), False)
    return done
