"""The head of a suite file: its [suite] table (name, run_dir, preload, max_steps) and
its [defaults] table, each default checked as the step field it defaults. (The steps
are fleet.core.suite's.)"""

from __future__ import annotations

import re
from pathlib import Path

from fleet.core import spelling
from fleet.core.problems import Problem
from fleet.core.units import CHECKS, STEP_FIELDS, SUITE_FIELDS, check_int, each_wrong

SUITE_NAME = re.compile(r"^[A-Za-z0-9._-]+\Z")  # one path segment: the default run dir is runs/<name>
MAX_STEPS = 1_000_000  # steps one suite may declare unless its [suite] max_steps says otherwise


def suite_table(raw: dict, path: Path, problems: list[Problem]) -> tuple[str, str, list, int]:
    """The [suite] table: name, run_dir (as written), preload and max_steps, defaults in
    place of bad values."""
    fname = str(path)
    head = raw.get("suite", {})
    if not isinstance(head, dict):
        problems.append(Problem(fname, None, "suite", "expected a [suite] table"))
        head = {}
    for key in head:
        if key not in SUITE_FIELDS:
            problems.append(Problem(fname, None, f"suite.{key}", "unknown field" + (
                spelling.hint(key, SUITE_FIELDS) or " (expected name, run_dir, preload, max_steps)")))
    name = head.get("name", path.stem)
    if not isinstance(name, str) or not SUITE_NAME.match(name) or name in (".", ".."):
        if "name" in head:
            problems.append(Problem(fname, None, "suite.name", "expected a name of ASCII letters, digits and . _ -"
                                    f" (one path segment: the default run dir is runs/<name>), got {name!r}"))
        else:  # (before 2026-12-06 this too named the field suite.name, which the file did not have)
            problems.append(Problem(fname, None, None, _unnamed(name)))
        name = "suite"
    run_dir_raw = head.get("run_dir", f"runs/{name}")
    if not isinstance(run_dir_raw, str) or not run_dir_raw or "\0" in run_dir_raw:
        nul = " without a NUL character" if isinstance(run_dir_raw, str) and run_dir_raw else ""  # (no file name has)
        problems.append(Problem(fname, None, "suite.run_dir", f"expected a path{nul}, got {run_dir_raw!r}"))
        run_dir_raw = f"runs/{name}"
    preload = head.get("preload", [])
    if not isinstance(preload, list) or not all(isinstance(m, str) and m for m in preload):
        problems.append(Problem(fname, None, "suite.preload", f"expected a list of module names, got {preload!r}"))
        preload = []
    for m in [m for m in preload if not all(part.isidentifier() for part in m.split("."))]:
        # (said without importing anything: no module can have that name)
        problems.append(Problem(fname, None, "suite.preload", f"{m!r} is not a module name (dotted identifiers, "
                                                               "e.g. 'numpy' or 'scipy.linalg')"))
        preload = [x for x in preload if x != m]
    limit = head.get("max_steps", MAX_STEPS)
    try:
        check_int(1)(limit)
    except ValueError as e:
        problems.append(Problem(fname, None, "suite.max_steps", str(e)))
        limit = MAX_STEPS
    return name, run_dir_raw, preload, limit


def _unnamed(stem: str) -> str:
    """Why a suite with no [suite] name cannot take its file's name, and what to write."""
    fit = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("_") or "suite"
    fit = "suite" if fit in (".", "..") else fit
    return (f"the suite has no [suite] name, so it takes the file's name, {stem!r}, which is not a suite name "
            "(ASCII letters, digits and . _ -: one path segment, the default run dir is runs/<name>): "
            f'give it one, e.g. [suite] name = "{fit}"')


def defaults_table(raw: dict, fname: str, problems: list[Problem]) -> dict:
    """The [defaults] table, each value checked as the step field it defaults: those
    that check out. A bad one is said once, as defaults.<field>, not again for every
    step it would have gone to (before 2026-12-06 it was, once a step)."""
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append(Problem(fname, None, "defaults", "expected a [defaults] table"))
        return {}
    good = {}
    for key, value in defaults.items():
        if key == "id":
            problems.append(Problem(fname, None, "defaults.id", "a step id cannot have a default"))
        elif key not in STEP_FIELDS:
            problems.append(Problem(fname, None, f"defaults.{key}",
                                    "unknown field" + spelling.hint(key, STEP_FIELDS, spelling.HABITS)))
        else:
            try:
                CHECKS[key](value)
            except ValueError as e:
                problems += [Problem(fname, None, f"defaults.{key}", m) for m in each_wrong(e)]
            else:
                good[key] = value
    return good
