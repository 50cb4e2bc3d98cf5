"""Everything checked before a suite runs: the file, the graph and, given an
allocation, whether every step can ever fit it."""

from __future__ import annotations

from pathlib import Path

from fleet.core.graph import Graph, build_graph
from fleet.core.problems import Problem, SuiteError
from fleet.core.resources import Capacity, NodeSpec
from fleet.core.suite import Suite, load_suite


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


def checked_suite(path: str | Path, nodes: list[NodeSpec] | None = None,
                  check_inputs: bool = True, run_dir: Path | None = None) -> tuple[Suite, Graph]:
    """Load a suite and check it whole; raise SuiteError with every problem.

    Inputs are looked for in `run_dir` (default: the suite's own run_dir)."""
    suite = load_suite(path)
    where = run_dir if run_dir is not None else suite.run_dir
    graph, problems = build_graph(suite.steps, where if check_inputs else None)
    if nodes is not None:
        problems += fit_problems(suite, nodes)
    if problems:
        raise SuiteError(problems)
    return suite, graph
