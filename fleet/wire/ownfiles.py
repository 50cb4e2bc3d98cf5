"""fleet's own files in a run directory (done markers, final and attempt records, the
journal and its fold, claim snapshots, the lease, step logs, events.jsonl,
coordinator.log, the agents' logs, an MPI step's files): made so that no one but their
owner can write them whatever the umask, as their directories are (fleet.wire.owndirs).

Under a umask of 002 (common on project file systems) a plain open() makes a file its
group can write: anyone of the group could then forge a done marker's or a journal's
contents (a step skipped, or rerun), or a record the report reads. Before 2026-12-06
fleet made most of its files so. Now every file fleet makes is created with MODE, in the
one open() that makes it (no chmod afterwards: no system call more per file). The umask
steps inherit is left alone: what a step writes (its outputs, what is in its work
directory) is as the user wants it. fleet.json, which holds the fleet's keys, is 0600
(fleet.wire.connection), as are the suites `fleet` keeps (fleet.control.api).
"""

from __future__ import annotations

import builtins
import os

MODE = 0o644  # (less what the umask takes away, which only ever removes bits: 0600 under 077)


def opener(path: str, flags: int) -> int:
    """open()'s `opener`: the file, if made, made with MODE."""
    return os.open(path, flags, MODE)


def open(path: os.PathLike | str, mode: str = "r", **kw):
    """builtins.open(path, mode, ...), a file it makes made with MODE."""
    return builtins.open(path, mode, opener=opener, **kw)


def write_text(path: os.PathLike | str, text: str) -> None:
    """Path(path).write_text(text), a file it makes made with MODE."""
    with open(path, "w") as f:
        f.write(text)
