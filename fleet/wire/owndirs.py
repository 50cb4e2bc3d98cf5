"""fleet's own directories in a run directory (.fleet, steps/<id>/.fleet, agents, ...):
made so that no one but their owner can write them whatever the umask, and, those a
fleet reuses at its top, checked to be so before it trusts what is in them.

Under a umask of 002 (common on project file systems) a plain mkdir makes a directory its
group can write. Anyone of the group could then replace a step's log with a symbolic link
(fleet appends to it, as the user), forge or remove its done marker, or drop steps into a
protocol = "steps" step's submit directory (fleet runs them, as the user). Before
2026-12-06 fleet made its directories so. Now the mode is explicit on every directory
fleet makes, the intermediate ones too (os.makedirs gives its mode to the last only). The
umask steps inherit is left alone: what steps make is as the user wants it (group-writable
outputs, on a project file system).
"""

from __future__ import annotations

import os
import stat

MODE = 0o755  # (less what the umask takes away: 0700 under a umask of 077)
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def makedirs(path: os.PathLike | str) -> None:
    """mkdir -p, each directory made with MODE; one that exists is left as it is (a
    file in the way is FileExistsError, as os.makedirs says). One mkdir when the parent
    exists, as os.mkdir."""
    path = os.path.normpath(os.fspath(path))
    try:
        os.mkdir(path, MODE)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if not parent or parent == path:
            raise
        makedirs(parent)
        try:
            os.mkdir(path, MODE)
        except FileExistsError:  # (made meanwhile, by another process of the fleet)
            if not os.path.isdir(path):
                raise


def unsafe(path: os.PathLike | str) -> str | None:
    """Why `path`, an entry of fleet's in a run directory, cannot be trusted, or None
    (also when it is absent: what fleet makes is made safe). Another user's (a symbolic
    link too, or its target), or a directory or file others can write (fleet makes its
    files so that they cannot: fleet.wire.ownfiles)."""
    try:
        st = os.lstat(path)
        if st.st_uid == os.getuid() and stat.S_ISLNK(st.st_mode):
            st = os.stat(path)  # (this user's link: what it points to counts)
    except OSError:  # absent, or a dangling link: what is wrong with it is said where it is used
        return None
    if st.st_uid != os.getuid():
        return f"belongs to another user (uid {st.st_uid})"
    if (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)) and st.st_mode & OTHERS_WRITE:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
