"""Writing the per-step records on the shared filesystem: completion markers that make
a rerun skip what already succeeded, claims, attempt records and final outcomes. Their
layout and how to read them are fleet.wire.records, shared with every reader."""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from pathlib import Path
from typing import Callable, NamedTuple

from fleet.control import leftovers, tally
from fleet.control.replaced import unlink_done, unlink_replaced  # noqa: F401 (store's names for them)
from fleet.core import attempts
from fleet.core.suite import StepSpec
from fleet.wire import owndirs, ownfiles, records
from fleet.wire.records import (ATTEMPT, CLAIM, DONE, FINAL, claim_stale, holder_dead, marker_id, read_claim, read_done,
                                spec_hash, succeeded_as)


_made: set[str] = set()


def key(run_dir, step_id: str) -> str:
    """The key of a step in this module's tables: its .fleet directory as text (where
    fleet.wire.records.fleet_dir puts it). A step's records are looked up several times
    per step; a str key hashes and compares in C, where a Path's __hash__ and __eq__
    are Python calls (and a Path a step is one more object). A Path is made only where
    a file is opened."""
    return f"{run_dir}/steps/{step_id}/.fleet"


_fleet_dir = key


# --- what a step ran against ---------------------------------------------------------------
#
# A done marker says what succeeded (`spec`, the definition's hash) and against what: its
# `id`, and `deps`, each dependency's marker id when the step ran. A submission counts a
# step done only if both still hold (fleet.control.submissions). So that writing a marker
# reads nothing, this process remembers, per step (keyed by its .fleet directory, as text): the
# newest marker id it saw or wrote, the deps it was submitted with, and the attempts it
# claimed that have not ended, oldest first, with the definition each runs. (A running
# step a later submission changed ends after its next definition was claimed: its marker
# must still name the definition that ran.)

class _Attempt(NamedTuple):  # (immutable as a frozen dataclass; made without its per-field __init__, per start)
    seq: int  # claim order in this process
    attempt: int
    generation: int
    spec: str  # spec_hash of what runs
    deps: tuple[str, ...]


_tuple = tuple.__new__
_seen: dict[str, str | None] = {}
_deps: dict[str, tuple[str, ...]] = {}
_flight: dict[str, list[_Attempt]] = {}
_ended: dict[str, _Attempt] = {}
_order = itertools.count()


def submitted(run_dir: Path, step_id: str, deps, marker: dict | None, listed: bool = True, left=None) -> None:
    """A submission read the step's marker (None: there is none) and hands the step on
    with these deps: a claim does not take that marker for a success that came since.
    `listed`: the step's directory existed then (it may hold older attempt records);
    `left`: what older fleets left in it (fleet.control.leftovers; None: not looked)."""
    d = _fleet_dir(run_dir, step_id)
    if listed:
        _existed.add(d)
        if left is None:  # not looked at: claimed per step, its attempt files read at its start
            _per_step.add(d)
            tally.submitted(d, None, marker)
        else:  # looked at with the submission: only a claim on disk makes it claimed per step
            tally.submitted(d, left.attempts, marker)
            if left.claim:
                _per_step.add(d)
            else:
                _per_step.discard(d)
    if left is not None and left.final:
        _finals.add(d)
    _seen[d] = marker_id(marker) if marker is not None else None
    _deps[d] = tuple(deps)


# Steps submitted with no directory on disk and their own deps, per run directory, by
# id: what submitted() would note for them is "no marker, the spec's deps", so they get
# no entry (and no Path) of their own; a million-step suite is mostly such steps.
_fresh: dict[str, set[str]] = {}  # (by the run directory as text)

# Steps (their keys) known to have a final.json on disk or owed: one listed with its
# submission (fleet.control.leftovers), or given a final here since. Their next success
# removes it with its marker's write (replaces_final), so a step's .fleet directory never
# keeps the failure its success replaced; any other step's success costs no look for one.
_finals: set[str] = set()


def declared(run_dir: Path, specs, deps: dict, markers: dict, left: dict | None = None) -> None:
    """submitted() for many steps of a submission: `deps`, `markers` and `left` (what
    older fleets left: fleet.control.leftovers; None: not looked) by step id (a step
    with no entry in `markers` had no directory: see markerscan.read_markers)."""
    fresh = _fresh.setdefault(f"{run_dir}", set())
    for s in specs:
        sid, dd = s.id, deps[s.id]
        if sid in markers or tuple(dd) != s.deps:
            fresh.discard(sid)
            submitted(run_dir, sid, dd, markers.get(sid), sid in markers,
                      None if left is None else left.get(sid, leftovers.NOTHING))
            continue
        if _deps or _seen:  # what an earlier submission or end noted for it goes, as submitted() overwrites it
            d = _fleet_dir(run_dir, sid)
            _deps.pop(d, None)
            _seen.pop(d, None)
        fresh.add(sid)


