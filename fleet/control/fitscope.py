"""Which steps of a submission must fit the allocation: those it would start here.

A step that can never fit the allocation (fleet.control.checks.fit_problems) refuses the
submission, and nothing starts. That is asked of the steps the submission would start on
this fleet: its shard's own (not another shard's it only waits for), narrowed to
`--only`'s (with `--with-deps`, and every step they depend on), less those it would skip
as already done (fleet.control.submissions._done decides, as it does for the run). A step
left out is never started by the submission, so it cannot keep the rest from running:
`--only small` runs on an allocation too small for the suite's widest step, and a run
that resumes on a smaller allocation is not refused for a wide step that succeeded in
an earlier one. (Before 2026-12-06 every step of the suite had to fit.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from fleet.control import shard
from fleet.control.checks import fit_problems
from fleet.core.graph import Graph, topological_order
from fleet.core.problems import Problem
from fleet.core.suite import Suite
from fleet.wire import messages as P


def problems(suite: Suite, graph: Graph, nodes: list, msg: P.Submit, run_dir: Path,
             notes: Mapping[str, str] = {}) -> list[Problem]:
    """The fit problems of the steps `msg` would start (fleet.control.checks.fit_problems;
    `notes`: what to add to a problem naming a word, as fleet.control.checks.fit_problems)."""
    ids = starting(suite, graph, msg)
    steps = suite.steps if ids is None else [s for s in suite.steps if s.id in ids]
    found = fit_problems(suite, nodes, steps, notes)
    if found and not msg.force:  # (only then are markers read: a suite that fits costs nothing more)
        done = _done_of(suite, graph, {p.step for p in found}, ids, run_dir)
        found = [p for p in found if p.step not in done]
    return found


def starting(suite: Suite, graph: Graph, msg: P.Submit) -> set[str] | None:
    """The ids of the steps `msg` selects to run here (before markers say which are done);
    None: every step of the suite. A malformed shard selects every step: its problem is
    said when the suite is split (fleet.control.submissions._shard), and the fit of
    every step with it, as before."""
    ids = None
    if msg.shard:
        try:
            i, n = shard.parse(msg.shard)
        except shard.ShardError:
            return None
        ids = {s.id for s in suite.steps if shard.owner(s.task, n) == i}
    if msg.only:
        owned = ids if ids is not None else set(graph.deps)
        chosen = {sid for sid in msg.only if sid in owned}  # (an unknown id is refused by the selection)
        todo = list(chosen) if msg.with_deps else []
        while todo:
            for d in graph.deps.get(todo.pop(), ()):
                if d in owned and d not in chosen:  # (another shard's: waited for, never run here)
                    chosen.add(d)
                    todo.append(d)
        ids = chosen
    return ids


def _done_of(suite: Suite, graph: Graph, unfit: set, ids: set | None, run_dir: Path) -> set[str]:
    """Which of the `unfit` steps the submission would skip as done: their success on
    record is of this definition, against their deps' markers now, and those deps are
    done too (fleet.control.submissions._done, over the unfit steps and their deps; a
    dep not selected counts as done if it succeeded, as the selection settles it)."""
    from fleet.control.submissions import _done, read_markers  # (it imports this module)
    by_id = {s.id: s for s in suite.steps}
    need: set[str] = set()
    todo = [sid for sid in unfit if sid in by_id]
    while todo:
        sid = todo.pop()
        if sid not in need:
            need.add(sid)
            if ids is None or sid in ids:
                todo.extend(d for d in graph.deps.get(sid, ()) if d in by_id)
    outside = {sid for sid in need if ids is not None and sid not in ids}
    order = [sid for sid in topological_order(graph) if sid in need]
    deps = {sid: (() if sid in outside else graph.deps.get(sid, ())) for sid in order}
    done, _ = _done({sid: by_id[sid] for sid in order}, order, deps, outside,
                    read_markers(run_dir, order), False)
    return done
