"""The run directory's per-step records, as every fleet and every reader sees them:
where a step's log and .fleet/ records live, and how to read its completion marker,
claim, attempt records and final outcome. The coordinator writes them
(fleet.control.store); `fleet audit` and other fleets read them through here."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
from pathlib import Path

from fleet.core.suite import StepSpec

CLAIM = "claim"
ATTEMPT = "attempt."
DONE = "done.json"
FINAL = "final.json"


def step_dir(run_dir: Path, step_id: str) -> Path:
    """steps/<id>/ under the run directory: the step's log and its .fleet/ records."""
    return run_dir / "steps" / step_id


def log_path(run_dir: Path, step_id: str) -> Path:
    return step_dir(run_dir, step_id) / "log"


def workdir(run_dir: Path, spec: StepSpec) -> Path:
    return Path(spec.workdir) if os.path.isabs(spec.workdir) else run_dir / spec.workdir


@functools.lru_cache(maxsize=1 << 16)
def fleet_dir(run_dir: Path, step_id: str) -> Path:
    """steps/<id>/.fleet/ (asked for several times per step by the coordinator: built once)."""
    return step_dir(run_dir, step_id) / ".fleet"


_hashes: dict[int, tuple[StepSpec, str]] = {}


def spec_hash(spec: StepSpec) -> str:
    """A digest of what the step does: a changed step is not skipped on rerun."""
    hit = _hashes.get(id(spec))
    if hit is not None and hit[0] is spec:  # computed once per step, not per marker
        return hit[1]
    h = hashlib.sha256(repr(spec.identity()).encode()).hexdigest()[:16]
    _hashes[id(spec)] = (spec, h)
    return h


def read_done(run_dir: Path, step_id: str) -> dict | None:
    """The step's completion marker, or None (one read)."""
    try:
        with open(fleet_dir(run_dir, step_id) / DONE) as f:
            rec = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def succeeded_as(rec: dict | None, spec: StepSpec) -> bool:
    """True when the marker says this same definition succeeded."""
    return rec is not None and rec.get("outcome") == "succeeded" and rec.get("spec") == spec_hash(spec)


def is_done(run_dir: Path, spec: StepSpec) -> bool:
    """True when a marker says this same step already succeeded."""
    return succeeded_as(read_done(run_dir, spec.id), spec)


def marker_id(rec: dict) -> str:
    """Which success a marker records: its `id`; for a 0.1 marker, which has none, one
    made of what it does record (the same at every read)."""
    mid = rec.get("id")
    if isinstance(mid, str):
        return mid
    return f"0.1:{rec.get('fleet')}:{rec.get('attempt')}:{rec.get('ended_at')}"


def done_against(rec: dict | None, spec: StepSpec, dep_ids: dict[str, str | None]) -> bool:
    """True when the marker says this same definition succeeded against these markers
    of its deps (dep id -> marker_id). A 0.1 marker does not say what it ran against:
    it counts when the definition matches (the caller checks its deps are done)."""
    if not succeeded_as(rec, spec):
        return False
    ran = rec.get("deps")
    return ran is None or ran == dep_ids


def has_done(run_dir: Path, step_id: str) -> bool:
    """True when a step has a completion marker of any definition."""
    return (fleet_dir(run_dir, step_id) / DONE).exists()


def read_claim(run_dir: Path, step_id: str) -> tuple[dict, float] | None:
    """The claim's record and its age in seconds, or None."""
    path = os.path.join(fleet_dir(run_dir, step_id), CLAIM)
    try:
        with open(path) as f:
            age = time.time() - os.fstat(f.fileno()).st_mtime
            return json.loads(f.read()), age
    except (OSError, ValueError):
        return None


def holder_dead(claim: dict) -> bool:
    """True when the claim's fleet is provably gone: same host, no such process."""
    if claim.get("host") != socket.gethostname():
        return False
    pid = claim.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def attempts(run_dir: Path, step_id: str) -> list[dict]:
    """Every attempt any fleet recorded for the step."""
    d = fleet_dir(run_dir, step_id)
    out = []
    for p in sorted(d.glob(f"{ATTEMPT}*.json")) if d.is_dir() else ():
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def read_final(run_dir: Path, step_id: str) -> dict | None:
    try:
        return json.loads((fleet_dir(run_dir, step_id) / FINAL).read_text())
    except (OSError, ValueError):
        return None
