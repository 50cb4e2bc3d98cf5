"""The event stream: one JSON record per decision and outcome, in events.jsonl.

This module is the stream's schema: one frozen dataclass per record kind, used by
the writer (the coordinator), by every reader (`fleet report`, `fleet audit`) and by
the tests, so nobody re-declares the fields by hand. It is better whole, past the usual
length: the kinds, the one writer and the readers of one format, each a few lines.

Theory of operation:
- Writing is strict: :class:`EventLog` takes records, never loose dicts. Records are
  buffered and flushed once per turn of the coordinator's loop, so a burst of
  decisions costs one write, while a reader never waits more than one turn for what
  happened. Each flush is one write() to a file opened with O_APPEND, so fleets sharing
  a run directory interleave whole lines, never parts. Fields that are None are left
  out of the line (they are the optional ones: `by`, `neighbours`, a wait's figures).
- Reading is lenient, because streams outlive versions: every field has a default, so
  a 0.1 stream (which lacks the fields added since) still reads; fields this version
  does not know are dropped; a kind it does not know becomes an :class:`Unknown`; a
  torn last line of a live run is skipped. 0.1 wait records carried only prose; their
  structure is recovered once, here (:func:`_wait_from_text`), and nowhere else.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator

from fleet.wire import appends, owndirs, ownfiles

from fleet.core import longer, waits as W

KINDS: dict[str, type] = {}


def _record(kind: str):
    def register(cls):
        cls = dataclass(frozen=True, kw_only=True)(cls)
        cls.KIND = kind
        fields = dataclasses.fields(cls)
        cls._NAMES = frozenset(f.name for f in fields)
        # The order a line is written in: t and kind first, then the fields as declared.
        cls._WRITTEN = tuple(f.name for f in fields if f.name not in ("t", "fleet"))
        # For parse(): every field has a default or a default factory.
        cls._DEFAULTS = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
        cls._FACTORIES = tuple((f.name, f.default_factory) for f in fields if f.default is dataclasses.MISSING)
        KINDS[kind] = cls
        return cls
    return register


@dataclass(frozen=True, kw_only=True)
class Record:
    """Common to every record: when (time.time()) and which fleet wrote it."""

    KIND: ClassVar[str] = ""
    t: float = 0.0
    fleet: str = ""

    def to_dict(self, fleet: str = "") -> dict:
        """The record as its JSON object: None fields left out; tagged with `fleet`
        (the writer's) unless the record names its own."""
        out: dict[str, Any] = {"t": round(self.t, 6), "kind": self.KIND}
        tag = self.fleet or fleet
        if tag:
            out["fleet"] = tag
        d = self.__dict__
        for name in self._WRITTEN:
            v = d[name]
            if v is not None:
                out[name] = v
        return out


# --- the fleet's life -----------------------------------------------------------------

@_record("fleet_starting")
class FleetStarting(Record):
    nodes: int = 0
    pid: int = 0
    machine: str = ""


@_record("fleet_up")
class FleetUp(Record):
    nodes: list = field(default_factory=list)
    no_cores: list | None = None  # the nodes that offer no core for steps (fleet.control.nocores)


@_record("fleet_failed")
class FleetFailed(Record):
    reason: str = ""


@_record("fleet_down")
class FleetDown(Record):
    """The fleet stopped: asked (fleet down, a signal; no `reason`), or on its own, saying
    why (every node was lost: fleet.control.jobend). The `reason` is new on 2026-12-06;
    `signal`, the name of the signal that stopped it ("SIGTERM", "SIGINT", "SIGHUP";
    none when `fleet down` asked it, or it stopped itself), on 2026-12-07 (a record
    without it: a fleet of before, or one not stopped by a signal)."""

    reason: str | None = None
    signal: str | None = None


@_record("fleet_gone")
class FleetGone(Record):
    """A fleet that ended without its fleet_down (its coordinator killed or crashed), found
    so by the next fleet, which took its lease over; `t` is that lease's last refresh
    (about when it died), written before the next fleet's fleet_starting. Also written by
    a fleet sharing the run directory that found it gone; one that was only held up
    writes its own fleet_down when it goes on (readers count its end once: the first,
    fleet.report.fleetends)."""
    gone: str = ""
    pid: int = 0
    host: str = ""


@_record("agent_failed")
class AgentFailed(Record):
    node: str = ""
    reason: str = ""
    preload: bool | None = None  # True: its zygote refused the preload modules (`reason` says which, why)


@_record("node_joined")
class NodeJoined(Record):
    node: str = ""
    host: str = ""
    cores: list = field(default_factory=list)
    gpus: list = field(default_factory=list)
    memory: int = 0
    pid: int = 0
    zygote_pid: int = 0
    memlimit: str = ""  # how its steps are held to their memory (fleet.node.memlimit), in words
    held_back: list | None = None  # its cores the machine profile holds back (none: left out)


@_record("node_memory")
class NodeMemory(Record):
    """A node's memory in use (all of it, steps' or not) reached a new high: written at
    most every sixteenth of its memory, so a node has a handful in a whole run."""

    node: str = ""
    used: int = 0


@_record("node_clock")
class NodeClock(Record):
    """A node's wall clock against the coordinator's, as its heartbeats told
    (fleet.control.nodeclock): ``ahead_s`` seconds ahead (negative: behind), to within
    ``within_s``; ``used``: the coordinator takes it off the figures that mix the two
    clocks (its steps' startup_s, how late their ends are read), else they agree to
    within that. Written when first used and when it moves by more than its tolerance."""

    node: str = ""
    ahead_s: float = 0.0
    within_s: float = 0.0
    used: bool = False


@_record("node_lost")
class NodeLost(Record):
    node: str = ""
    reason: str = ""


@_record("zygote_restarted")
class ZygoteRestarted(Record):
    """A node's fork server (zygote) died under its agent (`reason`: how), which started
    a new one (`zygote_pid`), its `restarts`th in this fleet; `steps`: those that had
    started in the dead one, each ended so (fleet.node.rezygote)."""

    node: str = ""
    reason: str = ""
    zygote_pid: int = 0
    restarts: int = 0
    steps: list = field(default_factory=list)


@_record("preloaded")
class Preloaded(Record):
    """A node's zygote imported a suite's preload modules while serving, or could not
    (`reason` names the module and why; then none of `modules` was imported there)."""

    node: str = ""
    modules: list = field(default_factory=list)
    import_s: float = 0.0
    ok: bool = True
    reason: str = ""


# --- submissions ----------------------------------------------------------------------

@_record("submitted")
class Submitted(Record):
    submission: int = 0
    suite: str = ""
    name: str = ""
    steps: int = 0
    skipped: int = 0
    serial: bool = False
    force: bool = False
    shard: str = ""
    foreign: int = 0


@_record("entered")
class Entered(Record):
    """A submission is all in the scheduler (a big one goes in over many loop turns,
    while the fleet's other steps go on): from here its steps may start."""

    submission: int = 0
    steps: int = 0


@_record("step")
class StepDeclared(Record):
    """A step as submitted: what it asks for and what it depends on."""

    step: str = ""
    submission: int = 0
    cores: int = 0
    min_cores: int = 0
    gpus: int = 0
    memory: Any = None      # bytes, or None for a proportional share
    deps: list = field(default_factory=list)
    priority: int = 0
    step_kind: str = ""     # "call" | "command"
    task: str = ""
    foreign: Any = None     # True: another shard's step, waited for, never run here
    parent: Any = None      # a child: the step that submitted it (from 2026-12-07; fleet report's floor)


# --- a step's life --------------------------------------------------------------------

@_record("wait")
class Wait(Record):
    """A ready step does not fit now. `reason` is the text; the rest its structure
    (see fleet.core.waits; `need_memory` None is a proportional share)."""

    step: str = ""
    reason: str = ""
    behind: int = 0
    cause: str = ""
    need_cores: Any = None
    need_gpus: Any = None
    need_memory: Any = None
    free_cores: Any = None
    free_gpus: Any = None

    @classmethod
    def of(cls, t: float, step: str, why: W.WaitReason, behind: int = 0, fleet: str = "") -> "Wait":
        return cls(t=t, fleet=fleet, step=step, reason=why.text(), behind=behind, cause=why.cause,
                   need_cores=why.cores, need_gpus=why.gpus, need_memory=why.memory,
                   free_cores=why.free_cores, free_gpus=why.free_gpus)

    def why(self) -> W.WaitReason:
        if not self.cause:
            return _wait_from_text(self.reason)
        return W.WaitReason(self.cause, self.need_cores or 0, self.need_gpus or 0, self.need_memory,
                            self.free_cores, self.free_gpus, self.reason if self.cause == W.DEADLINE else "")


@_record("start")
class Start(Record):
    step: str = ""
    attempt: int = 0
    node: str = ""
    cores: list = field(default_factory=list)
    gpus: list = field(default_factory=list)
    memory: int = 0
    nodes: list = field(default_factory=list)
    placement: list = field(default_factory=list)  # [{node, cores, gpus, memory}, ...]


@_record("adopted")
class Adopted(Record):
    step: str = ""
    attempt: int = 0
    previous: Any = None


@_record("queued")
class Queued(Record):
    """The step was handed to its node ahead of time (fleet.core.window): it starts
    there when the running step `after` ends. Not an attempt until then; its `start`
    record says when the coordinator learnt it took over `after`'s resources."""

    step: str = ""
    attempt: int = 0
    node: str = ""
    after: str = ""


@_record("unqueued")
class Unqueued(Record):
    """A queued step left its node's window: ready again. Its attempt unused, or, when
    `may_have_started` (its node or zygote died before its start was heard: fleet.core.unsure;
    not said before 2026-12-07), spent: the step runs again as attempt + 1."""

    step: str = ""
    attempt: int = 0
    reason: str = ""
    may_have_started: bool = False


@_record("started")
class Started(Record):
    """The step's process exists (`at`: the node's clock)."""

    step: str = ""
    attempt: int = 0
    node: str = ""
    pid: int = 0
    at: float = 0.0


@_record("exit")
class Exit(Record):
    """An attempt ended. For one an agent reported: its times (time.time() values on
    the node), rusage, the split between startup and the step's own work."""

    step: str = ""
    attempt: int = 0
    node: Any = None
    outcome: str = ""
    reason: str = ""
    returncode: Any = None
    signal: Any = None
    cores: Any = None
    gpus: Any = None
    memory: Any = None
    decided_at: Any = None
    first_at: Any = None
    work_start: Any = None
    work_end: Any = None
    ended_at: Any = None
    startup_s: Any = None
    work_s: Any = None
    utime: Any = None
    stime: Any = None
    maxrss_kb: Any = None
    error: Any = None
    neighbours: Any = None  # for a step killed by a signal: what ran beside it
    memory_peak: Any = None  # bytes, where a memory limit kept it (its cgroup's, or the watchdog's sample)
    oom_kills: Any = None   # its processes the kernel's OOM killer took, if it did not end out_of_memory
    by: Any = None          # the fleet whose outcome this is, when not ours


@_record("placement_mismatch")
class PlacementMismatch(Record):
    step: str = ""
    attempt: int = 0
    node: str = ""
    given: list = field(default_factory=list)
    actual: list = field(default_factory=list)


@_record("retry")
class Retry(Record):
    step: str = ""
    attempt: int = 0
    reason: str = ""


@_record("blocked")
class Blocked(Record):
    step: str = ""
    because: str = ""


@_record("unrunnable")
class Unrunnable(Record):
    step: str = ""
    reason: str = ""


@_record("cancelled")
class Cancelled(Record):
    """A step cancelled before it started (a running one's end is its exit record)."""

    step: str = ""
    reason: str = ""


@_record("skipped")
class Skipped(Record):
    step: str = ""
    by: Any = None


@_record("elsewhere")
class Elsewhere(Record):
    """Decided, but another fleet holds the step's claim."""

    step: str = ""
    attempt: int = 0
    holder: str = ""
    reason: str = ""


@_record("reclaim")
class Reclaim(Record):
    step: str = ""
    reason: str = ""


@_record("allocation_end")
class AllocationEnd(Record):
    """When the allocation ends (epoch seconds), where that came from, and the drain
    point before it (fleet.core.deadline)."""

    end: float = 0.0
    drain_at: float = 0.0
    source: str = ""


@_record("drained")
class Drained(Record):
    """The drain point came (`reason`: its timer, or the batch system's warning signal):
    `running` steps were stopped (each ends interrupted), nothing more starts."""

    reason: str = ""
    running: int = 0


# The reason a step gets that no allocation like the drained one could start either
# (fleet.control.stuck), and that of a step needing such a step (NEEDS.format(that step)):
# the core's words (fleet.core.longer), which `fleet simulate --walltime` gives too.
LONGER, NEEDS = longer.LONGER, longer.NEEDS


@_record("not_started")
class NotStarted(Record):
    """After the drain, how many steps never started in this fleet (`held`: of them,
    those whose expected duration did not fit before the drain point), and why: each
    was told `reason`, but for those no allocation like this one could start either
    (fleet.control.stuck): `longer` lists the steps too long themselves by their reason,
    `needs` the steps that need another such step, flat, in pairs (step, the step it
    needs: its reason is NEEDS.format(that step); a chain of a million is two lists'
    worth, not a million reasons). `longer_only`: every step the drain left, interrupted
    or not started, is so (another job like this one would not finish them). A record
    of before 2026-12-06 has the counts alone."""

    steps: int = 0
    held: int = 0
    reason: str = ""
    longer: dict = field(default_factory=dict)  # reason -> [step, ...]
    needs: list = field(default_factory=list)  # [step, the step it needs, step, ...]
    longer_only: bool | None = None

    def named(self) -> Iterator[tuple[str, str]]:
        """(step, its reason) for each step the record names (nothing of a damaged field)."""
        for why, steps in self.longer.items() if isinstance(self.longer, dict) else ():
            for sid in steps if isinstance(steps, list) and isinstance(why, str) else ():
                if isinstance(sid, str):
                    yield sid, why
        pairs = self.needs if isinstance(self.needs, list) else []
        for i in range(0, len(pairs) - 1, 2):
            if isinstance(pairs[i], str):
                yield pairs[i], NEEDS.format(pairs[i + 1])


@dataclass(frozen=True)
class Unknown:
    """A record of a kind this version does not know (a newer fleet wrote it)."""

    kind: str
    t: float
    fields: dict
    KIND: ClassVar[str] = ""

    @property
    def fleet(self) -> str:
        """The fleet that wrote it, as every record names it."""
        return self.fields.get("fleet", "")


# --- writing ----------------------------------------------------------------------------

# A value as a line of events.jsonl spells it (compact; what json cannot spell, as str):
# the encoder made once, shared by the modules that put lines together by shape.
dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode


class EventLog:
    def __init__(self, path: Path, fleet: str = ""):
        """`fleet` tags every record: fleets sharing a run directory share this file."""
        self.path = path
        self.fleet = fleet
        owndirs.makedirs(path.parent)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, ownfiles.MODE)
        self._pending: list[str] = []
        self._rest = b""  # what a failed write left unwritten (a full disk): written first next time
        # A stream whose last line was torn (its fleet died mid-write, by an older version's
        # full disk): this fleet's lines start on a line of their own, so its first record
        # (fleet_starting, a session's start to every reader) is not glued to the torn one.
        if not appends.ends_a_line(path):
            self._rest = b"\n"

    def write(self, rec: Record) -> None:
        """Buffer one record (written at the next flush), tagged with this log's fleet."""
        if not isinstance(rec, Record) or not rec.KIND:
            raise TypeError(f"not an event record: {rec!r}")
        self._pending.append(dumps(rec.to_dict(self.fleet)))

    def write_encoded(self, lines) -> None:
        """Buffer records already encoded as to_dict() and this log would (each one JSON
        object, no newline): fleet.control.declaring encodes a million at a time."""
        self._pending.extend(lines)

    def flush(self) -> None:
        """Write what is buffered. An OSError (a full disk) is raised with the rest kept:
        written first at the next flush, so no line is torn or dropped. What a failed
        flush wrote of it is taken back when nothing was appended after it (another
        fleet sharing the stream), so the file holds whole lines meanwhile, and after
        this fleet if it never writes again."""
        if self._pending or self._rest:
            whole = self._rest + (("\n".join(self._pending) + "\n").encode() if self._pending else b"")
            self._pending.clear()
            data, written = whole, 0
            try:
                while data:
                    n = os.write(self._fd, data)
                    data, written = data[n:], written + n
            except OSError:
                if written and appends.take_back(self._fd, written):
                    data = whole
                raise
            finally:
                self._rest = data

    def close(self) -> None:
        self.flush()
        os.close(self._fd)