def _ending(d: str, attempt) -> _Attempt | None:
    """The in-flight attempt of this number that ends now (the oldest: attempt numbers
    start again with each generation), dropping older ones that never ended here."""
    flight = _flight.get(d, [])
    if len(flight) == 1 and flight[0].attempt == attempt:  # the common case: its only one (no empty list kept)
        a = _ended[d] = flight[0]
        del _flight[d]
        return a
    for i, a in enumerate(flight):
        if a.attempt == attempt:
            del flight[:i + 1]
            _ended[d] = a
            return a
    a = _ended.get(d)
    return a if a is not None and a.attempt == attempt else None


def _marker_of(run_dir: Path, step_id: str) -> str | None:
    d = _fleet_dir(run_dir, step_id)
    if d not in _seen:  # another fleet's step, settled there: read once
        if step_id in _fresh.get(f"{run_dir}", ()):  # no directory when submitted, nothing seen since
            return None
        rec = read_done(run_dir, step_id)
        _seen[d] = marker_id(rec) if rec is not None else None
    return _seen[d]


def makedirs(path: Path | str) -> None:
    """mkdir -p, once per directory per process: on a parallel filesystem every
    metadata call counts, and the coordinator makes several per step."""
    p = os.fspath(path)
    if p not in _made:
        owndirs.makedirs(p)  # (no more writable than its owner wants: fleet.wire.owndirs)
        _made.add(p)


def write_done(run_dir: Path, spec: StepSpec, record: dict) -> None:
    """Record success atomically (write aside, then rename): the definition that ran
    (as claimed), a new marker id, and the marker ids of the deps it ran against."""
    path, rec = done_record(run_dir, spec, record)
    makedirs(os.path.dirname(path))
    _replace(path, rec)
    if replaces_final(os.path.dirname(path)):
        unlink_replaced(path)


def final_seen(run_dir: Path, step_id: str) -> None:
    """Another fleet's final.json of the step was read here, and the step runs here: its
    success here removes it (replaces_final), as one this fleet wrote or listed."""
    _finals.add(_fleet_dir(run_dir, step_id))


def replaces_final(d: str) -> bool:
    """Whether a success of the step (its key d) must remove the final.json its .fleet
    directory holds, or is owed (then no longer known there: the marker's write removes it)."""
    if d in _finals:
        _finals.discard(d)
        return True
    return False


def done_record(run_dir: Path, spec: StepSpec, record: dict) -> tuple[str, dict]:
    """The done marker a success gets (its path, as text, and record), remembered as the
    step's newest marker (its dependents' markers name it); nothing is written."""
    d, ran_spec, deps, generation, mid = succeeded(run_dir, spec, record.get("attempt"))
    rec = {"outcome": "succeeded", "spec": ran_spec, **record, "id": mid, "deps": deps, "generation": generation}
    return f"{d}/{DONE}", rec


def succeeded(run_dir: Path, spec: StepSpec, attempt) -> tuple[str, str, dict, int, str]:
    """What a success's marker says besides its attempt's figures (see done_record): the
    step's .fleet directory (as text), the definition that ran, its deps' marker ids, the
    generation and a new marker id, remembered as the step's newest marker."""
    d = _fleet_dir(run_dir, spec.id)
    ran = _ending(d, attempt)
    deps = ran.deps if ran is not None else _deps.get(d, spec.deps)
    mid = _new_id()
    ids = {dep: _marker_of(run_dir, dep) for dep in deps} if deps else {}
    _seen[d] = mid
    if ran is None:
        return d, spec_hash(spec), ids, 1, mid
    return d, ran.spec, ids, ran.generation, mid


_ids: list[str] = []  # marker ids drawn ahead: one getrandom for 512 successes, not one each
os.register_at_fork(after_in_child=_ids.clear)  # (a child never writes one its parent may)


def _new_id() -> str:
    """A new marker id: 8 random bytes, in hex (as os.urandom(8).hex())."""
    try:
        return _ids.pop()
    except IndexError:  # (drawn again; a pop is atomic, should another thread draw too)
        raw = os.urandom(8 * 512).hex()
        _ids.extend(raw[i:i + 16] for i in range(0, len(raw), 16))
        return _ids.pop()


