"""Checking a suite (TOML text) into validated, frozen step specifications.

A suite is `[suite]` (name, run_dir, preload), `[defaults]` (any step field) and
`[[steps]]` tables in setup order. Every problem is collected and raised together
as a SuiteError; nothing is started before a suite reads cleanly. Reading the file
is fleet.control.checks.load_suite's: here is only text and tables.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from fleet.core import spelling
from fleet.core.fromdefaults import Defaulted, marked
from fleet.core.problems import Problem, SuiteError
from fleet.core.slotfill import filler
from fleet.core.suitehead import defaults_table, suite_table
from fleet.core.launchsize import too_big
from fleet.core.arraytables import ArrayTable, Expanded, Folder, expand, fold_later
from fleet.core.widths import widths
from fleet.core.units import (CHECKS, STEP_FIELDS, STEP_ID, each_wrong, inside_run_dir,  # noqa: F401 (re-exported)
                              parse_array)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# The args of a step that has none, shared by all such steps (read-only: a million
# steps need not carry a million empty dicts).
NO_ARGS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)  # slots: a million steps without a dict each
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
    timeout: float | None = None  # seconds an attempt may run before it is stopped (timed_out)
    grace: float = 10.0  # seconds from SIGTERM to SIGKILL when the step is stopped
    protocol: str = ""  # "steps": a command's exit codes 2-5 say next/wait/restart/broken
    env: tuple[tuple[str, str], ...] = ()  # (name, value) pairs, by name: the step's own environment variables

    @property
    def kind(self) -> str:
        return "call" if self.call is not None else "command"

    def identity(self, names: tuple[str, ...] | None = None) -> tuple:
        """Everything that defines what the step does (for shared-step checks and markers);
        `names`: the fields to take instead (LEGACY_IDENTITY: as markers before 2026-12-06)."""
        ident = tuple((name, _freeze(getattr(self, name))) for name in (names or _IDENTITY))
        # Only when set: a suite written before the field keeps its steps' identity.
        return ident + tuple((k, getattr(self, k)) for k in ("protocol", "env") if getattr(self, k))

    def same_as(self, other: "StepSpec", names: tuple[str, ...] | None = None) -> bool:
        """The same identity, as a marker's hash reads it (nan is nan: _differ)."""
        return not _differ(self.identity(names), other.identity(names))


_new_spec = filler(StepSpec)  # StepSpec(...) without the frozen __init__ (fleet.core.slotfill)

# How long a step may run, how it is stopped, and how it is scheduled do not change what
# it does: a new timeout, or an estimate tuned from a report, reruns nothing that
# succeeded. The scheduling fields were part of the identity before 2026-12-06: markers
# written then name the hash of LEGACY_IDENTITY (fleet.wire.records.succeeded_as reads both).
SCHEDULING = ("priority", "estimate", "retries", "concurrent", "task")
LEGACY_IDENTITY = tuple(f.name for f in fields(StepSpec)
                        if f.name not in ("order", "source", "timeout", "grace", "protocol", "env"))
_IDENTITY = tuple(name for name in LEGACY_IDENTITY if name not in SCHEDULING)


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


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _freeze(v: Any) -> Any:
    if type(v) in _PLAIN:  # most fields: typing's Mapping check costs microseconds each
        return v
    if isinstance(v, Mapping):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


@dataclass(frozen=True)
class Unparsed:
    """Names (step ids, or output paths) of steps that have problems and so are not in
    the suite: the graph neither reports a dep on one as unknown nor an input one
    produces as missing. `templates` are regexes for the steps of an array that did not
    expand (its `{i}` matches any index)."""

    names: frozenset[str] = frozenset()
    templates: tuple[str, ...] = ()

    def __contains__(self, name: object) -> bool:
        return name in self.names or any(re.fullmatch(t, str(name)) for t in self.templates)