# --- reading ----------------------------------------------------------------------------

_INF = float("inf")


def parse(d: dict) -> Record | Unknown | None:
    """One record from its JSON object; None if it is not a record at all (a time that
    is not a finite number: a damaged line, as a reader counts it)."""
    if not isinstance(d, dict):
        return None
    kind, t = d.get("kind"), d.get("t")
    if not isinstance(kind, str) or not isinstance(t, (int, float)) or isinstance(t, bool):
        return None
    if not -_INF < t < _INF:  # (JSON's Infinity, NaN or 1e999: no time; before 2026-12-06 a report's traceback)
        return None
    cls = KINDS.get(kind)
    if cls is None:
        return Unknown(kind, float(t), {k: v for k, v in d.items() if k not in ("kind", "t")})
    rec = filled(cls, d)
    values = rec.__dict__
    del values["kind"]
    if len(values) != len(cls._NAMES):  # fields this version does not know
        for k in [k for k in values if k not in cls._NAMES]:
            del values[k]
    return rec


def filled(cls, fields: dict):
    """A record of `cls` filled in as __init__ would (no record class has a
    __post_init__: defaults, then `fields`) but directly: a frozen dataclass's __init__
    sets each field through object.__setattr__, several times slower per record."""
    rec = object.__new__(cls)
    values = rec.__dict__
    values.update(cls._DEFAULTS)
    for name, factory in cls._FACTORIES:
        values[name] = factory()
    values.update(fields)
    return rec


