"""What each submission asked for, kept in the run directory for `fleet audit`.

The events stream only names the steps a fleet declared, and a shard declares only its
own (and the foreign steps it waits for); a shard that never started declares nothing.
So every submission leaves one small file naming its suite, shard, whether it was
forced, and every step of the whole suite (all shards); a `fleet run --only` one also
the steps it selected (with those they wait for), so that the audit does not call the
rest missing (before 2026-12-07 it did, and exited 1). Only then: a submission of the
whole suite, nearly every one, records no second list of a million ids.

    <run dir>/.fleet/submissions/<fleet id>.<submission number>.json

One file per submission (never one per step), written aside and renamed, so that
fleets sharing the run directory never write the same file and a reader sees a whole
record or none. The coordinator writes it when it accepts a submission
(fleet.control.submissions); fleet.report.audit reads every one.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
import logging
import os
import time
from dataclasses import dataclass, fields
from pathlib import Path

from fleet.wire import owndirs, ownfiles

DIR = Path(".fleet") / "submissions"

log = logging.getLogger("fleet.wire.manifest")


@dataclass(frozen=True)
class Manifest:
    """One submission to one fleet, as recorded."""

    fleet: str            # the fleet that accepted it (its id, as claims and events name it)
    submission: int       # its number in that fleet
    suite: str            # the suite file as submitted
    name: str             # the suite's name
    shard: str            # "i/n", or "" for the whole suite
    force: bool           # fleet run --force: its steps ran again though they had succeeded
    steps: tuple          # every step id of the suite, all shards, in setup order
    at: float             # when it was accepted (time.time())
    # fleet run --only: the steps it selected, with those they wait for (fleet.control.
    # selection); None: the whole suite, or its shard (and every record before 2026-12-07).
    only: tuple | None = None

    @property
    def key(self) -> tuple[str, int]:
        """(fleet, submission): what an attempt record names its submission by."""
        return (self.fleet, self.submission)


def path(run_dir: Path, fleet: str, submission: int) -> Path:
    return Path(run_dir) / DIR / f"{fleet}.{submission}.json"


def write(run_dir: Path, fleet: str, submission: int, suite: str, name: str, shard: str, force: bool,
          steps, only=None) -> Path | None:
    """Record one accepted submission (`only`: what a --only one selected); the file, or
    None when it could not be written (logged: the run goes on, only its audit is poorer)."""
    m = Manifest(fleet, submission, str(suite), name, shard or "", bool(force), tuple(steps), time.time(),
                 None if only is None else tuple(only))
    p = path(run_dir, fleet, submission)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        owndirs.makedirs(p.parent)
        ownfiles.write_text(tmp, _encoded(m))
        os.replace(tmp, p)
    except OSError as e:
        log.warning("could not record submission %d in %s: %s", submission, p, e)
        return None
    return p


def _encoded(m: Manifest, chunk: int = 10_000) -> str:
    """The manifest's JSON text. Not json.dumps(asdict(m)): asdict copies each of a
    million step ids one call at a time, and one dumps of them all holds the GIL for a
    second while the coordinator's loop waits for it (this runs on its worker thread);
    the ids are encoded a chunk at a time instead."""
    head = json.dumps({f.name: getattr(m, f.name) for f in fields(m) if f.name not in ("steps", "only")})
    only = "" if m.only is None else f', "only": {_ids(m.only, chunk)}'  # (no key at all: the whole suite)
    return f'{head[:-1]}, "steps": {_ids(m.steps, chunk)}{only}}}'


def _ids(ids: tuple, chunk: int) -> str:
    """A JSON list of step ids, encoded a chunk at a time."""
    parts = [", ".join(map(encode_basestring_ascii, ids[i:i + chunk])) for i in range(0, len(ids), chunk)]
    return f'[{", ".join(parts)}]'


def read_all(run_dir: Path) -> list[Manifest]:
    """Every submission recorded in run_dir, oldest first; unreadable files are skipped."""
    d = Path(run_dir) / DIR
    out = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else ():
        try:
            rec = json.loads(p.read_text())
            out.append(Manifest(str(rec["fleet"]), int(rec["submission"]), str(rec.get("suite", "")),
                                str(rec.get("name", "")), str(rec.get("shard", "")), bool(rec.get("force")),
                                tuple(str(s) for s in rec.get("steps", ())), float(rec.get("at", 0.0)),
                                None if rec.get("only") is None else tuple(str(s) for s in rec["only"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    out.sort(key=lambda m: (m.at, m.fleet, m.submission))
    return out


def all_steps(manifests) -> list[str]:
    """The union of the manifests' steps, each once, in the order first submitted."""
    return list(dict.fromkeys(s for m in manifests for s in m.steps))


def unselected(manifests) -> set[str]:
    """The manifests' steps no submission asked for: each named only by --only
    submissions that did not select it (empty when none was such: nearly always, no walk)."""
    chose = [m for m in manifests if m.only is not None]
    if not chose:
        return set()
    asked = {s for m in manifests for s in (m.steps if m.only is None else m.only)}
    return {s for m in chose for s in m.steps if s not in asked}
