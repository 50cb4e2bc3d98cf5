"""Each step's done marker as the journals recorded it, kept by the fleet that holds its
run directory alone, so that a submission takes a step's marker from here instead of
opening its file.

Why: a submission reads the marker of every step whose directory exists
(fleet.control.markerscan.read_markers). On a rerun of a big suite that is one open per
step, on the coordinator's worker thread: a million opens for a million-step suite, at
milliseconds each on a parallel file system. The lone lease holder has read every
journal at its start (fleet.control.recording), and a marker is only ever written from
a journal's `done` line (after that line is durable), so a step's newest journaled
outcome, when it is a success, says what its marker says.

Kept, for each step whose newest journaled outcome is a success: the marker's fields a
submission reads (outcome, spec, id, deps, work_s; `get` gives them back as the
marker's dict), not the whole record. Not kept, so the file is read as before:

- a step whose newest journaled outcome is not a success, unless this fleet recorded it
  (a `final` may or may not have removed an earlier marker, and a fold keeps no `drop`);
- a step no journal names (a marker of fleet 0.1, journals removed by hand);
- every step once the run directory is shared: other fleets write markers then (`off`).

A journal that appears after the start (`fleet step --record` writes one, sealed, for the
outcome it records) is noticed with one listing of the journals' directory a submission:
its steps' markers are read from their files again. A step's directory is still looked
for (one listing per parent, read_markers), so a step whose directory was removed runs
again. A marker removed by hand, its directory left, is not noticed by the lone holder
(docs/user-guide.md, "Reruns resume").
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from fleet.control.fold import FOLDED  # (the fold at start writes it after the journals were read)
from fleet.wire import records

_known: dict[str, "Known"] = {}  # run directory -> its lone fleet's markers (see of())


class Known:
    """step -> what a submission reads of its marker (see the module's docstring): 24 bytes
    (spec and id as the 8 bytes their 16 hex digits spell, work_s as a double) for a
    marker with no deps, as most are; else (spec, id, deps as items or None, work_s)."""

    __slots__ = ("steps", "seen", "mine")

    def __init__(self, seen=(), mine: str = ""):
        self.steps: dict[str, tuple] = {}
        self.seen: set[str] = set(seen)  # journals (names) whose outcomes are taken into account
        self.mine = mine  # this fleet's id: its own journal and segments are never news

    def news(self, run_dir) -> None:
        """Journals that appeared since (not this fleet's): their steps' markers are read from
        their files from now on. One listing of the journals' directory."""
        try:
            names = os.listdir(Path(run_dir) / records.JOURNALS)
        except OSError:
            return
        new = [n for n in names if n.endswith(".jsonl") and n not in self.seen
               and not (self.mine and (n == f"{self.mine}.jsonl" or n.startswith(f"{self.mine}.")))]
        if not new:
            return
        for step in records.read_journals(run_dir, only=sorted(new)).outcome:
            self.steps.pop(step, None)
        self.seen.update(new)

    def done(self, step: str, rec: dict) -> None:
        """A success's marker `rec` (as written), the step's newest."""
        deps = rec.get("deps")
        self.steps[step] = _kept(rec.get("spec"), rec.get("id"), _items(deps) if isinstance(deps, dict) else None,
                                 rec.get("work_s"))

    def done_as(self, step: str, spec: str, mid: str, deps: dict, work_s: float) -> None:
        """done() from the parts the loop's recording path has (no dict made)."""
        self.steps[step] = _kept(spec, mid, _items(deps), work_s)

    def forget(self, step: str) -> None:
        """The step's marker is not known here any more (removed, or written elsewhere): read its file."""
        self.steps.pop(step, None)

    def get(self, step: str) -> dict | None:
        """The step's marker as the journals say (the fields a submission reads), or None: read its file."""
        k = self.steps.get(step)
        if k is None:
            return None
        if type(k) is bytes:
            return {"outcome": "succeeded", "spec": k[:8].hex(), "id": k[8:16].hex(), "deps": {},
                    "work_s": _DOUBLE.unpack_from(k, 16)[0]}
        rec = {"outcome": "succeeded", "spec": k[0], "id": k[1]}
        if k[2] is not None:
            rec["deps"] = dict(k[2])
        if k[3] is not None:
            rec["work_s"] = k[3]
        return rec

    def __len__(self) -> int:
        return len(self.steps)


_NONE = ()  # the deps of most steps: one empty tuple for all
_DOUBLE = struct.Struct("<d")


def _items(deps: dict) -> tuple:
    return tuple(deps.items()) if deps else _NONE


def _kept(spec, mid, deps, work_s):
    """What is kept of a marker: 24 bytes where they say it all exactly (one small object
    instead of a tuple, two strings and a float), else the tuple."""
    if deps is _NONE and type(work_s) is float and type(spec) is str and type(mid) is str:
        try:
            b = bytes.fromhex(spec + mid)
        except ValueError:
            b = b""
        if len(b) == 16 and b.hex() == spec + mid:
            return b + _DOUBLE.pack(work_s)
    return (spec, mid, deps, work_s)


def start(run_dir, js: records.Journals, fleet_id: str) -> Known:
    """The lone holder's markers from the newest outcomes of the journals it read at its start
    (fleet.wire.records.Journals), kept for run_dir until off()."""
    k = Known({j.path.name for j in js.each} | {FOLDED}, fleet_id)
    steps = k.steps
    for step, (kind, _, rec) in js.outcome.items():
        if kind == "done" and rec.get("outcome") == "succeeded":
            # Copies, not the objects the journals' reading made: those lie all over the
            # memory that reading took (GiBs at a million steps), and one kept from each
            # stretch of it would keep it all from being given back when the reading goes.
            deps, w = rec.get("deps"), rec.get("work_s")
            steps[_copy(step)] = _kept(_copy(rec.get("spec")), _copy(rec.get("id")),
                                       tuple((_copy(d), _copy(i)) for d, i in deps.items()) if deps else
                                       _NONE if isinstance(deps, dict) else None,
                                       w + 0.0 if isinstance(w, float) else w)
    _known[str(run_dir)] = k
    return k


def _copy(s):
    """A new str equal to s (any other value as it is)."""
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass") if isinstance(s, str) else s


def of(run_dir) -> Known | None:
    """The markers the lone holder of run_dir keeps here (None: none, read the files). Read from
    any thread: a submission's check reads it on the worker thread while the loop records."""
    return _known.get(str(run_dir))


def off(run_dir, known: Known | None = None) -> None:
    """The run directory is shared, or its fleet ends: its markers are read from their files again."""
    key = str(run_dir)
    if known is None or _known.get(key) is known:
        _known.pop(key, None)
