"""A step's width as its fields give it: a plain step's cores, an MPI step's ranks
times threads (fleet.core.suite reads the fields; this says what they make)."""

from __future__ import annotations

from typing import Any, Callable


def widths(values: dict[str, Any], mpi: bool, bad: Callable[..., None]) -> tuple[int, int, int, int, int]:
    """cores, min_cores, ranks, min_ranks, threads: an MPI step's cores are its ranks
    times threads; a plain step has one rank of one thread."""
    if mpi:
        for k in ("cores", "min_cores"):  # each named as written (before 2026-12-07 both as 'cores')
            if k in values:
                bad(k, f"an MPI step declares ranks and threads, not {k}", "mpi")
        ranks = values.get("ranks", 1)
        min_ranks = values.get("min_ranks", ranks)
        threads = values.get("threads", 1)
        if min_ranks > ranks:
            bad("min_ranks", f"min_ranks ({min_ranks}) is larger than ranks ({ranks})", "ranks")
        return ranks * threads, min_ranks * threads, ranks, min_ranks, threads
    for k in ("ranks", "min_ranks", "threads"):
        if k in values:
            bad(k, f"{k} is for MPI steps (set mpi = true)")
    cores = values.get("cores", 1)
    min_cores = values.get("min_cores", cores)
    if min_cores > cores:
        bad("min_cores", f"min_cores ({min_cores}) is larger than cores ({cores})", "cores")
    return cores, min_cores, 1, 1, 1
