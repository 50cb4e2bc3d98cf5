"""Per-step records on the shared filesystem: where a step's log and markers live,
and completion markers that make a rerun skip what already succeeded."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .suite import StepSpec


def step_dir(run_dir: Path, step_id: str) -> Path:
    """steps/<id>/ under the run directory: the step's log and its .fleet/ records."""
    return run_dir / "steps" / step_id


def log_path(run_dir: Path, step_id: str) -> Path:
    return step_dir(run_dir, step_id) / "log"


def workdir(run_dir: Path, spec: StepSpec) -> Path:
    return Path(spec.workdir) if os.path.isabs(spec.workdir) else run_dir / spec.workdir


def spec_hash(spec: StepSpec) -> str:
    """A digest of what the step does: a changed step is not skipped on rerun."""
    return hashlib.sha256(repr(spec.identity()).encode()).hexdigest()[:16]


def _marker(run_dir: Path, step_id: str) -> Path:
    return step_dir(run_dir, step_id) / ".fleet" / "done.json"


def write_done(run_dir: Path, spec: StepSpec, record: dict) -> None:
    """Record success atomically (write aside, then rename)."""
    path = _marker(run_dir, spec.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".done.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"outcome": "succeeded", "spec": spec_hash(spec), **record}))
    os.replace(tmp, path)


def is_done(run_dir: Path, spec: StepSpec) -> bool:
    """True when a marker says this same step already succeeded."""
    try:
        rec = json.loads(_marker(run_dir, spec.id).read_text())
    except (OSError, ValueError):
        return False
    return rec.get("outcome") == "succeeded" and rec.get("spec") == spec_hash(spec)


def clear_done(run_dir: Path, spec: StepSpec) -> None:
    try:
        _marker(run_dir, spec.id).unlink()
    except FileNotFoundError:
        pass
