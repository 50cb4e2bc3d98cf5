"""This fleet's count of each step's attempts toward --max-attempts (which attempts
count: fleet.core.attempts), kept in memory so that starting a step reads nothing.

Attempts are recorded in journals (replayed at start, then this fleet's own lines,
then those of fleets sharing the run directory once they are gone) and, by fleets
before the journal or holding a step's per-step claim, in the step's attempt files.
Those are read when a submission lists the step's directory (fleet.control.leftovers),
or at the step's start if it was not listed, and cut at its marker's success; a step
claimed per step reads them again at each claim (fleet.control.store: nobody else
writes them then). Every table is keyed by the step's .fleet directory as text
(fleet.control.store.key), and a step whose count is nothing has no entry: after a
full run of a million steps, all of them succeeded, the tables are empty.

A reset (the user asked for the step: --force, or its directory removed) is recorded
in the journal as {"k": "reset", step, t} (fleet.control.submissions says which steps;
fleet.control.recording writes the line), so later fleets count from it too.
"""

from __future__ import annotations

import json
import os

from fleet.core.attempts import NO_CUT, NONE, GOES_ON, Tally, ended_at, tally
from fleet.core import states as S
from fleet.wire import records, spechash

_journal: dict[str, Tally] = {}  # step key -> its attempts in journals, as counted so far
_files: dict[str, Tally] = {}    # step key -> its attempt files as read when it was submitted
_unread: set[str] = set()        # step keys whose attempt files are read at the step's start


def read(d: str, names=None) -> Tally:
    """The tally of the attempt files in a step's .fleet directory d (names: its listing, if made)."""
    try:
        names = os.listdir(d) if names is None else names
    except FileNotFoundError:
        return NONE
    recs = []
    for n in names:
        if n.startswith(records.ATTEMPT):
            try:
                with open(f"{d}/{n}") as f:
                    recs.append(json.loads(f.read()))
            except (OSError, ValueError):  # torn or gone: as an audit, counted as nothing
                continue
    return tally(r for r in recs if isinstance(r, dict))


def replayed(js: records.Journals, key_of) -> None:
    """At start: every attempt and reset the journals hold (key_of: a step's key)."""
    resets = js.resets
    for step, tries in js.attempts.items():
        reset = resets.get(step, NO_CUT) if resets else NO_CUT
        if len(tries) == 1 and reset == NO_CUT:  # the common case, by shape: one success, nothing to count
            (rec,) = tries.values()
            if rec.get("outcome") == S.SUCCEEDED:
                continue
        t = tally(tries.values(), reset)
        if t.ended or reset > NO_CUT:
            _journal[key_of(step)] = t
    for step in resets.keys() - js.attempts.keys():
        _journal[key_of(step)] = Tally(resets[step])


def since(js: records.Journals, t0: float, key_of) -> None:
    """The attempts and resets in these journals (a gone fleet's) from t0 on (wall clock):
    what this fleet did not count at its start."""
    for step in js.attempts.keys() | js.resets.keys():
        recs = [r for r in js.attempts.get(step, {}).values() if ended_at(r) >= t0]
        reset = js.resets.get(step, NO_CUT)
        if recs or reset >= t0:
            d = key_of(step)
            _journal[d] = _journal.get(d, NONE).merged(tally(recs, reset if reset >= t0 else NO_CUT))


def ended(d: str, rec: dict) -> None:
    """An attempt of this fleet ended (its record, written to the journal)."""
    outcome = rec.get("outcome")
    if outcome == S.SUCCEEDED:
        succeeded(d, ended_at(rec))
    elif outcome not in GOES_ON:
        _journal[d] = _journal.get(d, NONE).failed(ended_at(rec), rec.get("spec"))


def succeeded(d: str, t: float) -> None:
    """A success of this fleet's, ended at t: nothing before it counts (only a step with
    something counted needs to remember from when)."""
    if d in _journal or d in _files:
        _journal[d] = Tally(max(t, _journal.get(d, NONE).cut))


def submitted(d: str, files: Tally | None, marker: dict | None) -> None:
    """A submission listed the step's attempt files (None: did not look) and read its
    marker: files from before the marker's success do not count."""
    if files is None:
        if d not in _files:
            _unread.add(d)
        return
    _unread.discard(d)
    if marker is not None and marker.get("outcome") == S.SUCCEEDED:
        files = files.after(ended_at(marker))
    if files.ended:
        _files[d] = files
    else:
        _files.pop(d, None)


def counted(d: str) -> bool:
    """Something of the step counts (a reset would change its count)."""
    return d in _journal or d in _files or d in _unread


def anything() -> bool:
    """Any step has something counted."""
    return bool(_journal or _files or _unread)


def reset(d: str, t: float) -> None:
    """The user asked for the step again at t: its count starts again."""
    _journal[d] = Tally(t)
    _files.pop(d, None)
    _unread.discard(d)


def count(d: str, spec, by_fleet_step: bool = False) -> int:
    """The attempts of the step's definition `spec` that count toward the limit (with
    `by_fleet_step`: those of them `fleet step --record` recorded)."""
    if not (_journal or _files or _unread):
        return 0
    if d in _unread:
        _unread.discard(d)
        submitted(d, read(d), None)
    j = _journal.get(d, NONE)
    f = _files.get(d)
    if j is NONE and f is None:
        return 0
    return _of(j, spec, by_fleet_step) + (_of(f.after(j.cut), spec, by_fleet_step) if f is not None else 0)


def on_disk(d: str, spec, by_fleet_step: bool = False) -> int:
    """count() with the step's attempt files read now (it is claimed per step: this
    fleet writes its attempts there, and may have since it was submitted)."""
    j = _journal.get(d, NONE)
    return _of(j, spec, by_fleet_step) + _of(read(d).after(j.cut), spec, by_fleet_step)


def _of(t: Tally, spec, by_fleet_step: bool) -> int:
    """t's attempts of the definition `spec`: those naming its hash, or the hash records
    written before 2026-12-06 name it by (spechash.legacy_hash: taken only for a step
    with attempts counted)."""
    if not t.ended:
        return 0
    hs = (records.spec_hash(spec), spechash.legacy_hash(spec))
    return t.by_fleet_step(*hs) if by_fleet_step else t.count(*hs)
