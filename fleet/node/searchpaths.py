"""Relative entries of the search paths a step inherits, made absolute once.

`PATH=bin:$PATH PYTHONPATH=src fleet up` (or `PYTHONPATH=.`, or a PATH with an empty
entry, which means the current directory) names directories relative to where the
fleet started. Python made its own sys.path absolute when the zygote started, so call
steps found their modules; but a command step (and an MPI step's launcher and ranks)
runs in its own work directory, steps/<id>, and inherited the entries as written:
`reltool: not found` (127), `No module named 'relpkg'`. So the agent, before it starts
its zygote, makes them absolute against the directory it started in (the fleet's: srun,
mpiexec and local agents start where `fleet up` or `fleet run` ran), once for every
step of the node, rather than per step.

Left as they are: an empty value (Python ignores an empty PYTHONPATH), absolute
entries, and entries starting with `~` (bash expands those in PATH itself).
"""

from __future__ import annotations

import os
from typing import MutableMapping

VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")


def absolute(value: str, start: str) -> str:
    """``value``, a search path, with its relative (and empty) entries made absolute
    against ``start``."""
    if not value:
        return value
    return os.pathsep.join(_entry(e, start) for e in value.split(os.pathsep))


def _entry(entry: str, start: str) -> str:
    if entry in ("", "."):
        return start
    if os.path.isabs(entry) or entry.startswith("~"):
        return entry
    return os.path.join(start, entry)


def make_absolute(env: MutableMapping[str, str] = os.environ, start: str | None = None) -> None:
    """Make the relative entries of PATH, PYTHONPATH and LD_LIBRARY_PATH in ``env``
    absolute against ``start`` (default: the current directory; none if it is gone)."""
    if start is None:
        try:
            start = os.getcwd()
        except OSError:  # (removed under us: nothing to resolve against)
            return
    for name in VARS:
        value = env.get(name)
        if value:
            fixed = absolute(value, start)
            if fixed != value:
                env[name] = fixed
