"""The step context: what a ``call`` step knows about itself, and ``fleet.context()``.

Import-light on purpose: ``import fleet; fleet.context()`` loads only this.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field

from fleet.wire import owndirs, ownfiles


@dataclass(frozen=True)
class StepContext:
    """What a ``call`` step knows about itself: passed as ``ctx`` to a function that
    has a parameter of that name, and returned by :func:`context` anywhere in the
    step's process.

    id, attempt: the step and which attempt this is (1 for the first).
    workdir: the step's directory, already the current directory.
    run_dir: the run directory of the fleet.
    cores, gpus: ids this step was given (the process is pinned to ``cores``; the
        GPU variables are set to ``gpus``). memory: its share, in bytes.
    placement: ((node, cores, gpus, memory), ...) for every node it spans.
    inputs, outputs: the paths the step declared (absolute). args: its arguments.
    log: the log file that fds 1 and 2 (and sys.stdout/sys.stderr) write to.
    threads: the thread count its environment and thread pools were given.
    phase: how many times this attempt ran before (waits for children, next stages).
    stage: the stage a ``fleet.Next("stage")`` asked for ("" at first).
    children: each child's id -> outcome, once it waited for them (WaitForChildren):
        those this run submitted, since it last started at phase 0 (a retry of phase 0,
        a restart and a run anew start a new run).
    restarts: how many times it started over (fleet.Restart).
    children_omitted: past 512 KiB of outcomes, ``children`` lists only those that did
        not succeed, as many as fit; this many are left out (the successes first). The
        run directory's events.jsonl has every child's end (docs/suite-reference.md).
    """

    id: str
    attempt: int
    workdir: str
    run_dir: str
    cores: tuple
    gpus: tuple
    memory: int
    placement: tuple
    inputs: tuple
    outputs: tuple
    args: dict
    log: str
    threads: int = 1
    phase: int = 0
    stage: str = ""
    children: dict = field(default_factory=dict)
    restarts: int = 0
    children_omitted: int = 0

    def submit(self, steps: list) -> list:
        """Submit steps (tables of the suite's step fields) as this step's children; return
        their ids, ``<this id>/<given id>``. A dep names a sibling if one has that given id,
        else a step of the suite, else a child of an ancestor of this step entered with
        its branch or before it (this step's sibling submitted with it: the child's
        uncle); never another family's child (the fleet refuses it, fleet.core.childdeps).
        Checked here: a problem raises fleet.SuiteError naming the step and field.
        Written durably (written aside, fsynced, renamed) before this returns; the fleet
        takes them in when this attempt ends, or waits (raise fleet.WaitForChildren() to
        run again once they all ended)."""
        _own_process("ctx.submit")
        from fleet.core.childsteps import expand  # the step's own process: only when used
        from fleet.core.problems import SuiteError
        specs, problems = expand(self.id, steps, f"{self.id}: ctx.submit", _given, None)
        try:
            # NaN and +-inf as Python's json writes them (NaN, Infinity), which the
            # coordinator's json.loads reads back: a suite's `nan`, `inf` and Fleet.submit
            # take them. Before 2026-12-06 they were refused here, naming no child.
            text = json.dumps({"steps": steps})
        except (TypeError, ValueError, RecursionError) as e:
            if not problems:  # (what expand refused, it named: a second word on it says nothing)
                problems.append(_unwritable(f"{self.id}: ctx.submit", self.id, steps, e))
        if problems:
            raise SuiteError(problems)
        from fleet.node.protocol import clear_submitted, submit_dir_of
        d = submit_dir_of(self.run_dir, self.id)
        owndirs.makedirs(d)  # (fleet's: none but the user may put steps there)
        if not control.get("submitted"):  # this run's first: its earlier runs' files go
            clear_submitted(d)
        name = f"a{self.attempt}-r{self.restarts}-p{self.phase}-{os.getpid()}-{next(_files):06d}.json"
        _write_durably(d, name, text.encode())
        _given.update(t["id"] for t in steps)  # as written ("c/{i}": an array's deps on it by index)
        _given.update(s.id[len(self.id) + 1:] for s in specs)  # and as made (c/1, c/2: a dep names one)
        control["submitted"] = control.get("submitted", 0) + 1
        return [s.id for s in specs]


def _unwritable(source: str, parent: str, steps: list, e: Exception):
    """The problem of a table JSON cannot write (expand took it), naming its child and
    field: the first that fails, looked for only then."""
    from fleet.core.problems import Problem
    for t in steps:
        for key, value in t.items():
            try:
                json.dumps({str(key): value})
            except (TypeError, ValueError, RecursionError) as why:
                return Problem(source, f"{parent}/{t.get('id')}", str(key), f"not representable as JSON: {why}")
    return Problem(source, None, None, f"not representable as JSON: {e}")


_given: set = set()  # given ids this process submitted (deps on them name siblings)
_files = itertools.count(1)
control: dict = {}  # what the step's end record says of submissions and how it asked to go on


def _write_durably(d: str, name: str, data: bytes) -> None:
    """Write aside under a name that is never read (.name), fsync, rename, fsync the dir."""
    tmp = os.path.join(d, "." + name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ownfiles.MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(d, name))
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


_current: StepContext | None = None
_pid: int | None = None  # the step's own process: a fork of it inherits _current, not this


def context() -> StepContext:
    """The running step's context, from anywhere in a ``call`` step's process.

    Raises RuntimeError outside one (in the coordinator, in a command step, in a
    process the step started: with subprocess, or forked, as a multiprocessing pool's
    workers are; each is a process of its own).
    """
    if _current is None:
        raise RuntimeError(
            "fleet.context() is only available in the process of a running call step "
            "(a command step reads FLEET_STEP, FLEET_ATTEMPT and FLEET_RUN_DIR from its environment)")
    _own_process("fleet.context()")
    return _current


def _own_process(what: str) -> None:
    """RuntimeError in a process the step forked (a multiprocessing worker): it inherits
    the context, but is not the step. Before 2026-12-06 context() returned it there,
    and ctx.submit from two workers failed (each one's first submission cleared the
    other's files) or lost children."""
    if _pid != os.getpid():
        raise RuntimeError(
            f"{what} is only available in the call step's own process (pid {_pid}), not in a process it "
            f"started (this is pid {os.getpid()}: a multiprocessing worker, say): take what a worker needs from "
            "the context before starting it, and submit children from the step's own process")


def enter(ctx: StepContext) -> None:
    """Make ``ctx`` the one :func:`context` returns (the child does this once)."""
    global _current, _pid
    _current, _pid = ctx, os.getpid()