def read_records(path: Path) -> Iterator[Record | Unknown]:
    """The records written so far, typed (a torn last line of a live run is skipped)."""
    for d in read_events(path):
        rec = parse(d)
        if rec is not None:
            yield rec


def read_events(path: Path) -> Iterator[dict]:
    """The JSON objects written so far (a torn last line of a live run is skipped)."""
    with open(path, encoding="utf-8") as f:
        yield from events_of(f)


def events_of(lines) -> Iterator[dict]:
    """The JSON objects of these lines (blank and torn ones skipped)."""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


# 0.1 wrote a wait's reason as prose only; these are the shapes it wrote.
_NEEDS_CORES = re.compile(r"^needs (\d+) cores, (\d+) free")
_NEEDS_GPUS = re.compile(r"^needs (\d+) GPUs, (\d+) free")
_NO_NODE = re.compile(r"^no node has (\d+) cores(?:, (\d+) GPUs)?(?:, (\d+) bytes of memory)? free together")
_SPAN = re.compile(r"^needs (\d+) cores with (\d+) GPUs and its memory across nodes")


def _wait_from_text(reason: str) -> W.WaitReason:
    """The structure of a 0.1 wait record, recovered from its text."""
    if m := _NEEDS_CORES.match(reason):
        return W.WaitReason(W.CORES, cores=int(m[1]), free_cores=int(m[2]))
    if m := _NEEDS_GPUS.match(reason):
        return W.WaitReason(W.GPUS, gpus=int(m[1]), free_gpus=int(m[2]))
    if m := _NO_NODE.match(reason):
        return W.WaitReason(W.WHOLE_NODE, cores=int(m[1]), gpus=int(m[2] or 0),
                            memory=int(m[3]) if m[3] else None)
    if m := _SPAN.match(reason):
        return W.WaitReason(W.SPAN, cores=int(m[1]), gpus=int(m[2]))
    if reason.startswith("runs alone"):
        return W.WaitReason(W.ALONE, detail=reason.partition(": ")[2])
    if reason.startswith("elsewhere: "):
        return W.WaitReason(W.ELSEWHERE, detail=reason[len("elsewhere: "):])
    return W.WaitReason(W.OTHER, detail=reason)
