"""Which fleets may be alive on a run directory, as a reader of its files sees them
(`fleet audit`): the lease's holder and the fleets registered to share it
(fleet.control.lease writes both and refreshes their mtime every few seconds; a fleet
that ends removes its own).

A fleet counts as alive unless it is provably gone: its process is dead or a zombie on
this host, or its file was not refreshed for stale_after seconds by its mtime (one look,
for a report: nothing is taken over by it, unlike fleet.control.lease, which watches a
file unchanged on its own clock, fleet.wire.sightings). Its file gone, it
ended (or another fleet took its lease over from it): it is not alive either.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from fleet.wire.records import holder_dead, zombie


def alive(run_dir: Path, stale_after: float) -> dict[str, dict]:
    """fleet id -> its lease or registration, for each fleet that may be alive on run_dir
    (one read of the lease, one listing of the registrations and a read of each)."""
    root = Path(run_dir) / ".fleet"
    paths = [root / "lease"]
    try:
        paths += [root / "fleets" / n for n in sorted(os.listdir(root / "fleets")) if n.endswith(".json")]
    except OSError:  # no registration: nobody shares it
        pass
    out: dict[str, dict] = {}
    now = time.time()
    for p in paths:
        try:
            with open(p) as f:
                age = now - os.fstat(f.fileno()).st_mtime
                rec = json.loads(f.read())
        except (OSError, ValueError):  # none, or being written
            continue
        if isinstance(rec, dict) and rec.get("fleet") and age < stale_after \
                and not holder_dead(rec) and not zombie(rec):
            out[str(rec["fleet"])] = rec
    return out