@dataclass(frozen=True)
class Reading:
    """A suite as far as it reads: the steps that parsed cleanly and every problem found.

    Problems found later about those steps (the graph, the disk, an allocation) take
    their place among these through `merged`, so the whole list reads in setup order."""

    suite: Suite
    problems: tuple[Problem, ...]
    marks: Mapping[str, int] = field(default_factory=dict, hash=False)  # step id -> problems before it
    unparsed: Unparsed = Unparsed()  # ids of steps with problems
    unparsed_outputs: Unparsed = Unparsed()  # their outputs, as far as they read
    arrays: tuple[ArrayTable, ...] = ()  # where each array's steps are: later problems about them fold
    partial: Mapping[str, tuple] = field(default_factory=dict, hash=False)  # theirs that read: (deps, outputs, workdir)
    defaulted: Defaulted = field(default_factory=Defaulted, hash=False)  # later problems from [defaults] say so

    def check(self) -> Suite:
        """The suite, or SuiteError with every problem."""
        if self.problems:
            raise SuiteError(list(self.problems))
        return self.suite

    def merged(self, later: list[Problem]) -> list[Problem]:
        """These problems and `later` ones, each later one after the problems of the
        steps set up before its step (one about no step of the suite goes last). Those
        about an array's steps are folded as the reading's were (fleet.core.arraytables)."""
        if not later:
            return list(self.problems)
        order = {s.id: s.order for s in self.suite.steps}
        later = [self.defaulted.mark(p, order.get(p.step)) for p in later] if self.defaulted.fields else later
        placed = fold_later(later, self.arrays, order) if self.arrays else [(p.step, p) for p in later]
        end = len(self.problems) + 1
        keyed = [((i + 1, 0, 0, i), p) for i, p in enumerate(self.problems)]
        keyed += [((self.marks.get(at, end), 1, order.get(at, 0), n), p)  # type: ignore[arg-type]
                  for n, (at, p) in enumerate(placed)]
        return [p for _, p in sorted(keyed, key=lambda kp: kp[0])]


def suite_from_toml(text: str, path: str | Path, resolve: Callable[[Path], Path] | None = None) -> Suite:
    """Check a suite given as TOML text read from `path`; raise SuiteError listing
    every problem found. (Reading the file is the caller's: fleet.control.checks.)"""
    return read_toml(text, path, resolve).check()


def toml_table(text: str) -> dict:
    """The table TOML text holds, as fleet reads a suite file and a step's submit file
    (fleet.control.children); ValueError saying why not ("not valid TOML: ...", "nested
    too deeply to read": arrays or tables ~1,000 deep, tomllib's RecursionError)."""
    # A byte-order mark (some editors write one) is no TOML: tomllib refused it as an
    # "invalid statement at line 1, column 1", which named nothing one could see.
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"not valid TOML: {e}") from None
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def read_toml(text: str, path: str | Path, resolve: Callable[[Path], Path] | None = None,
              head: bool = False) -> Reading:
    """As suite_from_toml, but return what reads and every problem instead of raising.
    With `head`, only the [suite] table: the suite with no steps (name, run_dir, preload)
    and that table's problems; what a client needs before a fleet that reads the whole
    suite itself (a million array steps are not made twice)."""
    path = Path(path)
    try:
        raw = toml_table(text)
    except ValueError as e:
        why = str(e)
        empty = Suite(path, path.stem, path.parent, (), ())
        return Reading(empty, (Problem(str(path), None, None, why),))
    if not head:
        return read_suite(raw, path, resolve)
    problems: list[Problem] = []
    name, run_dir_raw, preload, _ = suite_table(raw, path, problems)
    return Reading(Suite(path=path, name=name, run_dir=_run_dir(run_dir_raw, path, resolve), preload=tuple(preload),
                         steps=()), tuple(problems))


def _run_dir(raw: str, path: Path, resolve: Callable[[Path], Path] | None) -> Path:
    """A suite's run_dir as written: a relative one from the suite file's directory."""
    run_dir = Path(raw)
    if not run_dir.is_absolute():
        run_dir = path.parent / run_dir
        if resolve is not None:
            run_dir = resolve(run_dir)
    return run_dir


def parse_suite(raw: dict, path: Path, resolve: Callable[[Path], Path] | None = None) -> Suite:
    """Check an already-parsed suite table from the file `path`; raise SuiteError
    listing every problem found. See read_suite."""
    return read_suite(raw, path, resolve).check()


