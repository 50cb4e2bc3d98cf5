"""A run directory that cannot be written: its file system full, by space or by quota
(blocks or files), or read-only (EROFS: ext4's errors=remount-ro after a disk error, a
Lustre target gone read-only, an admin's remount). The errors with which a step's set-up
(its directories, its log) tells the coordinator to start nothing more
(fleet.control.drain), instead of failing every next step the same way, each using an
attempt. Not EIO: a node's own failing mount would drain every node's work."""

from __future__ import annotations

import errno

FULL = frozenset((errno.ENOSPC, errno.EDQUOT))
UNWRITABLE = FULL | {errno.EROFS}  # (before 2026-12-06 a read-only one failed every next step)


def errno_of(exc: BaseException) -> int | None:
    """The errno of an error that says the file system cannot be written (full:
    ENOSPC, EDQUOT; read-only: EROFS), else None. Read-only counts only for fleet's own
    files and directories (the step's log and records): a step's work or output
    directory on a read-only mount (a link in the run directory to a dataset) fails that
    step alone, as before 2026-12-06; it says nothing of the run directory."""
    if not isinstance(exc, OSError) or exc.errno not in UNWRITABLE:
        return None
    if exc.errno == errno.EROFS and getattr(exc, "own", True) is False:
        return None
    return exc.errno
