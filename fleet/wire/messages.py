"""Every message fleet's processes exchange, and the one codec that carries them.

Three hops use this one set: client <-> coordinator and coordinator <-> agent over
ZeroMQ (one message per ZeroMQ frame), agent <-> zygote over a pair of OS pipes (one
message per length-prefixed frame, see :mod:`fleet.wire.framing`). :class:`Launch`,
:class:`Kill`, :class:`Started` and :class:`Exited` are defined once and cross two
hops unchanged: the agent checks them and forwards the bytes it received.

A message is a msgpack map of its fields plus ``v`` (the protocol version) and
``type`` (Launch, Started and Exited, sent on every step: an array of the same by
shape, fleet.wire.shapes); each is a frozen dataclass, and nothing else crosses a process boundary.
Steps' messages carry the attempt number, so a report about an earlier attempt is
recognised and dropped. Which node a report comes from is the transport's to say (the
agent's ZeroMQ identity), never a field the agent copies in.

Validation, the same on every hop (:func:`decode`):

- the version must be exactly :data:`VERSION` (else :class:`VersionMismatch`);
- the type must be known; every field of the class without a default must be there;
- each field's value must have the type its annotation names (``int``, ``float``,
  ``str``, ``bool``, ``list``, ``tuple``, ``dict``, unions with ``| None``; ``Any``
  is unchecked), so a handler never meets a well-formed message of wrong types;
- fields annotated ``tuple`` come back as tuples (recursively: placement holds tuples
  of tuples), since msgpack has only arrays;
- an unknown field is an error. Both ends of every hop are the same version of fleet
  (the version check refuses any other), so an unknown field can only be a bug or
  garbage; ignoring it would let an option a sender relies on be silently lost (a
  newer client's submit option, say), and would let unchecked bytes ride through the
  agent to the zygote. Rejecting it makes the first hop that sees it say so.

Anything that fails is a :class:`ProtocolError` (a ValueError): receivers log it and
drop the message.

The module is better whole, past the usual length: every message of every hop in one
place is the protocol's reference, and each class is a few lines.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import msgpack

VERSION = 4  # 2: the per-step messages by shape, msgpack arrays (fleet.wire.shapes); 3: a zygote
# drops the launches queued behind a step that goes on (next, restart) instead of starting them,
# and the core promotes none then (fleet.node.queued): a fleet of 2 would run both; 4: so after
# a wait (its children come first) too: a node of 3 would start them, a core of 3 promote them;
# and an agent restarts a zygote that died (Ok "restarted": its coordinator ends the steps that
# ran in it, fleet.node.rezygote), where a fleet of 3 would have them running for good
# Encoded as ``[v, type, *fields]`` (fleet.wire.shapes): what crosses a hop on every step.
SHAPED = frozenset({"launch", "started", "exited"})
# The largest ZeroMQ frame a socket accepts (its MAXMSGSIZE): bigger ones are dropped
# unread. Pipes have their own, larger bound (fleet.wire.framing.MAX_FRAME).
MAX_FRAME = 1 << 20

_TYPES: dict[str, type] = {}


# Fields added to a message within one protocol version, left out of its frame while
# empty, so that a reader of that version from before them (which refuses a field it does
# not know) reads every frame that does not need them: SubmitReply.fault (2026-12-07).
SPARSE = {"submitted": frozenset({"fault"})}


class ProtocolError(ValueError):
    """A frame that is not a message we understand (logged and dropped by receivers)."""


class VersionMismatch(ProtocolError):
    """A message of another protocol version: the two ends cannot work together."""

    def __init__(self, got):
        self.got = got
        super().__init__(f"protocol version {got!r}, this fleet speaks {VERSION}")


def message(name: str):
    """Register a frozen dataclass as the message of type ``name``."""
    def register(cls):
        cls = dataclass(frozen=True)(cls)
        cls.TYPE = name
        _TYPES[name] = cls
        return cls
    return register


def encode(msg: Any) -> bytes:
    """The msgpack map for ``msg``: its fields, ``v`` and ``type`` (the SHAPED ones: an array)."""
    if _TYPES.get(getattr(type(msg), "TYPE", None)) is not type(msg):
        raise TypeError(f"not a message: {msg!r}")
    if msg.TYPE in SHAPED:
        return shapes.encode(msg)
    # A message's __dict__ is its fields, in order (frozen dataclasses, no slots): cheaper
    # than dataclasses.fields() per message, which the zygote pays on every start and exit.
    body = msg.__dict__
    if msg.TYPE in SPARSE:  # (a field added within a version: left out while empty, for that version's readers)
        body = {k: v for k, v in body.items() if v or k not in SPARSE[msg.TYPE]}
    return msgpack.packb({"v": VERSION, "type": msg.TYPE, **body}, use_bin_type=True)


def decode(frame: bytes, limit: int = MAX_FRAME) -> Any:
    """The message in ``frame``; ProtocolError for anything else (see the module doc).

    ``limit`` is the transport's largest frame (ZeroMQ's by default).
    """
    if len(frame) > limit:
        raise ProtocolError(f"frame of {len(frame)} bytes is over the {limit} limit")
    try:
        body = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated exception types
        raise ProtocolError(f"not msgpack: {e}") from None
    if type(body) is list:  # a message by shape (fleet.wire.shapes)
        return shapes.decode(body)
    if not isinstance(body, dict):
        raise ProtocolError(f"not a map: {type(body).__name__}")
    version = body.pop("v", None)
    if type(version) is not int or version != VERSION:  # True == 1 and 1.0 == 1 are no version
        raise VersionMismatch(version)
    kind = body.pop("type", None)
    cls = _TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"unknown message type {kind!r}")
    kinds = _KINDS[cls]
    unknown = [k for k in body if k not in kinds]
    if unknown:
        raise ProtocolError(f"{cls.TYPE}: unknown fields {sorted(map(str, unknown))}")
    exact = _EXACT[cls]
    for name, value in body.items():
        if type(value) in exact[name]:  # a plain value of a wanted type: nothing to check or convert
            continue
        want = kinds[name]
        if want and not any(_is(value, w) for w in want):
            raise ProtocolError(f"{cls.TYPE}: field {name!r} is not a {' | '.join(want)}")
        if "tuple" in want:
            body[name] = _tuples(value)
    try:
        return cls(**body)
    except TypeError as e:  # missing fields
        raise ProtocolError(f"{cls.TYPE}: {e}") from None


_CHECKS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "list": (list,),
           "tuple": (list, tuple), "dict": (dict,), "None": (type(None),)}


def _is(value, want: str) -> bool:
    if isinstance(value, bool) and want != "bool":  # a bool is an int to isinstance
        return False
    return isinstance(value, _CHECKS[want])


def _tuples(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


class _Kinds(dict):
    """Per message class: each field's accepted types, read from its annotation (a
    string, under ``from __future__ import annotations``); empty means unchecked."""

    def __missing__(self, cls):
        kinds = {}
        for f in dataclasses.fields(cls):
            parts = tuple(p.strip() for p in f.type.split("|"))
            kinds[f.name] = parts if all(p in _CHECKS for p in parts) else ()
        self[cls] = kinds
        return kinds


_KINDS = _Kinds()


class _Exact(dict):
    """Per message class: the exact types each field takes as they come (a bool only
    where bool is wanted; lists only where no tuple conversion is due): one set lookup
    per field for what agents send on every step."""

    def __missing__(self, cls):
        exact = {}
        for name, want in _KINDS[cls].items():
            types = {t for w in want if w != "tuple" for t in _CHECKS[w]} - ({bool} if "bool" not in want else set())
            exact[name] = frozenset(types) if "tuple" not in want else frozenset(types - {list, tuple})
        self[cls] = exact
        return exact


_EXACT = _Exact()


# --- agent <-> coordinator ----------------------------------------------------------

@message("join")
class Join:
    """agent -> coordinator: this node, what it offers, and its zygote's preloads."""

    node: str
    host: str
    cores: list
    gpus: list
    memory: int
    pid: int
    zygote_pid: int
    preload: list
    memlimit: str = ""  # how steps are held to their memory here (fleet.node.memlimit), in words
    held_back: list = field(default_factory=list)  # its cores the machine profile holds back (fleet.node.heldback)
    sent: float = 0.0  # its time.time() when sent (fleet.control.nodeclock); 0: not said


