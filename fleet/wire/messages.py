"""Messages between clients, the coordinator and agents: msgpack maps over ZeroMQ.

Every message carries the protocol version `v` and its `type`; steps' messages carry
the attempt number so a report about an earlier attempt is recognised and dropped.
Each message is a frozen dataclass; nothing else crosses the wire.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import msgpack

VERSION = 1
MAX_FRAME = 1 << 20  # larger frames are dropped unread

_TYPES: dict[str, type] = {}


class ProtocolError(ValueError):
    """A frame that is not a message we understand (logged and dropped by receivers)."""


def message(name: str):
    def register(cls):
        cls = dataclass(frozen=True)(cls)
        cls.TYPE = name
        _TYPES[name] = cls
        return cls
    return register


def encode(msg: Any) -> bytes:
    body = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    body["v"] = VERSION
    body["type"] = msg.TYPE
    return msgpack.packb(body, use_bin_type=True)


def decode(frame: bytes) -> Any:
    if len(frame) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(frame)} bytes is over the {MAX_FRAME} limit")
    try:
        body = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as e:
        raise ProtocolError(f"not msgpack: {e}") from None
    if not isinstance(body, dict):
        raise ProtocolError("not a map")
    if body.get("v") != VERSION:
        raise VersionMismatch(body.get("v"))
    cls = _TYPES.get(body.get("type"))
    if cls is None:
        raise ProtocolError(f"unknown message type {body.get('type')!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    fields = {k: v for k, v in body.items() if k in names}
    for name, want in _KINDS[cls].items():
        if name in fields and not _is(fields[name], want):
            raise ProtocolError(f"{cls.TYPE}: field {name!r} is not a {want}")
    try:
        return cls(**fields)
    except TypeError as e:
        raise ProtocolError(f"{cls.TYPE}: {e}") from None


_CHECKS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "list": (list,), "dict": (dict,)}


def _is(value, want: str) -> bool:
    """Field type checks, so a handler never meets a well-formed message of wrong types."""
    if want in ("int", "float") and isinstance(value, bool):
        return False
    return isinstance(value, _CHECKS[want])


class _Kinds(dict):
    """The checked type of every field of every message, read from its annotation."""

    def __missing__(self, cls):
        kinds = {f.name: f.type for f in dataclasses.fields(cls) if f.type in _CHECKS}
        self[cls] = kinds
        return kinds


_KINDS = _Kinds()


class VersionMismatch(ProtocolError):
    def __init__(self, got):
        self.got = got
        super().__init__(f"protocol version {got!r}, this fleet speaks {VERSION}")


# --- agent <-> coordinator ----------------------------------------------------------

@message("join")
class Join:
    node: str
    host: str
    cores: list
    gpus: list
    memory: int
    pid: int
    zygote_pid: int
    preload: list


@message("join_failed")
class JoinFailed:
    node: str
    reason: str


@message("welcome")
class Welcome:
    node: str
    heartbeat_s: float
    timeout_s: float


@message("reject")
class Reject:
    reason: str


@message("heartbeat")
class Heartbeat:
    node: str = ""


@message("launch")
class Launch:
    step: str
    attempt: int
    kind: str
    call: str
    args: dict
    command: Any
    cores: list
    gpus: list
    memory: int
    workdir: str
    log: str
    run_dir: str
    inputs: list
    outputs: list
    placement: list
    decided_at: float
    env: dict
    gpu_vars: list


@message("kill")
class Kill:
    step: str
    attempt: int
    signal: int


@message("shutdown")
class Shutdown:
    grace: float = 2.0


@message("started")
class Started:
    node: str
    step: str
    attempt: int
    pid: int
    at: float


@message("exited")
class Exited:
    node: str
    step: str
    attempt: int
    outcome: str
    returncode: Any
    signal: Any
    decided_at: float
    first_at: float
    work_start: float
    work_end: float
    ended_at: float
    utime: float
    stime: float
    maxrss_kb: int
    affinity: list
    placement_ok: bool
    error: Any


# --- client <-> coordinator -----------------------------------------------------------

@message("submit")
class Submit:
    suite: str          # absolute path of the suite file, read by the coordinator
    force: bool = False
    serial: bool = False
    shard: str = ""     # "I/N": run only the tasks this shard owns
    new_generation: bool = False
    wait_foreign: bool = True


@message("submitted")
class SubmitReply:
    ok: bool
    submission: int = 0
    steps: int = 0
    skipped: int = 0
    problems: list = field(default_factory=list)


@message("progress")
class Progress:
    submission: int
    since: int = 0


@message("progress_reply")
class ProgressReply:
    submission: int
    done: bool
    counts: dict
    finished: list   # [[step, outcome, attempt, seconds, reason], ...] after `since`
    next: int


@message("status")
class Status:
    pass


@message("status_reply")
class StatusReply:
    status: dict


@message("down")
class Down:
    pass


@message("ok")
class Ok:
    what: str = ""


@message("error")
class Error:
    reason: str
