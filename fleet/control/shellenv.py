"""The variables that decide what a step runs, as the fleet has them and as the shell of
a `fleet run` attached to it has them.

Steps get the environment of the fleet's agents, which is `fleet up`'s (and its umask
and limits), not that of the `fleet run` that submits them: a job script doing `fleet
up; module load X; fleet run` ran its steps without X, and nothing said so. So the
coordinator records a digest of each of these variables in its connection file, and
`fleet run` compares its own, once, naming those that differ. Digests, not values: the
connection file needs nothing more of the environment than whether it changed (and a
long LD_LIBRARY_PATH stays out of it).
"""

from __future__ import annotations

import hashlib
import os
from typing import Mapping

from fleet.node import searchpaths
from fleet.wire import connection

# PATH and the libraries and modules programs load; what `module load`, `conda activate`
# and `source venv/bin/activate` change.
VARS = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "LOADEDMODULES", "CONDA_PREFIX", "VIRTUAL_ENV")
UNSET = "-"


def digests(env: Mapping[str, str] | None = None, start: str | None = None) -> dict[str, str]:
    """name -> a digest of its value in ``env`` (UNSET if it has none). The search paths'
    relative entries are made absolute against ``start`` (default: this directory) first,
    as the agents make them (fleet.node.searchpaths): `PYTHONPATH=src` in two directories
    is two different paths."""
    env = os.environ if env is None else env
    start = connection.start_directory() if start is None else start
    out = {}
    for name in VARS:
        value = env.get(name)
        if value is None:
            out[name] = UNSET
            continue
        if name in searchpaths.VARS and start:
            value = searchpaths.absolute(value, start)
        out[name] = hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()[:16]
    return out


def differing(recorded: Mapping[str, str], env: Mapping[str, str] | None = None, start: str | None = None
              ) -> list[str]:
    """The variables whose digest in ``env`` (default: ours) is not the recorded one; none
    when nothing was recorded (a fleet started before 2026-12-07). ``start``: the directory
    the fleet started in (its connection file's `cwd`), against which its relative and empty
    entries were made absolute: the same value read from another directory is the same
    (before, `fleet run --run-dir A` from B warned of a PATH ending in ':')."""
    if not recorded:
        return []
    ours = digests(env, start or None)
    return [name for name in VARS if name in recorded and recorded[name] != ours[name]]


def warning(recorded: Mapping[str, str], env: Mapping[str, str] | None = None, start: str | None = None) -> str:
    """`fleet run`'s words when its shell's variables differ from the fleet's (``start``:
    see differing), else ""."""
    names = differing(recorded, env, start)
    if not names:
        return ""
    return (f"{', '.join(names)} in this shell differ{'s' if len(names) == 1 else ''} from the fleet's (fleet up's): "
            f"steps run with the fleet's environment, not this shell's (a `module load` or `conda activate` after "
            f"`fleet up` does not reach them: do it before `fleet up`)")