@message("join_failed")
class JoinFailed:
    """agent -> coordinator: this node's agent cannot serve (its zygote refused)."""

    node: str
    reason: str
    preload: bool = False  # the zygote refused its preload modules (Refused.preload)


@message("welcome")
class Welcome:
    """coordinator -> agent: joined; heartbeat every ``heartbeat_s``; send step reports
    at most once every ``report_hold_s`` (fleet.control.liveness.report_hold)."""

    node: str
    heartbeat_s: float
    timeout_s: float
    report_hold_s: float = 0.0
    sent: float = 0.0  # the coordinator's time.time() when sent: echoed (Heartbeat.echo); 0: not said


@message("reject")
class Reject:
    """coordinator -> agent: not joined (the node already has an agent)."""

    reason: str


@message("heartbeat")
class Heartbeat:
    """Either way between coordinator and agent: still here (an agent's says how much
    of its node's memory is in use, in bytes; -1: not said).

    The clock fields let the coordinator tell how far each node's wall clock is from
    its own, as NTP does (fleet.control.nodeclock): the coordinator's beat says when it
    was sent; an agent's says when it was sent, and echoes the last coordinator stamp
    it read (a Welcome's, a beat's) with how long it held it, by its monotonic clock.
    0.0: not said (a fleet of before these, or nothing heard yet)."""

    node: str = ""
    memory_used: int = -1
    sent: float = 0.0  # the sender's time.time() when sent
    echo: float = 0.0  # (an agent's) the `sent` of the last Welcome or beat it read from the coordinator
    held: float = 0.0  # (an agent's) seconds from reading that to sending this, by its time.monotonic()


