"""Everything checked before a suite runs: the file, the graph and, given an
allocation, whether every step can ever fit it.

This is the shell around the pure core: it reads the suite file, resolves its run
directory and looks on disk for the inputs no step produces.
"""

from __future__ import annotations

from pathlib import Path

from fleet.core.graph import Graph, build_graph
from fleet.core.problems import Problem, SuiteError
from fleet.core.resources import Capacity, NodeSpec
from fleet.core.suite import StepSpec, Suite, suite_from_toml


def load_suite(path: str | Path) -> Suite:
    """Read and check a suite file; raise SuiteError listing every problem found."""
    path = Path(path)
    fname = str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SuiteError([Problem(fname, None, None, "no such file")]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SuiteError([Problem(fname, None, None, f"cannot read: {e}")]) from None
    return suite_from_toml(text, path, resolve=Path.resolve)


def fit_problems(suite: Suite, nodes: list[NodeSpec]) -> list[Problem]:
    """Steps whose minimum can never be met by this allocation."""
    cap = Capacity.of(nodes)
    out = []
    for s in suite.steps:
        w = cap.width(s.cores, s.min_cores, s.threads if s.mpi else 1, s.gpus, s.memory, s.span)
        if isinstance(w, str):
            field = "gpus" if "GPU" in w else "memory" if "memory" in w else ("min_ranks" if s.mpi else "min_cores")
            out.append(Problem(s.source, s.id, field, "can never run on this allocation: " + w))
    return out


def missing_on_disk(run_dir: Path):
    """The graph's `unproduced` hook: an input no step produces must exist under run_dir."""
    def check(step: StepSpec, inp: str) -> Problem | None:
        if (run_dir / inp).exists():
            return None
        return Problem(step.source, step.id, "inputs",
                       f"{inp!r} is produced by no step and does not exist in {run_dir}")
    return check


def checked_suite(path: str | Path, nodes: list[NodeSpec] | None = None,
                  check_inputs: bool = True, run_dir: Path | None = None) -> tuple[Suite, Graph]:
    """Load a suite and check it whole; raise SuiteError with every problem.

    Inputs are looked for in `run_dir` (default: the suite's own run_dir)."""
    suite = load_suite(path)
    where = run_dir if run_dir is not None else suite.run_dir
    graph, problems = build_graph(suite.steps, unproduced=missing_on_disk(where) if check_inputs else None)
    if nodes is not None:
        problems += fit_problems(suite, nodes)
    if problems:
        raise SuiteError(problems)
    return suite, graph
