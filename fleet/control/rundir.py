"""Which run directory a command means when none is given: one rule for `fleet up`,
`run`, `status`, `down` and the Python API (see docs/user-guide.md, "Run directories")."""

from __future__ import annotations

import os
from pathlib import Path

from fleet.control import jobfleets


def default() -> Path:
    """$FLEET_RUN_DIR, else the current directory."""
    return Path(os.environ.get("FLEET_RUN_DIR") or ".").resolve()


def for_suite(given: str | None, suite_run_dir: str, any_job: bool = False) -> tuple[Path, bool]:
    """`fleet run`'s run directory: the one given, else $FLEET_RUN_DIR, else a fleet up
    in the current directory (inside a batch job, this job's unless any_job:
    fleet.control.jobfleets), else the suite's own run_dir; and whether it is a fleet up
    in the current directory that the suite's run_dir did not name (FleetError if the
    current directory's connection file cannot be read)."""
    if given or os.environ.get("FLEET_RUN_DIR"):
        return Path(given or os.environ["FLEET_RUN_DIR"]).resolve(), False
    here = Path.cwd().resolve()
    if jobfleets.to_use(here, any_job)[0] is not None:
        return here, here != Path(suite_run_dir).resolve()
    return Path(suite_run_dir).resolve(), False
