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
    ENOSPC, EDQUOT; read-only: EROFS), else None."""
    return exc.errno if isinstance(exc, OSError) and exc.errno in UNWRITABLE else None