def read_suite(raw: dict, path: Path, resolve: Callable[[Path], Path] | None = None) -> Reading:
    """Check an already-parsed suite table from the file `path`: the steps that read
    cleanly and every problem, in setup order.

    A relative run_dir is taken from the suite file's directory and passed through
    `resolve` (the caller gives Path.resolve, which asks the filesystem; without it the
    path is only joined). An absolute run_dir is kept as written."""
    fname = str(path)
    problems: list[Problem] = []
    for key in raw:
        if key not in ("suite", "defaults", "steps"):
            problems.append(Problem(fname, None, key, "unknown top-level table (expected [suite], [defaults], [[steps]])"))
    name, run_dir_raw, preload, limit = suite_table(raw, path, problems)
    defaults = defaults_table(raw, fname, problems)
    tables = raw.get("steps", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        problems.append(Problem(fname, None, "steps", "expected [[steps]] tables"))
        tables = []
    defaulted = Defaulted()
    steps, marks, arrays, unparsed, outputs, partial = _read_steps(tables, defaults, limit, fname, problems, defaulted)
    suite = Suite(path=path, name=name, run_dir=_run_dir(run_dir_raw, path, resolve), preload=tuple(preload),
                  steps=tuple(sorted(steps.values(), key=lambda s: s.order)))
    return Reading(suite, tuple(problems), marks, unparsed, outputs, arrays, partial, defaulted)


class _Failed:
    """Collects the ids and outputs of steps that do not read (see Unparsed)."""

    def __init__(self) -> None:
        self.ids: tuple[set[str], set[str]] = (set(), set())
        self.outputs: tuple[set[str], set[str]] = (set(), set())
        # id -> its deps and outputs as far as they read: their graph problems are said too
        # (fleet.core.unparsedgraph); one step a table (an array's first), `kept` before it.
        self.partial: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {}

    def add(self, raw: dict, kept: int = -1) -> None:
        self._note(self.ids, raw.get("id"))
        outs = raw.get("outputs")
        for out in outs if isinstance(outs, list) else ():
            self._note(self.outputs, out if not isinstance(out, str) else posixpath.normpath(out))
        sid = raw.get("id")
        if len(self.partial) == kept and isinstance(sid, str) and sid and "{i}" not in sid and sid not in self.partial:
            wd = raw.get("workdir", f"steps/{sid}")
            self.partial[sid] = (_readable(raw.get("deps"), STEP_ID.match), _readable(outs, _inside),
                                 wd if isinstance(wd, str) and _inside(wd, dir_ok=True) else "")

    @staticmethod
    def _note(into: tuple[set[str], set[str]], name: Any) -> None:
        if isinstance(name, str) and name:
            if "{i}" in name:
                into[1].add(re.escape(name).replace(re.escape("{i}"), r"\d+"))
            else:
                into[0].add(name)

    def frozen(self) -> tuple[Unparsed, Unparsed]:
        return (Unparsed(frozenset(self.ids[0]), tuple(sorted(self.ids[1]))),
                Unparsed(frozenset(self.outputs[0]), tuple(sorted(self.outputs[1]))))


def _readable(v: Any, ok: Callable[[str], Any]) -> tuple[str, ...]:
    """The strings of a list field that pass `ok` (the rest have their field problems)."""
    return tuple(x for x in v if isinstance(x, str) and ok(x)) if isinstance(v, list) else ()


def _inside(path: str, dir_ok: bool = False) -> bool:
    """Whether an output path (a workdir: `dir_ok`) reads (inside the run directory)."""
    try:
        return bool(inside_run_dir(path, dir_ok=dir_ok))
    except ValueError:
        return False


def _read_steps(tables: list[dict], defaults: dict, limit: int, fname: str, problems: list[Problem],
                defaulted_by: Defaulted) -> tuple[dict[str, StepSpec], dict[str, int], tuple[ArrayTable, ...], Unparsed, Unparsed, dict]:
    """The steps of the [[steps]] tables that read cleanly, by id in setup order; for each,
    how many problems were found up to it; where the arrays' steps are; the ids and
    outputs of those that did not, and their readable deps and outputs (_Failed.partial).
    An array's problems are folded (fleet.core.arraytables)."""
    steps: dict[str, StepSpec] = {}
    marks: dict[str, int] = {}
    arrays: list[ArrayTable] = []
    failed = _Failed()
    declared = 0
    for n, table in enumerate(tables, 1):
        instances, unknown = _instances(table, n, defaults, limit - declared, fname, problems)
        kept = len(failed.partial)
        if not instances:
            failed.add(table, kept)
        declared += len(instances)
        folder = Folder(instances.label, len(instances)) if isinstance(instances, Expanded) and len(instances) > 1 \
            else None
        first, before = len(steps), len(problems)
        defaulted = frozenset(k for k in defaults if k not in table)
        defaulted_by.add(first, defaulted)
        for inst in instances:
            if folder is not None and len(problems) > before:  # the last step's, taken by the folder
                _fold(folder, problems, before)
            spec = _make_step(inst, len(steps), fname, problems, f"#{n}", defaulted)  # setup order: distinct steps
            if spec is None or unknown:
                failed.add(inst, kept)
                continue
            prior = steps.get(spec.id)
            if prior is None:
                steps[spec.id] = spec
                marks[spec.id] = len(problems)
            elif _differ(prior.identity(LEGACY_IDENTITY), spec.identity(LEGACY_IDENTITY)):  # (scheduling fields too)
                differ = [k for (k, a), (_, b) in zip(prior.identity(LEGACY_IDENTITY), spec.identity(LEGACY_IDENTITY))
                          if _differ(a, b)]
                problems.append(Problem(fname, spec.id, differ[0] if differ else "id",
                                        "defined twice differently (fields differ: " + ", ".join(differ) + ")"))
        if folder is not None:
            _fold(folder, problems, before)
            problems += folder.problems()
            if len(steps) > first:
                arrays.append(ArrayTable(folder.pattern, folder.size, first, len(steps)))
        for sid in itertools.islice(failed.partial, kept, None):  # its later problems come after its own
            marks.setdefault(sid, len(problems))
    return (steps, marks, tuple(arrays), *failed.frozen(), failed.partial)


def _differ(a: Any, b: Any) -> bool:
    """Whether two definitions differ, as a marker's hash reads them (repr): nan is nan (before
    2026-12-07 "defined twice differently"; a running step submitted again ran again), 1 is 1.0."""
    return a != b and repr(a) != repr(b)


def _fold(folder: Folder, problems: list[Problem], since: int) -> None:
    """Hand problems[since:] (one step's) to the folder."""
    for p in problems[since:]:
        folder.add(p)
    del problems[since:]


def _instances(table: dict, n: int, defaults: dict, room: int, fname: str,
               problems: list[Problem]) -> tuple[list[dict] | Expanded, bool]:
    """The raw steps one [[steps]] table declares, defaults applied (an array gives
    many, at most `room` of them), and whether its steps are only checked, not kept (it
    has unknown fields, or an output all its steps would share)."""
    label = table.get("id") if isinstance(table.get("id"), str) else f"#{n}"
    merged = {k: v for k, v in defaults.items() if k in STEP_FIELDS and k != "id"}
    merged.update(table)
    if isinstance(table.get("env"), dict) and isinstance(defaults.get("env"), dict):
        merged["env"] = {**defaults["env"], **table["env"]}  # a step's variables on top of the defaults'
    # A default for the other kind of step does not make this one wrong: [defaults] of a
    # suite of MPI commands and Python calls are for whichever steps they fit. The step's
    # own call or command says its kind; `mpi` (so its widths) is for commands only.
    for k in _OTHER_KIND.get(_kind(table, merged), ()):
        if k not in table:
            merged.pop(k, None)
    # A default for cores does not make an MPI step wrong, nor one for ranks a plain step.
    foreign = ("cores", "min_cores") if merged.get("mpi") is True else ("ranks", "min_ranks", "threads")
    for k in foreign:
        if k not in table:
            merged.pop(k, None)
    unknown = [k for k in table if k not in STEP_FIELDS]
    for key in unknown:
        problems.append(Problem(fname, label, key, "unknown field" + spelling.hint(key, STEP_FIELDS, spelling.HABITS)))
    if "id" not in table:
        problems.append(Problem(fname, label, "id", "every step needs an id"))
        return [], True
    for key in unknown:  # still check the known fields: every problem in one go
        merged.pop(key)
    if "array" not in merged:
        if room < 1:
            problems.append(Problem(fname, label, "id", "one step more than the suite's limit of max_steps"
                                    " (raise [suite] max_steps to allow more)"))
            return [], True
        return [merged], bool(unknown)
    since = len(problems)
    instances = expand(merged, label, room, fname, problems)
    if "array" not in table:  # (an array from [defaults] on a step with no {i} in its id, say)
        problems[since:] = [marked(p, [f for f in (p.field, "array") if f not in table and f in defaults])
                            for p in problems[since:]]
    return instances, bool(unknown) or (isinstance(instances, Expanded) and not instances.keep)


# The defaults that apply only to one kind of step, by the kind they do not apply to.
_OTHER_KIND = {"call": ("command", "protocol", "mpi"), "command": ("call", "args")}


def _kind(table: dict, merged: dict) -> str | None:
    """A step's kind: the one its table gives, else the one its defaults give alone."""
    for kind in ("call", "command"):
        if kind in table:
            return kind
    given = [kind for kind in ("call", "command") if kind in merged]
    return given[0] if len(given) == 1 else None


def _make_step(raw: dict, order: int, fname: str, problems: list[Problem], unnamed: str = "?",
               defaulted: frozenset = frozenset()) -> StepSpec | None:
    """One step from its raw fields (defaults applied, array expanded), or None after
    adding its problems (named `unnamed`, its table's place, if its id is no string).
    A problem a field from [defaults] (one of `defaulted`) takes part in says so."""
    label = raw.get("id") if isinstance(raw.get("id"), str) else unnamed
    before = len(problems)

    def bad(fieldname: str, message: str, *also: str) -> None:
        mine = [f for f in (fieldname, *also) if f in defaulted and f in raw]
        if mine:  # (before 2026-12-06 it read as the step's own mistake)
            message += " (from [defaults])" if not also else f" ({', '.join(mine)} from [defaults])"
        problems.append(Problem(fname, label, fieldname, message))

    values = _checked_fields(raw, bad)
    # Which of call/command is given does not depend on their values being right.
    has_call, has_cmd = "call" in raw, "command" in raw
    if has_call == has_cmd:
        bad("call", "give exactly one of call and command" + (" (both given)" if has_call else " (neither given)"),
            "command")
    if "args" in raw and not has_call:
        bad("args", "args are keyword arguments for a call step")
    if has_call and "protocol" in values:
        bad("protocol", "a call step raises fleet.Next, WaitForChildren, Restart or Broken; protocol is for commands",
            "call")
    if has_call and values.get("mpi") is True:
        # The site's MPI launcher starts a program on every rank; a call runs in one forked child.
        bad("mpi", "an MPI step runs a command through the site's MPI launcher; a call step cannot be mpi = true",
            "call")
    if len(problems) > before:
        return None
    mpi = values.get("mpi", False)
    cores, min_cores, ranks, min_ranks, threads = widths(values, mpi, bad)
    for d in values.get("deps", ()):
        if not STEP_ID.match(d):
            bad("deps", f"{d!r} is not a step id")
    if big := too_big(values):  # (before 2026-12-07 its launch took down each node it was tried on)
        bad(*big)
    if len(problems) > before:
        return None
    sid = values["id"]
    return _new_spec(
        id=sid, order=order, call=values.get("call"), command=values.get("command"),
        args=values.get("args", NO_ARGS), task=values.get("task", sid),
        cores=cores, min_cores=min_cores, gpus=values.get("gpus", 0), memory=values.get("memory"),
        span=values.get("span", mpi), mpi=mpi, ranks=ranks, min_ranks=min_ranks, threads=threads,
        deps=tuple(dict.fromkeys(values.get("deps", ()))), inputs=values.get("inputs", ()),
        outputs=values.get("outputs", ()), workdir=values.get("workdir", f"steps/{sid}"),
        priority=values.get("priority", 3), concurrent=values.get("concurrent", True),
        retries=values.get("retries", 0), estimate=values.get("estimate"), source=fname,
        timeout=values.get("timeout"), grace=values.get("grace", 10.0), protocol=values.get("protocol", ""),
        env=values.get("env", ()),
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
            for message in each_wrong(e):
                bad(key, message)
    return values