def flying(run_dir: Path, spec: StepSpec, attempt: int, generation: int, d: str | None = None,
           h: str | None = None) -> None:
    """An attempt starts without a claim (this fleet holds the run directory's lease:
    fleet.control.lease): remember what runs, for its marker, as a claim would (d: the
    step's key, _fleet_dir's, if known; h: spec_hash(spec), if known)."""
    d = _fleet_dir(run_dir, spec.id) if d is None else d
    # (an _Attempt made as its tuple: NamedTuple's __new__ is a Python call)
    _flight.setdefault(d, []).append(_tuple(_Attempt, (next(_order), attempt, generation,
                                                       spec_hash(spec) if h is None else h,
                                                       _deps.get(d, spec.deps))))


def take(run_dir: Path, step_id: str, fleet: str, attempt: int, generation: int) -> bool:
    """Claim a step already running here (the run directory became shared while it ran):
    False if another fleet holds its claim."""
    d = _fleet_dir(run_dir, step_id)
    makedirs(d)
    return _write_new(f"{d}/{CLAIM}", {"fleet": fleet, "host": socket.gethostname(), "pid": os.getpid(),
                                  "attempt": attempt, "at": time.time(), "generation": generation, "base": 0})


# --- several fleets on one run directory -------------------------------------------------
#
# Starting a step takes its claim, created atomically (O_EXCL) and naming the fleet,
# host, pid, attempt and a generation. A claim is refreshed (its mtime) while the step
# runs. A claim whose holder is provably dead (same host, no such pid) or that is stale
# (seen unchanged long enough on this fleet's own clock: fleet.wire.records.claim_stale)
# may be adopted: the adopter first creates
# `adopt.<generation>` with O_EXCL, so exactly one fleet adopts each generation, then
# replaces the claim with generation + 1. Every attempt leaves a record (attempt.*.json),
# so the number of attempts across all fleets is known, and audits can count successes.




