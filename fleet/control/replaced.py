"""What a step's new record replaces on disk: a final.json the marker of the success it
follows (only that success's, when the final names it), a marker the final.json of the
failure before it. Written by the marker threads, the journal's replay and `fleet step
--record` (fleet.control.store keeps the names: store.unlink_done, store.unlink_replaced)."""

from __future__ import annotations

import os
from pathlib import Path

from fleet.wire import records
from fleet.wire.records import DONE, FINAL, marker_id


def unlink_done(d: Path | str, only: str | bool = True) -> None:
    """Remove a step's marker (its .fleet directory d), if it has one; `only`, a marker id
    (a final's `drop`, final_record): only if it is that success's (one read), whichever otherwise."""
    path = os.path.join(d, DONE)
    if isinstance(only, str) and (rec := records.read_marker(path)) is not None and marker_id(rec) != only:
        return  # another success than the one it replaces (none, or torn: removed)
    records.unlink(path)


def unlink_replaced(path: str, drop: str | bool = True) -> None:
    """What the file at `path` replaces, when its owed item says so (`drop`): a final.json
    its step's marker (unlink_done: only the one `drop` names, if it names one); a marker
    the final.json of the failure it follows."""
    d, name = os.path.split(path)
    if name == DONE:
        records.unlink(os.path.join(d, FINAL))
    else:
        unlink_done(d, drop)
