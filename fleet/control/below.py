"""Fleets up below a directory where none is. `fleet run suite.toml` with no fleet up
embeds one in the suite's run_dir, by default runs/<name> beside the suite file; so
`fleet status` and `fleet down` in the suite's directory, which look only there, found
nothing (before 2026-12-06 `fleet down` then said "no fleet was up" and exited 0 while the
run went on). They now look one level further, in runs/*/, and say where fleets are.

What it costs, only when no fleet is up where asked: one listing of runs/ and one of each
directory in it (up to LOOKED_AT of them), nothing deeper. A suite whose run_dir is
elsewhere is not looked for (reading every suite file in the directory is not cheap)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

LOOKED_AT = 256  # directories of runs/ looked into; a runs/ with more is a store of old runs


def fleets_below(run_dir: Path) -> list[tuple[Path, bool]]:
    """(run directory, embedded: a `fleet run`'s own fleet) of each live fleet in
    run_dir/runs/*/, in name order."""
    from fleet.control.client import FleetError, live
    try:
        with os.scandir(run_dir / "runs") as it:
            dirs = sorted(e.path for e in it if e.is_dir(follow_symlinks=False))[:LOOKED_AT]
    except OSError:  # (no runs/, or not one this user can list)
        return []
    out = []
    for d in map(Path, dirs):
        try:
            if not any(n.startswith("fleet") and n.endswith(".json") for n in os.listdir(d)):
                continue
            fleets = live(d, exposed=[])  # (a stale file is removed, as status and down there would)
        except (OSError, FleetError):
            continue
        if fleets:
            out.append((d, all(path.name != "fleet.json" for path, _ in fleets)))
    return out


def where(run_dir: Path, command: str) -> tuple[str, int]:
    """What to add to "no fleet is up in run_dir" (starting "; ") and how many fleets are
    up below it: where they are and the `fleet COMMAND --run-dir D` that reaches the first."""
    found = fleets_below(run_dir)
    if not found:
        return "", 0
    here = Path.cwd().resolve()
    shown = [os.path.relpath(d, here) if d.is_relative_to(here) else str(d) for d, _ in found]
    whose = "a `fleet run`'s embedded fleet is" if found[0][1] else "a fleet is"
    what = (f"{whose} up in {shown[0]}" if len(found) == 1 else
            f"fleets are up in {', '.join(shown)}")
    return f"; {what}: fleet {command} --run-dir {shlex.quote(shown[0])}", len(found)
