"""The copies an installed fleet carries of files at the repository's top: the demo suite
(examples/) and the job scripts (jobscripts/), which setup.py copies into the built
package as fleet/examples/ and fleet/jobscripts/. A checkout (or an editable install) has
them at its top and none in the package; an install has no top, only these."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the fleet package's directory
KINDS = ("examples", "jobscripts")


def installed_copy(name: str | Path) -> Path | None:
    """The installed copy of the file a user named as the README does
    (`examples/demo.toml`, `jobscripts/slurm.sbatch`, or the bare file name), or None
    (no such file there, or not an installed fleet)."""
    p = Path(name)
    if p.is_absolute():
        return None
    kinds = KINDS if len(p.parts) == 1 else (p.parts[0],) if len(p.parts) == 2 and p.parts[0] in KINDS else ()
    for kind in kinds:
        if (PACKAGE / kind / p.name).is_file():
            return PACKAGE / kind / p.name
    return None


def hint(name: str | Path) -> str:
    """What to add to "no such file" for `name`: where the installed copy is and how to
    take it ("" if there is none). A copy is taken, not run in place: a suite's run_dir is
    relative to its file, and site-packages is no place for a run."""
    copy = installed_copy(name)
    if copy is None:
        return ""
    return f" (this installed fleet carries a copy: cp -r {copy.parent} . to have {copy.parent.name}/{copy.name} here)"
