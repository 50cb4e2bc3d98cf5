"""Checking a suite (TOML text) into validated, frozen step specifications.

A suite is `[suite]` (name, run_dir, preload), `[defaults]` (any step field) and
`[[steps]]` tables in setup order. Every problem is collected and raised together
as a SuiteError; nothing is started before a suite reads cleanly. Reading the file
is fleet.control.checks.load_suite's: here is only text and tables.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from fleet.core.problems import Problem, SuiteError
from fleet.core.units import parse_memory

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STEP_ID = re.compile(r"^[A-Za-z0-9._/-]+\Z")  # \Z, not $: "$" also matches before a final newline
CALL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class StepSpec:
    """One step as the suite declares it, defaults applied and arrays expanded.

    `memory` None means "my proportional share of whichever node I land on".
    `order` is the setup order, the tie-breaker after priority.
    """

    id: str
    order: int
    call: str | None = None
    command: tuple[str, ...] | str | None = None
    args: Mapping[str, Any] = field(default_factory=dict, hash=False)
    task: str = ""
    cores: int = 1
    min_cores: int = 1
    gpus: int = 0
    memory: int | None = None
    span: bool = False
    mpi: bool = False
    ranks: int = 1
    min_ranks: int = 1
    threads: int = 1
    deps: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    workdir: str = ""
    priority: int = 3
    concurrent: bool = True
    retries: int = 0
    estimate: float | None = None
    source: str = ""

    @property
    def kind(self) -> str:
        return "call" if self.call is not None else "command"

    def identity(self) -> tuple:
        """Everything that defines what the step does (for shared-step checks and markers)."""
        return tuple((name, _freeze(getattr(self, name))) for name in _IDENTITY)


_IDENTITY = tuple(f.name for f in fields(StepSpec) if f.name not in ("order", "source"))


@dataclass(frozen=True)
class Suite:
    """A whole suite: where it came from, where it runs, what agents preload, its steps."""

    path: Path
    name: str
    run_dir: Path
    preload: tuple[str, ...]
    steps: tuple[StepSpec, ...]

    def step(self, step_id: str) -> StepSpec:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)


def _freeze(v: Any) -> Any:
    if isinstance(v, Mapping):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


# --- field checks: each takes the raw value and returns the typed one or raises ValueError

def _int(lo: int, hi: int | None = None):
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected an integer, got {v!r}")
        if v < lo or (hi is not None and v > hi):
            span = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
            raise ValueError(f"expected an integer {span}, got {v}")
        return v
    return check


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {v!r}")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


def _id(v: Any) -> str:
    v = _str(v)
    if not STEP_ID.match(v):
        raise ValueError(f"a step id uses only letters, digits and . _ - /, got {v!r}")
    return v


def _call(v: Any) -> str:
    v = _str(v)
    if not CALL.match(v):
        raise ValueError(f"expected \"package.module:function\", got {v!r}")
    return v


def _command(v: Any) -> tuple[str, ...] | str:
    if isinstance(v, str):
        if not v.strip():
            raise ValueError("the command is empty")
        return v
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        return tuple(v)
    raise ValueError(f"expected an argv list of strings or a shell string, got {v!r}")


def _strings(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"expected a list of strings, got {v!r}")
    return tuple(v)


def _table(v: Any) -> dict:
    if not isinstance(v, dict):
        raise ValueError(f"expected a table, got {v!r}")
    return v


def _estimate(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ValueError(f"expected a number of seconds >= 0, got {v!r}")
    return float(v)


def _relpath(v: Any) -> str:
    v = _str(v)
    if not v:
        raise ValueError("the path is empty")
    return v


def _paths(v: Any) -> tuple[str, ...]:
    return tuple(_relpath(x) for x in _strings(v))


CHECKS = {
    "id": _id, "task": _str, "call": _call, "command": _command, "args": _table,
    "cores": _int(1), "min_cores": _int(1), "gpus": _int(0), "memory": parse_memory,
    "span": _bool, "mpi": _bool, "ranks": _int(1), "min_ranks": _int(1), "threads": _int(1),
    "deps": _strings, "inputs": _paths, "outputs": _paths, "workdir": _relpath,
    "priority": _int(1, 5), "concurrent": _bool, "retries": _int(0), "estimate": _estimate,
    "array": _str,
}
STEP_FIELDS = frozenset(CHECKS)
SUITE_FIELDS = frozenset({"name", "run_dir", "preload"})


def parse_array(text: str) -> list[int]:
    """Indices from "0-99" or "0-3,7,9" (ranges inclusive, in the order written)."""
    out: list[int] = []
    seen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"expected indices such as \"0-99\" or \"0-3,7,9\", got {text!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"range {part!r} runs backwards")
        for i in range(lo, hi + 1):
            if i not in seen:
                seen.add(i)
                out.append(i)
    return out


def _substitute(v: Any, i: str) -> Any:
    if isinstance(v, str):
        return v.replace("{i}", i)
    if isinstance(v, list):
        return [_substitute(x, i) for x in v]
    if isinstance(v, dict):
        return {k: _substitute(x, i) for k, x in v.items()}
    return v


def suite_from_toml(text: str, path: str | Path, resolve: Callable[[Path], Path] | None = None) -> Suite:
    """Check a suite given as TOML text read from `path`; raise SuiteError listing
    every problem found. (Reading the file is the caller's: fleet.control.checks.)"""
    path = Path(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SuiteError([Problem(str(path), None, None, f"not valid TOML: {e}")]) from None
    return parse_suite(raw, path, resolve)


def parse_suite(raw: dict, path: Path, resolve: Callable[[Path], Path] | None = None) -> Suite:
    """Check an already-parsed suite table from the file `path`.

    A relative run_dir is taken from the suite file's directory and passed through
    `resolve` (the caller gives Path.resolve, which asks the filesystem; without it the
    path is only joined). An absolute run_dir is kept as written."""
    fname = str(path)
    problems: list[Problem] = []
    for key in raw:
        if key not in ("suite", "defaults", "steps"):
            problems.append(Problem(fname, None, key, "unknown top-level table (expected [suite], [defaults], [[steps]])"))
    name, run_dir_raw, preload = _suite_table(raw, path, problems)
    defaults = _defaults(raw, fname, problems)
    tables = raw.get("steps", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        problems.append(Problem(fname, None, "steps", "expected [[steps]] tables"))
        tables = []
    steps: dict[str, StepSpec] = {}
    for n, table in enumerate(tables, 1):
        instances, unknown = _instances(table, n, defaults, fname, problems)
        for inst in instances:
            spec = _make_step(inst, len(steps), fname, problems)  # setup order: count of distinct steps
            if spec is None or unknown:
                continue
            prior = steps.get(spec.id)
            if prior is None:
                steps[spec.id] = spec
            elif prior.identity() != spec.identity():
                differ = [k for (k, a), (_, b) in zip(prior.identity(), spec.identity()) if a != b]
                problems.append(Problem(fname, spec.id, differ[0] if differ else "id",
                                        "defined twice differently (fields differ: " + ", ".join(differ) + ")"))
    if problems:
        raise SuiteError(problems)
    run_dir = Path(run_dir_raw)
    if not run_dir.is_absolute():
        run_dir = path.parent / run_dir
        if resolve is not None:
            run_dir = resolve(run_dir)
    return Suite(path=path, name=name, run_dir=run_dir, preload=tuple(preload),
                 steps=tuple(sorted(steps.values(), key=lambda s: s.order)))


def _suite_table(raw: dict, path: Path, problems: list[Problem]) -> tuple[str, str, list]:
    """The [suite] table: name, run_dir (as written) and preload, defaults in place of bad values."""
    fname = str(path)
    head = raw.get("suite", {})
    if not isinstance(head, dict):
        problems.append(Problem(fname, None, "suite", "expected a [suite] table"))
        head = {}
    for key in head:
        if key not in SUITE_FIELDS:
            problems.append(Problem(fname, None, f"suite.{key}", "unknown field (expected name, run_dir, preload)"))
    name = head.get("name", path.stem)
    if not isinstance(name, str) or not STEP_ID.match(name):
        problems.append(Problem(fname, None, "suite.name", f"expected a name of letters, digits and . _ - /, got {name!r}"))
        name = path.stem
    run_dir_raw = head.get("run_dir", f"runs/{name}")
    if not isinstance(run_dir_raw, str):
        problems.append(Problem(fname, None, "suite.run_dir", f"expected a path, got {run_dir_raw!r}"))
        run_dir_raw = f"runs/{name}"
    preload = head.get("preload", [])
    if not isinstance(preload, list) or not all(isinstance(m, str) and m for m in preload):
        problems.append(Problem(fname, None, "suite.preload", f"expected a list of module names, got {preload!r}"))
        preload = []
    return name, run_dir_raw, preload


def _defaults(raw: dict, fname: str, problems: list[Problem]) -> dict:
    """The [defaults] table, each value checked as the step field it defaults."""
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append(Problem(fname, None, "defaults", "expected a [defaults] table"))
        return {}
    for key, value in defaults.items():
        if key == "id":
            problems.append(Problem(fname, None, "defaults.id", "a step id cannot have a default"))
        elif key not in STEP_FIELDS:
            problems.append(Problem(fname, None, f"defaults.{key}", "unknown field"))
        else:
            try:
                CHECKS[key](value)
            except ValueError as e:
                problems.append(Problem(fname, None, f"defaults.{key}", str(e)))
    return defaults


def _instances(table: dict, n: int, defaults: dict, fname: str,
               problems: list[Problem]) -> tuple[list[dict], bool]:
    """The raw steps one [[steps]] table declares, defaults applied (an array gives
    many), and whether it has unknown fields (its steps are then checked, not kept)."""
    label = table.get("id") if isinstance(table.get("id"), str) else f"#{n}"
    merged = {k: v for k, v in defaults.items() if k in STEP_FIELDS and k != "id"}
    merged.update(table)
    # A default for cores does not make an MPI step wrong, nor one for ranks a plain step.
    foreign = ("cores", "min_cores") if merged.get("mpi") is True else ("ranks", "min_ranks", "threads")
    for k in foreign:
        if k not in table:
            merged.pop(k, None)
    unknown = [k for k in table if k not in STEP_FIELDS]
    for key in unknown:
        problems.append(Problem(fname, label, key, "unknown field"))
    if "id" not in table:
        problems.append(Problem(fname, label, "id", "every step needs an id"))
        return [], True
    for key in unknown:  # still check the known fields: every problem in one go
        merged.pop(key)
    instances = [merged]
    if "array" in merged:
        try:
            indices = parse_array(_str(merged["array"]))
        except ValueError as e:
            problems.append(Problem(fname, label, "array", str(e)))
            return [], True
        if "{i}" not in str(merged["id"]):
            problems.append(Problem(fname, label, "id", "an array step's id must contain {i}"))
            return [], True
        instances = [_substitute({k: v for k, v in merged.items() if k != "array"}, str(i)) for i in indices]
    return instances, bool(unknown)


def _make_step(raw: dict, order: int, fname: str, problems: list[Problem]) -> StepSpec | None:
    """One step from its raw fields (defaults applied, array expanded), or None after
    adding its problems."""
    label = raw.get("id") if isinstance(raw.get("id"), str) else "?"
    before = len(problems)

    def bad(fieldname: str, message: str) -> None:
        problems.append(Problem(fname, label, fieldname, message))

    values = _checked_fields(raw, bad)
    # Which of call/command is given does not depend on their values being right.
    has_call, has_cmd = "call" in raw, "command" in raw
    if has_call == has_cmd:
        bad("call", "give exactly one of call and command" + (" (both given)" if has_call else " (neither given)"))
    if "args" in raw and not has_call:
        bad("args", "args are keyword arguments for a call step")
    if len(problems) > before:
        return None
    mpi = values.get("mpi", False)
    cores, min_cores, ranks, min_ranks, threads = _widths(values, mpi, bad)
    for d in values.get("deps", ()):
        if not STEP_ID.match(d):
            bad("deps", f"{d!r} is not a step id")
    if len(problems) > before:
        return None
    sid = values["id"]
    return StepSpec(
        id=sid, order=order, call=values.get("call"), command=values.get("command"),
        args=values.get("args", {}), task=values.get("task", sid),
        cores=cores, min_cores=min_cores, gpus=values.get("gpus", 0), memory=values.get("memory"),
        span=values.get("span", mpi), mpi=mpi, ranks=ranks, min_ranks=min_ranks, threads=threads,
        deps=tuple(dict.fromkeys(values.get("deps", ()))), inputs=values.get("inputs", ()),
        outputs=values.get("outputs", ()), workdir=values.get("workdir", f"steps/{sid}"),
        priority=values.get("priority", 3), concurrent=values.get("concurrent", True),
        retries=values.get("retries", 0), estimate=values.get("estimate"), source=fname,
    )


def _checked_fields(raw: dict, bad: Callable[[str, str], None]) -> dict[str, Any]:
    """Each field's typed value (the array index list is not a field of the step)."""
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "array":
            continue
        try:
            values[key] = CHECKS[key](value)
        except ValueError as e:
            bad(key, str(e))
    return values


def _widths(values: dict[str, Any], mpi: bool, bad: Callable[[str, str], None]) -> tuple[int, int, int, int, int]:
    """cores, min_cores, ranks, min_ranks, threads: an MPI step's cores are its ranks
    times threads; a plain step has one rank of one thread."""
    if mpi:
        if "cores" in values or "min_cores" in values:
            bad("cores", "an MPI step declares ranks and threads, not cores")
        ranks = values.get("ranks", 1)
        min_ranks = values.get("min_ranks", ranks)
        threads = values.get("threads", 1)
        if min_ranks > ranks:
            bad("min_ranks", f"min_ranks ({min_ranks}) is larger than ranks ({ranks})")
        return ranks * threads, min_ranks * threads, ranks, min_ranks, threads
    for k in ("ranks", "min_ranks", "threads"):
        if k in values:
            bad(k, f"{k} is for MPI steps (set mpi = true)")
    cores = values.get("cores", 1)
    min_cores = values.get("min_cores", cores)
    if min_cores > cores:
        bad("min_cores", f"min_cores ({min_cores}) is larger than cores ({cores})")
    return cores, min_cores, 1, 1, 1
