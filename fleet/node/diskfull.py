"""A full file system, by space or by quota (blocks or files): the errors with which a
step's set-up (its directories, its log) tells the coordinator to start nothing more
(fleet.control.drain), instead of failing every next step the same way."""

from __future__ import annotations

import errno

FULL = frozenset((errno.ENOSPC, errno.EDQUOT))


def errno_of(exc: BaseException) -> int | None:
    """The errno of an error that says the file system is full (ENOSPC, EDQUOT), else None."""
    return exc.errno if isinstance(exc, OSError) and exc.errno in FULL else None