# --- coordinator -> agent -> zygote, and back ------------------------------------------

@message("launch")
class Launch:
    """coordinator -> agent -> zygote: start one attempt of a step."""

    step: str
    attempt: int
    kind: str  # "call" | "command"
    call: str  # "pkg.mod:func" for kind "call", else ""
    args: dict
    command: list | str | None  # argv list, or a str run through /bin/sh -c
    cores: tuple
    gpus: tuple
    memory: int  # bytes
    workdir: str  # absolute
    log: str  # absolute path of the step's log (fds 1 and 2)
    run_dir: str
    inputs: tuple = ()
    outputs: tuple = ()
    placement: tuple = ()  # ((node, cores, gpus, memory), ...)
    decided_at: float = 0.0  # time.time() when the coordinator decided, on its node's clock (fleet.control.nodeclock)
    env: dict = field(default_factory=dict)  # extra environment
    gpu_vars: tuple = ()  # e.g. ("CUDA_VISIBLE_DEVICES",), set to the joined gpu ids
    threads: int = 0  # an MPI step's threads per rank (0: the step's cores decide)
    timeout: float | None = None  # seconds it may run: then SIGTERM, SIGKILL after grace (timed_out)
    grace: float = 10.0  # seconds from SIGTERM to SIGKILL whenever the step is stopped
    # A step that goes on (fleet.core.phases; ctx.phase, ctx.stage, ctx.children): how
    # often it ran before, at which stage, fresh starts (the work directory is renewed
    # for each), its children's outcomes; a command's protocol ("steps": exit codes 2-5).
    phase: int = 0
    stage: str = ""
    restarts: int = 0
    children: dict = field(default_factory=dict)
    children_omitted: int = 0  # past launching.CHILDREN_BYTES: successes (then the rest) are left out
    protocol: str = ""
    memory_limit: int = 0  # bytes its node holds it to: its declared memory here (0: none; fleet.node.memlimit)
    # Queued (fleet.core.window): start when this step ends on the node, not now (at
    # once if it is not running there); a Kill with cancel drops it unstarted (Dropped).
    after: str = ""
    # Seconds the zygote may hold this step's Started and Exited while it has launches
    # queued, to send several together (fleet.node.outbox); 0: at the turn's end.
    hold: float = 0.0


@message("kill")
class Kill:
    """coordinator -> agent -> zygote: send ``signal`` to a running step's process group.
    With ``cancel``, ``signal`` is ignored: the step is stopped (SIGTERM, SIGKILL after its
    grace, or after ``grace`` if that is sooner: the drain's cut, fleet.core.deadline) and
    its exit is reported as cancelled, whatever its status (or as what it was being
    stopped for already: timed_out); ``why`` says who stopped it, for the exit's reason:
    "" `fleet cancel`, "drain" the drain (fleet.node.stopping.STOPPED_BY; before 2026-12-06
    there was no such field, and the drain's stops read "cancelled"). With ``withdraw`` (a
    node's window taking a queued launch back, fleet.core.windowback) only a launch still
    held is dropped (Dropped); one started already is left to run."""

    step: str
    attempt: int
    signal: int = 15
    cancel: bool = False
    withdraw: bool = False
    grace: float = float("inf")
    why: str = ""


