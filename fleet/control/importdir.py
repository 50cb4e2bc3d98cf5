"""Where `fleet validate --imports` imports a suite's modules from: the directory the
fleet's agents started in, which their zygotes put first on sys.path.

The fleet is the one `fleet run SUITE` would submit to (fleet.control.rundir.for_suite:
$FLEET_RUN_DIR, else one up in the current directory, else one up in the suite's
run_dir), and its connection file records where it started (Connection.cwd). With none
up, `fleet run` would start a fleet where it runs: the current directory. Before
2026-12-06 the current directory was always taken, and a suite whose modules were only
in a fleet's directory was said to import when its steps could not. `fleet step` imports
a call step's module from the same directory, for its run directory's fleet (before
2026-12-06 from the current directory).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ImportDirectory:
    """The directory, and why it is the one (for the line validate prints)."""

    path: Path
    why: str

    def line(self) -> str:
        return f"imports checked from {self.path} ({self.why})"


def for_validate(suite_run_dir: Path | None) -> ImportDirectory:
    """The directory the agents of the fleet `fleet run` would use import from
    (suite_run_dir: the suite's, None if its head did not read)."""
    from fleet.control import rundir
    from fleet.control.client import FleetError
    here = target = Path.cwd()
    try:
        # (a suite whose head does not read has no run_dir to look in: only here)
        target, _ = rundir.for_suite(None, str(suite_run_dir or here))
    except FleetError as e:
        return ImportDirectory(here, f"this directory: the fleet in {target} cannot be asked: {e}")
    return of_fleet_in(target)


def of_fleet_in(target: Path) -> ImportDirectory:
    """The directory the agents of a fleet up in run directory `target` import from (a
    call step that `fleet step` runs imports from there too); this directory if none is
    up there (`fleet run` would start one here) or it does not say."""
    from fleet.control.client import FleetError, find
    here = Path.cwd()
    try:
        conn = find(target)
    except FleetError as e:
        return ImportDirectory(here, f"this directory: the fleet in {target} cannot be asked: {e}")
    if conn is None:
        return ImportDirectory(here, f"this directory: no fleet is up in {target}, and `fleet run` would start "
                                     "one in the directory it runs in")
    if not conn.cwd:
        return ImportDirectory(here, f"this directory: the fleet up in {target} does not record the directory it "
                                     "started in (started before 2026-12-06); its agents import from the one "
                                     "`fleet up` ran in")
    if not os.path.isdir(conn.cwd):
        return ImportDirectory(here, f"this directory: {conn.cwd}, where the fleet up in {target} started and "
                                     "its agents import from, is not a directory here")
    return ImportDirectory(Path(conn.cwd), f"where the fleet up in {target} started: its agents import from there")
