"""Writing the per-step records on the shared filesystem: completion markers that make
a rerun skip what already succeeded, claims, attempt records and final outcomes. Their
layout and how to read them are fleet.wire.records, shared with every reader."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from fleet.core.suite import StepSpec
from fleet.wire.records import (ATTEMPT, CLAIM, DONE, FINAL, fleet_dir as _fleet_dir, holder_dead, is_done,
                                read_claim,
                                spec_hash)


_made: set[Path] = set()


def makedirs(path: Path) -> None:
    """mkdir -p, once per directory per process: on a parallel filesystem every
    metadata call counts, and the coordinator makes several per step."""
    if path not in _made:
        path.mkdir(parents=True, exist_ok=True)
        _made.add(path)


def write_done(run_dir: Path, spec: StepSpec, record: dict) -> None:
    """Record success atomically (write aside, then rename)."""
    makedirs(_fleet_dir(run_dir, spec.id))
    _replace(_fleet_dir(run_dir, spec.id) / DONE, {"outcome": "succeeded", "spec": spec_hash(spec), **record})


def clear_done(run_dir: Path, spec: StepSpec) -> None:
    """Forget a step's outcome (fleet run --force)."""
    for path in (_fleet_dir(run_dir, spec.id) / DONE, _fleet_dir(run_dir, spec.id) / FINAL):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


# --- several fleets on one run directory -------------------------------------------------
#
# Starting a step takes its claim, created atomically (O_EXCL) and naming the fleet,
# host, pid, attempt and a generation. A claim is refreshed (its mtime) while the step
# runs. A claim whose holder is provably dead (same host, no such pid) or that was not
# refreshed for `stale_after` seconds may be adopted: the adopter first creates
# `adopt.<generation>` with O_EXCL, so exactly one fleet adopts each generation, then
# replaces the claim with generation + 1. Every attempt leaves a record (attempt.*.json),
# so the number of attempts across all fleets is known, and audits can count successes.




def _write_new(path: Path, data: dict) -> bool:
    """Create path with data, only if it does not exist (atomic on POSIX filesystems)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    return True


def _replace(path: Path, data: dict) -> None:
    """Write aside, then rename: readers see the old record or the new one, whole."""
    p = os.fspath(path)
    head, name = os.path.split(p)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
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
          max_attempts: int) -> Claim:
    """Try to take a step for `fleet` (see the comment above for the protocol).

    Completion markers are looked at once the claim is won (a step found done at
    submission never gets here), which is when it matters."""
    d = _fleet_dir(run_dir, spec.id)
    makedirs(d)
    record = {"fleet": fleet, "host": socket.gethostname(), "pid": os.getpid(), "attempt": attempt,
              "at": time.time()}
    path = d / CLAIM
    adopted = None
    current = read_claim(run_dir, spec.id)
    if current is not None:
        held, age = current
        if held.get("fleet") == fleet:
            _replace(path, {**held, **record})  # our own retry
            return _check_attempts(run_dir, spec, max_attempts, fleet)
        dead = holder_dead(held)
        if not dead and age < stale_after:
            return Claim(Claim.ELSEWHERE, f"claimed by fleet {held.get('fleet')} on {held.get('host')} "
                                          f"({age:.0f} s ago)")
        gen = int(held.get("generation", 1))
        if not _write_new(d / f"adopt.{gen}", {**record, "from": held, "stale_s": age, "dead": dead}):
            return Claim(Claim.ELSEWHERE, f"being adopted by another fleet (generation {gen})")
        _replace(path, {**record, "generation": gen + 1})
        adopted = held
    elif not _write_new(path, {**record, "generation": 1}):
        return Claim(Claim.ELSEWHERE, "claimed by another fleet a moment ago")
    # Won the claim: the step may have finished just before (marker first, then the
    # claim is released), so look again before running it twice.
    if is_done(run_dir, spec):
        release(run_dir, spec.id, fleet)
        return Claim(Claim.DONE)
    c = _check_attempts(run_dir, spec, max_attempts, fleet)
    c.adopted = adopted
    return c


def _check_attempts(run_dir: Path, spec: StepSpec, max_attempts: int, fleet: str) -> Claim:
    if not max_attempts:
        return Claim(Claim.OURS)
    try:
        n = sum(1 for name in os.listdir(_fleet_dir(run_dir, spec.id)) if name.startswith(ATTEMPT))
    except FileNotFoundError:
        n = 0
    if n >= max_attempts:
        release(run_dir, spec.id, fleet)
        return Claim(Claim.STOPPED, f"{n} attempts recorded (limit {max_attempts})")
    return Claim(Claim.OURS)


def refresh(run_dir: Path, step_id: str, fleet: str) -> None:
    """Keep our claim fresh (only ours: one adopted by another fleet is theirs now)."""
    cur = read_claim(run_dir, step_id)
    if cur is None or cur[0].get("fleet") != fleet:
        return
    try:
        os.utime(_fleet_dir(run_dir, step_id) / CLAIM)
    except OSError:
        pass


def release(run_dir: Path, step_id: str, fleet: str) -> None:
    """Drop our claim (after the marker or the final failure record is written)."""
    path = _fleet_dir(run_dir, step_id) / CLAIM
    cur = read_claim(run_dir, step_id)
    if cur is not None and cur[0].get("fleet") == fleet:
        try:
            path.unlink()
        except FileNotFoundError:
            pass




def record_attempt(run_dir: Path, step_id: str, fleet: str, attempt: int, record: dict) -> None:
    """One file per attempt of every fleet: .fleet/attempt.<fleet>.<attempt>.json."""
    d = _fleet_dir(run_dir, step_id)
    makedirs(d)
    _replace(d / f"{ATTEMPT}{fleet}.{attempt}.json", {"fleet": fleet, "attempt": attempt, **record})


def write_final(run_dir: Path, spec: StepSpec, outcome: str, record: dict) -> None:
    """A step that ended without success and will not be retried by this fleet."""
    d = _fleet_dir(run_dir, spec.id)
    makedirs(d)
    _replace(d / FINAL, {"outcome": outcome, "spec": spec_hash(spec), **record})