@message("shutdown")
class Shutdown:
    """coordinator -> agent, agent -> zygote: SIGTERM every step's group, SIGKILL
    after ``grace`` s (None: each step's own grace, from its Launch), exit."""

    grace: float | None = None


@message("started")
class Started:
    """zygote -> agent -> coordinator: a step's process exists, in process group ``pgid``."""

    step: str
    attempt: int
    pid: int
    pgid: int
    at: float


@message("exited")
class Exited:
    """zygote -> agent -> coordinator: a step's process was reaped (or could not be
    started: pid 0).

    Times are time.time() values: ``first_at`` is the child's first instruction
    after fork (spawn time for a command), ``work_start``/``work_end`` bracket the
    step's own work, ``ended_at`` is the reap time. They are for display: how long the
    step worked is ``worked_s``, measured on the node's monotonic clock (a wall clock
    stepped during the step does not change it).
    """

    step: str
    attempt: int
    pid: int
    outcome: str  # "succeeded" | "failed" | "terminated" | "timed_out" | "cancelled" | "out_of_memory" | "interrupted" (fleet.node.jobend)
    returncode: int | None
    signal: int | None
    decided_at: float
    first_at: float
    work_start: float
    work_end: float
    ended_at: float
    utime: float
    stime: float
    maxrss_kb: int
    affinity: tuple
    placement_ok: bool
    error: str | None
    # How it ended if it asked to go on (fleet.node.protocol): {"stage": next stage} and
    # {"submitted": children files written} (the coordinator collects them).
    control: dict = field(default_factory=dict)
    memory_peak: int | None = None  # bytes, where its memory limit kept it (fleet.node.memwatch)
    disk_full: int | None = None  # ENOSPC, EDQUOT or EROFS: its set-up could not write the disk (fleet.control.drain)
    # Its times and rusage as its `exit` line spells them, spelled where it ended
    # (fleet.wire.numtext.exit_numbers), or [] (the coordinator spells them).
    spelt: list = field(default_factory=list)
    # Processes of it the kernel's OOM killer killed, where its memory cgroup counted them
    # and it did not end out_of_memory (fleet.node.memwatch.judge_cgroup); None: none.
    oom_kills: int | None = None
    # How long it worked (work_start to work_end, or to its reap), by its node's monotonic
    # clock (fleet.node.exits.worked); None: not measured (it never began its work, or an
    # agent from before 2026-12-07): the stamps' difference is taken (numtext.work_seconds).
    worked_s: float | None = None


@message("dropped")
class Dropped:
    """zygote -> agent -> coordinator: a queued Launch (``after``) was dropped before it
    started (a Kill with ``cancel`` or ``withdraw``): nothing ran, the attempt was not used."""

    step: str
    attempt: int
    reason: str = ""
    # Dropped because the zygote stops (not asked): the step goes back to the ready ones
    # with its node's loss, or is not started at a drain (fleet.node.jobend).
    stopped: bool = False


@message("preload")
class Preload:
    """coordinator -> agent -> zygote: import these modules once, between forks, so
    every later call step has them (a suite's ``preload`` on a fleet already up)."""

    modules: tuple


@message("preloaded")
class Preloaded:
    """zygote -> agent -> coordinator: the answer to a Preload. ``ok`` False: none of
    ``modules`` was imported here, ``reason`` names the module and why (it failed to
    import, started a thread, or took too long); ``import_s`` is this zygote's own
    import time."""

    modules: tuple
    ok: bool
    reason: str
    import_s: float


# --- coordinator <-> agent: the done markers a node writes (fleet.control.nodemarkers) ---

@message("markers")
class Markers:
    """coordinator -> agent: write these files ([path, text] each, in order: a step's done
    marker, its journal line durable already). ``last`` numbers the last of them among all
    the files this node was given (the first is ``last - len(files) + 1``)."""

    files: list
    last: int


@message("markers_written")
class MarkersWritten:
    """agent -> coordinator: every file given up to number ``upto`` is written, but those
    numbered in ``failed`` (the coordinator writes them itself)."""

    upto: int
    failed: list = field(default_factory=list)


# --- agent <-> zygote only ------------------------------------------------------------

@message("tick")
class Tick:
    """agent -> zygote: the agent is alive (any message counts; this one says only that)."""


