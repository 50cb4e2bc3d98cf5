"""Files of JSON lines that fleet appends to (the event stream, the journals): whole
lines, even when the file system fills up or a writer died mid-line.

A write that fails part way (ENOSPC, EDQUOT) leaves the start of a line at the file's
end. The writer keeps what it could not write and writes it first next time, so while it
lives the line is completed; but another fleet's line may come between the two parts,
and a writer that ends (or dies) before there is room leaves a torn line for good. So
what the failed write did write is taken back (:func:`take_back`), unless something was
appended after it. And a writer that opens a file whose last line is torn starts on a
line of its own (:func:`ends_a_line`).
"""

from __future__ import annotations

import os
from pathlib import Path


def ends_a_line(path: Path) -> bool:
    """Whether the file at path is empty or ends with a newline (True if unreadable)."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            if end == 0:
                return True
            f.seek(end - 1)
            return f.read(1) == b"\n"
    except OSError:
        return True


def take_back(fd: int, n: int) -> bool:
    """Cut the last n bytes written through fd (opened O_APPEND), if they are still the
    file's end (nothing appended after them); whether it did."""
    try:
        end = os.lseek(fd, 0, os.SEEK_CUR)  # (O_APPEND: the end of what this fd wrote last)
        if os.fstat(fd).st_size != end:
            return False
        os.ftruncate(fd, end - n)
        return True
    except OSError:
        return False
