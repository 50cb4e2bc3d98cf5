"""MPI steps whose declared memory nothing enforces: a warning for their submitter.

A step's `memory` is a limit where its node can hold it to one (fleet.node.memlimit).
An MPI step's ranks are not the node's children but its launcher's: fleet gives no
memory limit for them, and only srun takes one of its own (`--mem`, fleet.site.mpi).
PALS and Hydra take none, so there an MPI step's `memory` is counted by the scheduler
(it is held on the step's nodes) but not enforced. That is said, not refused: the suite
runs as before, and its submitter hears of it once (fleet run prints it on stderr).
"""

from __future__ import annotations

from fleet.core.units import counted

UNENFORCED = ("pals", "hydra")  # the profiles' `mpi` launchers that take no memory limit


def note(launcher: str, steps) -> str:
    """The warning for the MPI steps among `steps` (those a submission would run) that
    declare memory, if `launcher` (the machine profile's `mpi`) cannot enforce it; ""
    otherwise."""
    if launcher not in UNENFORCED:
        return ""
    declared = [s for s in steps if s.mpi and s.memory]
    if not declared:
        return ""
    return (f"{counted(len(declared), 'MPI step')} (the first: {declared[0].id}) "
            f"declare{'s' if len(declared) == 1 else ''} memory, which the {launcher} launcher does not enforce: "
            "the scheduler counts it, but nothing holds the ranks to it (only srun takes a memory "
            "limit; see docs/operations.md in fleet's source, \"MPI steps\")")
