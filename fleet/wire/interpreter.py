"""How fleet starts its own Python processes: the coordinator, the agents, the zygotes.

`python -m module` puts the current directory first on sys.path, and fleet's processes
start in the user's (where `fleet up` or `fleet run` ran, the job's directory on the
nodes): a `json.py`, `signal.py` or `random.py` there was imported by the coordinator
and the agents in place of the standard library's, and the fleet did not come up.
From Python 3.11 they start with -P, which leaves it out (on 3.10 nothing does).
A zygote puts the directory back once its own imports are done, so that preloads and
call steps find modules there as they did (fleet.node.zygote).
"""

from __future__ import annotations

import os
import sys

SAFE = ("-P",) if sys.version_info >= (3, 11) else ()
started_in: str | None = None  # the directory user_path put first on sys.path (a call step's missing module says it)


def module(name: str) -> list[str]:
    """The command line that runs fleet's module `name` in this Python."""
    return [sys.executable, *SAFE, "-m", name]


def user_path() -> None:
    """(In a zygote once its own imports are done, and in `fleet step`'s child) the
    directory it started in first on sys.path, where `python -m` puts it without -P:
    preloads and call steps find modules there as they always did in a fleet. Nothing
    if that directory is gone (it has no modules to find)."""
    try:
        here = os.getcwd()
    except OSError:
        return
    global started_in
    started_in = here
    if here not in sys.path:
        sys.path.insert(0, here)
