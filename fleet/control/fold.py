"""Folding journals: the run directory's sealed journals merged into one file, so that
what a fleet reads at start does not grow with the number of runs.

Every `fleet run` leaves a journal (.fleet/journal/<fleet>.jsonl, fleet.control.journal).
Left alone, a run directory rerun a thousand times holds a thousand journals, all read
by every fleet at start and by every audit. A fleet that holds the run directory's
lease alone (nobody else writes journals or reads them to act) folds, after replaying
the journals of dead fleets and once FOLD_FILES of them wait (see at_start), every
sealed journal of a fleet that is not live into .fleet/journal/folded.jsonl, which
keeps what readers take from them
(fleet.wire.records.read_journals):

- every attempt record (one per attempt: `fleet audit` counts them, --max-attempts
  counts them across runs);
- each step's newest outcome (done or final) and when;
- each step's newest reset (the user asked for it again: --max-attempts counts from
  there, fleet.core.attempts);
- the steps a crashed fleet was running that no later journal touched (named with
  the crashed fleet, for the `adopted` record of whoever starts them).

Headers, starts of ended attempts, superseded records and seals go. The fold is
crash-safe at every point: the new file is written aside, fsync'd and renamed over the
old one, the directory fsync'd, and only then the folded journals removed; a crash
between leaves both, and readers merge records by attempt (fleet, generation,
attempt) and outcomes by time, so nothing counts twice and nothing is lost.

A long-running fleet rotates its own journal when it grows past ROTATE_BYTES
(fleet.control.recording): it seals it, moves it aside as a segment and starts it
again with the starts of what runs now. It does not fold the segment: sealed, a
segment owes nothing, and the next fleet that holds the run directory alone folds it
with the rest at its start (see `rotate`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

from fleet.wire import ownfiles, records

log = logging.getLogger("fleet.control.fold")
FOLDED = "folded.jsonl"
ROTATE_BYTES = 64 << 20  # a fleet's own journal is rotated past this (a few hundred thousand steps)
# Test hooks (docs/operations.md): kill this process with SIGKILL at a stage of the fold
# ("written": the new file written aside; "renamed": in place, nothing removed;
# "removed": one folded journal removed) or of a rotation ("rotate:moved": the sealed
# segment moved aside, the journal not begun again), and a smaller rotation size.
FAULT_ENV = "FLEET_TEST_FOLD_FAULT"
ROTATE_ENV = "FLEET_TEST_JOURNAL_ROTATE_BYTES"
# A lone fleet folds at its start only once this many sealed journals (not counting the
# fold) wait: see at_start. Test hook: FLEET_TEST_FOLD_FILES=N folds at N.
FOLD_FILES = 16
FOLD_FILES_ENV = "FLEET_TEST_FOLD_FILES"


def rotate_bytes() -> int:
    return int(os.environ.get(ROTATE_ENV) or ROTATE_BYTES)


def fold_files() -> int:
    return max(1, int(os.environ.get(FOLD_FILES_ENV) or FOLD_FILES))


def _fault(stage: str, when: str) -> None:
    if os.environ.get(FAULT_ENV) in (stage, f"{when}:{stage}"):
        os.kill(os.getpid(), signal.SIGKILL)


def foldable(js: records.Journals, live: set) -> list[records.Journal]:
    """The sealed journals of fleets not live (and an earlier fold), to fold."""
    return [j for j in js.each if j.sealed and (j.path.name == FOLDED or j.fleet.get("fleet") not in live)]


def fold(root: Path, sources: list[records.Journal], when: str = "start",
         read: records.Journals | None = None) -> bool:
    """Merge `sources` (sealed journals, read) into root/folded.jsonl, then remove
    them (see the module's docstring). False when there is nothing to fold. `read`:
    the sources as read already, if they are every journal it holds (else read again:
    at a million steps a read of the journals is about half of the fold)."""
    if not [j for j in sources if j.path.name != FOLDED]:
        return False
    names = [j.path.name for j in sources]
    if read is not None and [j.path.name for j in read.each] == names:
        merged = read
    else:
        merged = records.read_journals(root.parent.parent, only=names)
    lines = [_header(merged)]
    for step, tries in merged.attempts.items():
        lines += [{"k": "attempt", "step": step, "rec": rec} for rec in tries.values()]
    for step, (k, t, rec) in merged.outcome.items():
        lines.append({"k": k, "step": step, "rec": rec, "t": t})
    lines += [{"k": "reset", "step": step, "t": t} for step, t in merged.resets.items()]
    lines += [{**line, "k": "start", "step": step} for step, line in _crashed(merged).items()]
    lines.append({"k": "sealed", "by": "folded", "t": time.time()})
    tmp = root / f".{FOLDED}.{os.getpid()}.tmp"
    with ownfiles.open(tmp, "w") as f:
        f.write("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
        f.flush()
        os.fsync(f.fileno())
    _fault("written", when)
    os.replace(tmp, root / FOLDED)
    _sync_dir(root)
    _fault("renamed", when)
    for j in sources:
        if j.path.name != FOLDED:
            try:
                os.unlink(j.path)
            except FileNotFoundError:
                pass
            _fault("removed", when)
    _sync_dir(root)
    return True


def _header(merged: records.Journals) -> dict:
    # The newest folded journal's time: journals started after it order after it.
    t = max((float(j.fleet.get("t") or 0.0) for j in merged.each), default=0.0)
    return {"k": "fleet", "fleet": "folded", "t": t, "journals": len(merged.each)}


def _crashed(merged: records.Journals) -> dict:
    """step -> its start line (naming the fleet as `was`) for steps a crashed fleet was
    running and no later journal touched."""
    out: dict = {}
    for j in sorted(merged.each, key=lambda j: float(j.fleet.get("t") or 0.0)):
        for step in j.touched:
            out.pop(step, None)
        if j.sealed_by != "itself":
            for step, line in j.running.items():
                was = line.get("was") or {**{k: j.fleet.get(k) for k in ("fleet", "host", "pid")},
                                          "journal": j.path.name}
                out[step] = {**line, "was": was}
    return out


def _sync_dir(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def at_start(run_dir: Path, js: records.Journals, live: set, replayed: list) -> None:
    """(A lone lease holder, after replaying the dead fleets' journals) fold every sealed
    journal of a fleet not live, once fold_files() of them wait; a failure is logged,
    never fatal (the journals stay).

    Why not at every start: a fold exists to bound how many files a start reads, not
    what it reads (a fold holds every attempt record: about as many bytes as the
    journals it replaces). Rewritten at each start, it took about half of a big run
    directory's start, to replace a few files by one (benchmarks/README.md, "A rerun of
    a million done steps"). Folding at FOLD_FILES keeps the run directory to the
    fold and fewer than FOLD_FILES sealed journals between runs, and rewrites the fold
    once every FOLD_FILES runs at most."""
    for j in replayed:
        j.sealed, j.sealed_by = True, "replayed"
    sources = foldable(js, live)
    if sum(1 for j in sources if j.path.name != FOLDED) < fold_files():
        return
    try:
        fold(Path(run_dir) / records.JOURNALS, sources, read=js)
    except OSError as e:
        log.error("could not fold the journals of %s: %s", run_dir, e)


def rotate(rec) -> None:
    """A recorder's own journal grew past rotate_bytes(): move it aside as a segment,
    to be sealed once the files it owes are written (Recorder.turn: until then it
    would be replayed, as a crashed fleet's), and start it again with the starts of
    what runs now.

    The segment is not folded now. A fold reads and writes everything folded so far,
    and folding each segment as it came cost a long run about twice its whole journal
    in all (a million 1-s steps at 1,000 agents: 66 us of CPU a step in fold processes
    during the run, and a last fold of ~40 s that the fleet's end waited for;
    benchmarks/README.md, "The journal's fold processes"), on the core the coordinator's
    loop shares. The next fleet that holds the run directory alone folds every sealed
    segment at its start, as it folds every earlier fleet's journal (at_start): one
    pass over what it reads anyway. A fleet sharing the run directory rotates the same
    way."""
    old = rec.journal
    # Sealed once the files it owes are written (Recorder.turn), not waited for here: nodes say
    # theirs written with their reports, which a busy coordinator reads seconds late.
    rec.sealing.append((old, old.handed()))
    root = old.path.parent
    segment = root / f"{old.path.stem}.{time.time_ns()}.jsonl"  # a sealed journal, read like any
    os.replace(old.path, segment)
    _fault("moved", "rotate")
    rec.journal = type(old)(rec.run_dir, rec.fleet_id, old.header, old.writer, old.syncer)
    # What runs now, as one `starts` line: at 10,000 nodes that is 640,000 steps, and a
    # view and an encoded line each held the loop for seconds at every rotation.
    sched = rec.sched
    for sid in sched.running_ids():
        rec.journal.start(sid, sched.placed(sid).attempt, sched.generation(sid), records.spec_hash(sched.spec_of(sid)))
    for j in sched.window.next.values():  # handed to a node ahead (fleet.core.window)
        rec.journal.start(j.spec.id, j.attempt, j.generation, records.spec_hash(j.spec))
    rec.rotated = getattr(rec, "rotated", 0) + 1


def journals_of(run_dir: Path, fleet: str) -> list[str]:
    """A fleet's journal and its rotated segments (names, in .fleet/journal)."""
    try:
        names = os.listdir(Path(run_dir) / records.JOURNALS)
    except FileNotFoundError:
        return []
    return [n for n in names if n == f"{fleet}.jsonl" or (n.startswith(f"{fleet}.") and n.endswith(".jsonl")
                                                          and n[len(fleet) + 1:-6].isdigit())]
