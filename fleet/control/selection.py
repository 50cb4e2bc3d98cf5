"""`fleet run --only ID[,ID] [--with-deps]`: which of a submitted suite's steps run.

With ``--with-deps`` the selected steps run with every step they depend on
(transitively, by ``deps`` and by files). Without it, a selected step whose
dependency is not selected runs only if that dependency already succeeded in the run
directory (its done marker names the same definition): the dependency is then
submitted as settled elsewhere, waited for through its marker and never run (as a
shard's foreign steps are), so the selected step's own marker records what it ran
against just as a whole run's would. Any other unselected dependency refuses the
submission, naming it. Unknown ids refuse it too.
"""

from __future__ import annotations

from pathlib import Path

from fleet.control import markwriter, shard
from fleet.control.checks import inside_run_dir
from fleet.core.childsteps import not_a_suite_step, parent_in
from fleet.core.graph import dependency_on
from fleet.wire import records


class Unselectable(ValueError):
    """The selection cannot run; args[0] is the list of problems, each naming its step."""


def select(run_dir: Path, suite, steps: list, deps: dict, foreign: set,
           only, with_deps: bool, shard_text: str = "") -> tuple[list, dict, set]:
    """(steps, deps, foreign) of the selection from `suite` (fleet.core.suite.Suite);
    Unselectable with every problem. With a shard (`shard_text`, I/N), only its own
    steps may be selected: another shard's is refused, naming its shard (before
    2026-12-06 it was taken, as one to wait for, and waited for for ever)."""
    by_id = {s.id: s for s in steps}
    unknown = [i for i in only if i not in by_id or i in foreign]
    if unknown:
        whole = {s.id: s for s in suite.steps}
        problems = [_not_here(suite, whole[i], shard_text) for i in unknown if i in whole]
        children = {i: parent_in(suite.steps, i) for i in unknown if i not in whole}
        problems += [f"{suite.path}: --only: {not_a_suite_step(i, p.id, suite.name)}"
                     for i, p in children.items() if p is not None]
        missing = [f"'{i}'" for i, p in children.items() if p is None]
        if missing:
            problems.append(f"{suite.path}: --only: suite '{suite.name}' has no step " + ", ".join(missing))
        raise Unselectable(problems)
    chosen = dict.fromkeys(only)
    if with_deps:
        todo = list(only)
        while todo:
            for d in deps[todo.pop()]:
                if d not in chosen:
                    chosen[d] = None
                    todo.append(d)
    settled: set = set()
    problems = []
    for sid in chosen:
        for d in deps[sid]:
            if d in chosen or d in settled:
                continue
            if d in foreign or records.succeeded_as(markwriter.read_done(run_dir, d), by_id[d]):
                settled.add(d)
            else:
                where, why = dependency_on(by_id[sid], by_id[d], inside_run_dir(run_dir))
                problems.append(f"{by_id[sid].source}: step '{sid}': field '{where}': {why}, which is not "
                                f"selected and has not succeeded in {run_dir} (add it to --only, or use --with-deps)")
    if problems:
        raise Unselectable(problems)
    keep = chosen.keys() | settled
    out = [s for s in steps if s.id in keep]
    return out, {s.id: (() if s.id in settled else deps[s.id]) for s in out}, (foreign & keep) | settled


def _not_here(suite, step, shard_text: str) -> str:
    """--only names a step another shard than this one runs."""
    _, n = shard.parse(shard_text)
    return (f"{suite.path}: --only: step '{step.id}' is in shard {shard.owner(step.task, n)}/{n}, not in "
            f"{shard_text}: select it in its own shard's run")