def _write_new(path: Path | str, data: dict) -> bool:
    """Create path with data, only if it does not exist (atomic on POSIX filesystems)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, ownfiles.MODE)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    return True


def _replace(path: Path | str, data: dict) -> None:
    """Write aside, then rename: readers see the old record or the new one, whole."""
    p = os.fspath(path)
    head, name = os.path.split(p)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    with ownfiles.open(tmp, "w") as f:
        f.write(json.dumps(data))
    os.replace(tmp, p)


class Claim:
    """The outcome of trying to claim a step for one attempt."""

    OURS = "ours"          # we hold it: start the step
    ELSEWHERE = "elsewhere"  # another live fleet holds it
    DONE = "done"          # a marker says it already succeeded
    STOPPED = "stopped"    # attempts across every fleet reached the limit

    def __init__(self, kind: str, detail: str = "", adopted: dict | None = None):
        self.kind, self.detail, self.adopted = kind, detail, adopted


def claim(run_dir: Path, spec: StepSpec, fleet: str, attempt: int, stale_after: float,
          max_attempts: int, generation: int = 1, live: Callable[[str], bool] | None = None) -> Claim:
    """Try to take a step for `fleet` (see the comment above for the protocol).

    Completion markers are looked at once the claim is won (a step found done at
    submission never gets here), which is when it matters: only a marker that appeared
    since this fleet's submission looked (fleet.control.store.submitted) makes it DONE,
    so a step submitted to run again (forced, or its deps ran anew) is not skipped.
    Attempts count toward `max_attempts` across fleets (those fleet.core.attempts says),
    from the generation (a later submission to the same fleet that ran the step anew)
    that started them. `live`: whether a fleet is live on the run directory (another
    fleet's claim is free at once when its fleet is not: fleet.wire.records.claim_stale)."""
    d = _fleet_dir(run_dir, spec.id)
    makedirs(d)
    record = {"fleet": fleet, "host": socket.gethostname(), "pid": os.getpid(), "attempt": attempt,
              "at": time.time()}
    path = f"{d}/{CLAIM}"
    adopted = None
    # A new generation's first attempt counts from the attempts that count now.
    n = tally.on_disk(d, spec) if max_attempts and generation > 1 and attempt == 1 else None
    current = read_claim(run_dir, spec.id)
    if current is not None and current[0].get("fleet") == fleet:  # our own retry, or a new generation
        base = n if n is not None else int(current[0].get("base", 0))
        _replace(path, {**current[0], **record, "base": base})
        return _ours(run_dir, spec, fleet, attempt, generation, max_attempts, base, n, None)
    if current is not None:
        held, age = current.rec, current.age
        dead = holder_dead(held)
        if not dead and not claim_stale(current, stale_after, live):
            return Claim(Claim.ELSEWHERE, f"claimed by fleet {held.get('fleet')} on {held.get('host')} "
                                          f"({age:.0f} s ago)")
        gen = int(held.get("generation", 1))
        if not _write_new(f"{d}/adopt.{gen}", {**record, "from": held, "stale_s": age, "dead": dead}):
            return Claim(Claim.ELSEWHERE, f"being adopted by another fleet (generation {gen})")
        base = int(held.get("base", 0))
        _replace(path, {**record, "generation": gen + 1, "base": base})
        adopted = held
    else:
        base = n or 0
        if not _write_new(path, {**record, "generation": 1, "base": base}):
            return Claim(Claim.ELSEWHERE, "claimed by another fleet a moment ago")
    # Won the claim: the step may have finished just before (marker first, then the
    # claim is released), so look again before running it twice.
    if done_since(run_dir, spec):
        release(run_dir, spec.id, fleet, keep_later=False)
        return Claim(Claim.DONE)
    return _ours(run_dir, spec, fleet, attempt, generation, max_attempts, base, n, adopted)


def done_since(run_dir: Path, spec: StepSpec) -> bool:
    """A marker that appeared since this fleet's submission looked (one read) and says
    what this fleet would run (done_here): the step finished in another fleet, so it
    is not run again here. Its id is noted then (found())."""
    rec = read_done(run_dir, spec.id)
    d = _fleet_dir(run_dir, spec.id)
    if rec is None or _seen.get(d, "") == marker_id(rec) or not done_here(run_dir, spec, rec):
        return False
    _seen[d] = marker_id(rec)
    return True


def done_here(run_dir: Path, spec: StepSpec, rec: dict | None) -> bool:
    """Whether a marker another fleet wrote says what this fleet would run: this
    definition, against the markers its deps have here (those it ran, or found done:
    found()), as a submission counts a step done (make's rule: before 2026-12-06 the
    definition alone counted, so a fleet that ran a step's deps anew could skip it
    for a success against the old ones). A step submitted here without its deps
    (another shard's, or one --only settles) is not this fleet's to judge by them."""
    if rec is None or rec.get("outcome") != "succeeded":
        return False
    deps = _deps.get(_fleet_dir(run_dir, spec.id), spec.deps)
    if not deps:
        return succeeded_as(rec, spec)
    return records.done_against(rec, spec, {dep: _marker_of(run_dir, dep) for dep in deps})


def found(run_dir: Path, step_id: str, rec: dict) -> None:
    """Another fleet's success of a step, taken here (it is skipped): its marker id is
    the one this fleet's markers of its dependents name, and judge it by (done_here)."""
    _seen[_fleet_dir(run_dir, step_id)] = marker_id(rec)


# The steps whose directory existed when a submission scanned for markers: only those
# can have records of older fleets (their attempts: fleet.control.tally). _per_step:
# steps claimed per step while alone (a claim file on disk at submission, or not looked at).
_existed: set[str] = set()
_per_step: set[str] = set()


def existed(run_dir: Path, step_id: str) -> bool:
    """True when the step's directory existed when it was submitted here: it may hold
    records of earlier fleets (a claim among them)."""
    return _fleet_dir(run_dir, step_id) in _existed


def per_step(run_dir: Path, step_id: str) -> bool:
    """True when the step is claimed per step while this fleet holds the lease alone: a
    claim file was in its directory when it was submitted (a live holder's is honoured,
    a dead or stale one's adopted: claim()), or its directory was not looked at."""
    return bool(_per_step) and _fleet_dir(run_dir, step_id) in _per_step  # (none: no path made per start)


def _ours(run_dir: Path, spec: StepSpec, fleet: str, attempt: int, generation: int, max_attempts: int,
          base: int, n: int | None, adopted: dict | None) -> Claim:
    """The claim is ours: stop here if the attempts recorded since its base reached the
    limit, else remember what runs (for its marker) and run it."""
    d = _fleet_dir(run_dir, spec.id)
    if max_attempts:
        n = tally.on_disk(d, spec) if n is None else n
        if n - base >= max_attempts:
            release(run_dir, spec.id, fleet, keep_later=False)
            mine = min(n - base, tally.on_disk(d, spec, by_fleet_step=True))  # (its reason says where they came from)
            return Claim(Claim.STOPPED, attempts.stopped(n - base, max_attempts, mine))
    _flight.setdefault(d, []).append(_Attempt(next(_order), attempt, generation, spec_hash(spec),
                                              _deps.get(d, spec.deps)))
    return Claim(Claim.OURS, adopted=adopted)


def refresh(run_dir: Path, step_id: str, fleet: str) -> None:
    """Keep our claim fresh (only ours: one adopted by another fleet is theirs now)."""
    cur = read_claim(run_dir, step_id)
    if cur is None or cur[0].get("fleet") != fleet:
        return
    try:
        os.utime(f"{_fleet_dir(run_dir, step_id)}/{CLAIM}")
    except OSError:
        pass


def release(run_dir: Path, step_id: str, fleet: str, keep_later: bool = True) -> bool:
    """Drop our claim (after the marker or the final failure record is written), unless
    (keep_later) a later attempt of ours holds it now: a changed running step's next
    definition is claimed before the end of the old one is recorded. False if kept."""
    d = _fleet_dir(run_dir, step_id)
    ended = _ended.get(d)
    if keep_later and ended is not None and any(a.seq > ended.seq for a in _flight.get(d, ())):
        return False
    path = f"{d}/{CLAIM}"
    cur = read_claim(run_dir, step_id)
    if cur is not None and cur[0].get("fleet") == fleet:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return True


def record_attempt(run_dir: Path, step_id: str, fleet: str, attempt: int, record: dict) -> None:
    """One file per attempt of every fleet: .fleet/attempt.<fleet>.<attempt>.json, or for
    a later generation in the same fleet (attempts count from 1 again)
    .fleet/attempt.<fleet>.g<generation>.<attempt>.json, so no attempt record is lost."""
    path, rec = attempt_record(run_dir, step_id, fleet, attempt, record)
    makedirs(os.path.dirname(path))
    _replace(path, rec)


def attempt_record(run_dir: Path, step_id: str, fleet: str, attempt: int, record: dict) -> tuple[str, dict]:
    """An attempt's record and the file it would have, as text (see record_attempt); nothing is written."""
    d = _fleet_dir(run_dir, step_id)
    ran = _ending(d, attempt) if record.get("outcome") != "succeeded" else _current(d, attempt)
    gen = ran.generation if ran is not None else 1
    name = f"{ATTEMPT}{fleet}.{attempt}.json" if gen == 1 else f"{ATTEMPT}{fleet}.g{gen}.{attempt}.json"
    rec = {"fleet": fleet, "attempt": attempt, "generation": gen, **record}
    if rec.get("spec") is None and ran is not None:  # (a lost attempt's): --max-attempts counts it for what ran
        rec["spec"] = ran.spec
    return f"{d}/{name}", rec


def _current(d: str, attempt: int) -> _Attempt | None:
    """The in-flight attempt of this number that ends now, left for its marker to take."""
    a = next((a for a in _flight.get(d, ()) if a.attempt == attempt), None)
    return a if a is not None else (_ended.get(d) if _ended.get(d) and _ended[d].attempt == attempt else None)


def write_final(run_dir: Path, spec: StepSpec, outcome: str, record: dict) -> None:
    """A step that ended without success and will not be retried by this fleet (after
    running: its completion marker, if an earlier run left one, goes)."""
    path, rec, drop = final_record(run_dir, spec, outcome, record)
    makedirs(os.path.dirname(path))
    _replace(path, rec)
    if drop:
        unlink_done(os.path.dirname(path), drop)


def final_record(run_dir: Path, spec: StepSpec, outcome: str, record: dict) -> tuple[str, dict, str | bool]:
    """A final outcome's file (as text) and record, and the success it replaces: the id of
    the marker that must then go (False: none); nothing is written."""
    d = _fleet_dir(run_dir, spec.id)
    ran = _ending(d, record["attempt"]) if "attempt" in record else None
    rec = {"outcome": outcome, "spec": ran.spec if ran is not None else spec_hash(spec), **record}
    # The step ran again (forced, or against changed deps) and failed: this outcome replaces
    # its earlier success, the one this fleet knew (at its submission, or its own since),
    # which must no longer make a rerun skip it. Another fleet's marker written meanwhile
    # (it took the step from this fleet, found gone: fleet.control.foundgone) stays.
    drop: str | bool = "attempt" in record and outcome in ("failed", "terminated", "out_of_memory", "lost", "broken")
    if drop:
        drop = _seen.get(d) or False
        _seen[d] = None
    _finals.add(d)  # (a later success here removes it)
    return f"{d}/{FINAL}", rec, drop
