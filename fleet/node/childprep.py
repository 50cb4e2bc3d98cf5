"""What the zygote makes once for every step child it (or its helper) forks.

A forked child pays for each Python object it touches: CPython writes its reference
count, and the page holding it is copied (~0.5-1 us of system time a page, and the
page again at exit). So work that is the same for every step is done here once, in
the zygote before the spares are forked, and the children find it made: the
environment changes a one-thread step needs, fresh text streams on fds 1 and 2, and
an open /dev/null. Each child then writes only what is its own.

Nothing here is required: a child that finds nothing prepared (`fleet step`, forked
from the command itself) does all of it for itself, as before.
"""

from __future__ import annotations

import os
from typing import Mapping

from fleet.node import threads

# For a step of one thread: [(name, value or None to unset)] that make os.environ the
# step's before its own env (restore_env, then every thread variable at "1").
env_one_thread: list | None = None
# Line-buffered streams on fds 1 and 2 that were never written to (a child makes
# them sys.stdout and sys.stderr after pointing fds 1 and 2 at its log).
streams: tuple | None = None
devnull: int | None = None  # an open /dev/null, for a child's stdin


def prepare(restore_env: Mapping[str, str | None]) -> None:
    """In the zygote, before forking the helper or a spare (again after a preload)."""
    global env_one_thread, streams, devnull
    restore = {**restore_env, **threads.thread_env(1)}
    env_one_thread = [(name, value) for name, value in restore.items()
                      if os.environ.get(name) != value]
    if streams is None:
        streams = tuple(open(fd, "w", buffering=1, encoding="utf-8",
                             errors="backslashreplace", closefd=False) for fd in (1, 2))
    if devnull is None:
        try:
            devnull = os.open(os.devnull, os.O_RDONLY)
        except OSError:
            devnull = None


def environment_changes(restore_env: Mapping[str, str | None], count: int) -> list:
    """[(name, value or None)]: what makes os.environ the step's before its own env."""
    if count == 1 and env_one_thread is not None:
        return env_one_thread
    restore = {**restore_env, **threads.thread_env(count)}
    return [(name, value) for name, value in restore.items() if os.environ.get(name) != value]
