"""What a run directory must be for fleet's files under it: a directory (or one that can
be made), a path short enough for them, and room on its file system. Checked before anything starts (fleet.control.client,
the CLI), and asked again when a coordinator died before its fleet was up, or its agents
did (nearly_full)."""

from __future__ import annotations

import os
from pathlib import Path


# The longest paths fleet makes are under a run directory: <run dir>/steps/<id>/.fleet/<record>.
# The run directory's own path is kept to half of Linux's PATH_MAX (4,096 bytes), the rest
# left to step ids (fleet.core.units.MAX_ID) and fleet's names.
MAX_RUN_DIR = 2048


def run_dir_too_long(run_dir: Path) -> str | None:
    """Why run_dir's path is too long for fleet's files under it, else None."""
    n = len(str(run_dir).encode("utf-8", "surrogateescape"))
    if n > MAX_RUN_DIR:
        return (f"its path is {n} bytes long; the files fleet makes under it need it at most {MAX_RUN_DIR} "
                f"(a path ends at 4,096): choose a shorter one")
    part = max((len(p.encode("utf-8", "surrogateescape")) for p in str(run_dir).split("/")), default=0)
    if part > 255:
        return f"a name in its path is {part} bytes long, and a name ends at 255: choose a shorter one"
    return None


def not_a_directory(run_dir: Path) -> str | None:
    """Why run_dir cannot be a directory, as a clause about it: it, or a directory it
    would be made in, is a file (or anything else but a directory), or its path cannot
    be looked up; None if it is a directory or can be made one (whether this user may
    make it is the OS's to say, when it is made). Nothing is made."""
    path = Path(run_dir)
    try:
        while not (path.exists() or path.is_symlink()):  # (a link to nothing is in the way too)
            if path.parent == path:
                return None
            path = path.parent
        if path.is_dir():
            return None
    except OSError as e:  # (a part longer than a name may be, a directory this user may not search)
        return f"cannot be used: {e.strerror or e}"
    what = "a file" if path.is_file() else "a symbolic link to nothing" if not path.exists() else "a special file"
    if path == Path(run_dir):
        return f"is {what}, not a directory"
    return f"cannot be made: {shown(path)} is {what}, not a directory"


def shown(path) -> str:
    """A path as messages show it: whole unless it is very long."""
    s = str(path)
    return s if len(s) <= 200 else f"{s[:100]}...{s[-60:]}"


def full_disk(run_dir: Path) -> str | None:
    """Why run_dir's file system has no room for fleet's files (no block, or no file,
    free to this user), else None."""
    try:
        st = os.statvfs(run_dir)
    except OSError:
        return None
    # (a file system that counts no files, btrfs's f_files 0, has no file limit to reach)
    if st.f_bavail == 0 or (st.f_files > 0 and st.f_favail == 0):
        return f"the file system of {shown(run_dir)} is full ({'no block' if st.f_bavail == 0 else 'no file'} free)"
    return None


# Less than this free to the user is too little for a fleet to come up: its log, its
# records, its lease and its agents' logs take a few blocks each (16 KiB free was not
# enough for two agents' first lines), and a batch job's little more is soon gone.
LOW_BYTES = 1 << 20

FULL_EXIT = 4  # a coordinator's exit status: its run directory's file system is full (fleet.control.comingup)


def nearly_full(run_dir: Path) -> str | None:
    """Why run_dir's file system has too little room left for a fleet to come up (full,
    or under LOW_BYTES free to this user), else None: asked when something died while it
    came up, whose own words (a log) may have found no room either."""
    full = full_disk(run_dir)
    if full:
        return full
    try:
        st = os.statvfs(run_dir)
    except OSError:
        return None
    if st.f_bavail * st.f_frsize < LOW_BYTES:
        return f"the file system of {shown(run_dir)} is full{room(run_dir)}"
    return None


def room(run_dir: Path) -> str:
    """" (N KiB free)": what run_dir's file system has left for this user, as a clause
    ("" if it cannot be told)."""
    try:
        st = os.statvfs(run_dir)
    except OSError:
        return ""
    return f" ({st.f_bavail * st.f_frsize // 1024} KiB free)"