@message("importing")
class Importing:
    """zygote -> agent, before Hello: about to import this preload module, so that an
    import that kills the interpreter (a crash in a C extension) can be named."""

    module: str


@message("hello")
class Hello:
    """zygote -> agent: ready, single-threaded, with these modules pre-imported."""

    pid: int
    threads: int
    preload: tuple
    import_s: float


@message("refused")
class Refused:
    """zygote -> agent: cannot serve (e.g. a preload started a thread); it exits 3."""

    reason: str
    preload: bool = False  # because of its preload modules: one failed to import or started a thread


# --- client <-> coordinator -----------------------------------------------------------

@message("submit")
class Submit:
    """client -> coordinator: run this suite."""

    suite: str          # absolute path of the suite file, read by the coordinator
    force: bool = False
    serial: bool = False
    shard: str = ""     # "I/N": run only the tasks this shard owns
    new_generation: bool = False
    wait_foreign: bool = True
    only: list = field(default_factory=list)  # run only these step ids (empty: every step)
    with_deps: bool = False  # with `only`: and every step they depend on, transitively


@message("submitted")
class SubmitReply:
    """coordinator -> client: the submission's number, or why it was refused."""

    ok: bool
    submission: int = 0
    steps: int = 0
    skipped: int = 0
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # warnings for the submitter's stderr (accepted)
    fault: str = ""  # refused for the fleet's own error, not the suite's (its file unread): nothing judged


@message("progress")
class Progress:
    """client -> coordinator: what finished in a submission after ``since``."""

    submission: int
    since: int = 0


@message("progress_reply")
class ProgressReply:
    """coordinator -> client: counts, and the steps finished after ``since``."""

    submission: int
    done: bool
    counts: dict
    finished: list   # [[step, outcome, attempt, seconds, reason], ...] after `since`
    next: int
    full: str = ""   # why the fleet drained: its run directory's file system is full or read-only
    early: str = ""  # why the fleet closed it early, not drained ("nothing left can end before the drain point ...")


@message("status")
class Status:
    """client -> coordinator: the whole fleet's state, please (nodes summed up, those that
    need attention listed); with nodes_from >= 0, a page of the whole node table from there."""

    nodes_from: int = -1


@message("status_reply")
class StatusReply:
    """coordinator -> client: the fleet's state."""

    status: dict


@message("down")
class Down:
    """client -> coordinator: stop the fleet."""


@message("stopping")
class Stopping:
    """coordinator -> client, the answer to Down: going down; its running steps may
    take up to ``grace`` s to stop (the longest grace among them)."""

    grace: float = 0.0


@message("cancel")
class Cancel:
    """client -> coordinator: cancel these steps (``waiting``: also every step not yet
    started; ``all``: every step not yet ended)."""

    steps: list = field(default_factory=list)
    waiting: bool = False
    all: bool = False
    check: bool = False  # only answer what would be cancelled (cancel nothing)


@message("cancel_reply")
class CancelReply:
    """coordinator -> client: what was cancelled, and ids it did not act on. ``unknown``
    not empty: nothing was cancelled (no step of the fleet has that id)."""

    running: list = field(default_factory=list)
    waiting: list = field(default_factory=list)
    ended: list = field(default_factory=list)  # named, but already ended (or run by another fleet)
    unknown: list = field(default_factory=list)


@message("ok")
class Ok:
    """A bare acknowledgement (``what`` says of what). An agent's last word is
    ``Ok("bye")``; ``signal`` names the signal that stopped it, if one did (the batch
    system ending the job: fleet.node.jobend). ``Ok("warned", signal=...)``: the batch
    system's warning signal reached the agent (the coordinator drains), or, zygote to
    agent, the zygote (the exits it sends after it are the warned steps'). A goodbye after
    the agent's zygote died under it says how (``zygote``: "killed by SIGKILL", "exit
    status 1") and the [step, attempt] it was running then (``steps``). ``Ok("restarted")``,
    agent -> coordinator: its zygote died so (``zygote``) and the agent started a new one
    (``pid``) and ended the ``steps`` that had started in the old (fleet.node.rezygote)."""

    what: str = ""
    signal: str = ""
    zygote: str = ""
    steps: tuple = ()
    pid: int = 0


@message("error")
class Error:
    """An error reply: ``reason`` says why."""

    reason: str


from fleet.wire import shapes  # noqa: E402  (it reads this module's tables: imported last)
