"""What earlier fleets left in the directories of steps that run again: their per-step
claims and attempt files, looked for once, when a submission is checked.

A step that runs again (it failed before, or is forced, changed, or its deps ran anew)
has a directory on disk, and in it perhaps the records of fleets older than the lease
and the journal: a per-step claim (`claim`, live or left by a fleet that died) and one
attempt file per attempt. Everything else about it is in journals (read at start).
Listing the step's `.fleet` directory once, on the worker thread with the rest of the
check, tells both, so the loop needs nothing per step: a step with no claim on disk
is started as a fresh one is (under the lease, recorded in the journal), its attempts
counted from the files read here plus its journal lines (fleet.control.tally: the
files are read only where there are some, which only fleets before the journal, or
holding a per-step claim, wrote); only a step that has a
claim on disk is claimed per step (fleet.control.claims), which honours a live holder
and adopts a dead or stale one as before.

Only steps that will run are listed: a step found done costs its marker read alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fleet.control import tally
from fleet.core.attempts import NONE, Tally
from fleet.wire.records import ATTEMPT, CLAIM, FINAL, fleet_dir


@dataclass(frozen=True)
class Leftover:
    """What one listing of a step's `.fleet` directory found."""

    claim: bool = False  # a per-step claim file (an older fleet's, or a live lease-less holder's)
    attempts: Tally = NONE  # what its attempt files count toward --max-attempts (fleet.core.attempts)
    final: bool = False  # a final.json (how it last ended without success): its next success removes it


NOTHING = Leftover()


def scan(run_dir: Path, ids) -> dict[str, Leftover]:
    """For each step id (each with a directory on disk), what its `.fleet` directory holds
    of older fleets' records and whether it holds a final.json; steps that hold none get no entry."""
    out: dict[str, Leftover] = {}
    for sid in ids:
        d = fleet_dir(run_dir, sid)
        try:
            names = os.listdir(d)
        except OSError:  # no .fleet: nothing was recorded there
            continue
        claim, final = CLAIM in names, FINAL in names
        attempts = tally.read(f"{d}", names) if any(n.startswith(ATTEMPT) for n in names) else NONE
        if claim or attempts.ended or final:
            out[sid] = Leftover(claim, attempts, final)
    return out


def to_scan(markers: dict, done, foreign) -> list[str]:
    """The steps whose directory existed (an entry in `markers`) and that will run here."""
    return [sid for sid in markers if sid not in done and sid not in foreign]
