"""Which run directory a command means when none is given: one rule for `fleet up`,
`run`, `status`, `down` and the Python API (see docs/user-guide.md, "Run directories")."""

from __future__ import annotations

import os
from pathlib import Path


def default() -> Path:
    """$FLEET_RUN_DIR, else the current directory."""
    return Path(os.environ.get("FLEET_RUN_DIR") or ".").resolve()


def for_suite(given: str | None, suite_run_dir: str) -> tuple[Path, bool]:
    """`fleet run`'s run directory: the one given, else $FLEET_RUN_DIR, else the current
    directory if a fleet is up there, else the suite's own run_dir; and whether it is a
    fleet up in the current directory that the suite's run_dir did not name (FleetError
    if the current directory's connection file cannot be read). Inside a batch job the
    fleet up may be another job's: `fleet run` then starts this job's own beside it, in
    the current directory too (fleet.control.jobfleets; before 2026-12-07 such a run went
    to the suite's run_dir, unsaid)."""
    from fleet.control.client import find
    if given or os.environ.get("FLEET_RUN_DIR"):
        return Path(given or os.environ["FLEET_RUN_DIR"]).resolve(), False
    here = Path.cwd().resolve()
    if find(here) is not None:
        return here, here != Path(suite_run_dir).resolve()
    return Path(suite_run_dir).resolve(), False
