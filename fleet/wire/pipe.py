"""Messages between an agent and its zygote, over a pair of OS pipes.

A frame is a 4-byte big-endian length followed by that many bytes of msgpack: a
map holding the message's fields plus ``type`` and ``version``. :func:`encode` and
:func:`decode` convert one message to and from that msgpack map (without the
length); :func:`write_message`, :func:`read_message` and :class:`FrameReader` add and
strip the length.

The agent sends :class:`Launch`, :class:`Kill` and :class:`Shutdown`; the zygote
answers with :class:`Hello` or :class:`Refused` once at start, then
:class:`Started` and :class:`Exited` for every step.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

import msgpack

PROTOCOL_VERSION = 1

# A launch carries a step's args; anything near this size is a bug or garbage, and a
# bound keeps a corrupt length from making the reader buffer gigabytes.
MAX_FRAME = 16 * 1024 * 1024

_HEADER = struct.Struct(">I")


@dataclass(frozen=True)
class Launch:
    """agent -> zygote: start one attempt of a step."""

    type: ClassVar[str] = "launch"
    step: str
    attempt: int
    kind: str  # "call" | "command"
    call: str  # "pkg.mod:func" for kind "call", else ""
    args: dict
    command: Union[list, str, None]  # argv list, or a str run through /bin/sh -c
    cores: tuple
    gpus: tuple
    memory: int  # bytes
    workdir: str  # absolute
    log: str  # absolute path of the step's log (fds 1 and 2)
    run_dir: str
    inputs: tuple = ()
    outputs: tuple = ()
    placement: tuple = ()  # ((node, cores, gpus, memory), ...)
    decided_at: float = 0.0  # time.time() when the coordinator decided
    env: dict = field(default_factory=dict)  # extra environment
    gpu_vars: tuple = ()  # e.g. ("CUDA_VISIBLE_DEVICES",), set to the joined gpu ids
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Kill:
    """agent -> zygote: send ``signal`` to the process group of a running step."""

    type: ClassVar[str] = "kill"
    step: str
    attempt: int
    signal: int
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Shutdown:
    """agent -> zygote: SIGTERM every step's group, SIGKILL after ``grace`` s, exit."""

    type: ClassVar[str] = "shutdown"
    grace: float
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Tick:
    """agent -> zygote: the agent is alive (any message counts; this one says only that)."""

    type: ClassVar[str] = "tick"
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Hello:
    """zygote -> agent: ready, single-threaded, with these modules pre-imported."""

    type: ClassVar[str] = "hello"
    pid: int
    threads: int
    preload: tuple
    import_s: float
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Refused:
    """zygote -> agent: cannot serve (e.g. a preload started a thread); it exits 3."""

    type: ClassVar[str] = "refused"
    reason: str
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Started:
    """zygote -> agent: a step's process exists, in process group ``pgid``."""

    type: ClassVar[str] = "started"
    step: str
    attempt: int
    pid: int
    pgid: int
    at: float
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Exited:
    """zygote -> agent: a step's process was reaped (or could not be started: pid 0).

    Times are time.time() values: ``first_at`` is the child's first instruction
    after fork (spawn time for a command), ``work_start``/``work_end`` bracket the
    step's own work, ``ended_at`` is the reap time.
    """

    type: ClassVar[str] = "exited"
    step: str
    attempt: int
    pid: int
    outcome: str  # "succeeded" | "failed" | "terminated"
    returncode: Union[int, None]
    signal: Union[int, None]
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
    error: Union[str, None]
    version: int = PROTOCOL_VERSION


Message = Union[Launch, Kill, Shutdown, Tick, Hello, Refused, Started, Exited]

MESSAGE_TYPES: dict[str, type] = {
    cls.type: cls for cls in (Launch, Kill, Shutdown, Tick, Hello, Refused, Started, Exited)
}

# Fields whose msgpack lists must come back as tuples (recursively: placement holds
# tuples of tuples), read from the annotations so they cannot drift from the classes.
_TUPLE_FIELDS: dict[type, frozenset] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls) if f.type.startswith("tuple"))
    for cls in MESSAGE_TYPES.values()
}


def _tuples(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


def encode(msg: Message) -> bytes:
    """The msgpack map for ``msg`` (no length prefix)."""
    if type(msg) not in _TUPLE_FIELDS:
        raise TypeError(f"not a pipe message: {msg!r}")
    body = {"type": msg.type}
    for f in dataclasses.fields(msg):
        body[f.name] = getattr(msg, f.name)
    return msgpack.packb(body, use_bin_type=True)


def decode(data: bytes) -> Message:
    """The message in one msgpack map; ValueError for anything malformed or unknown."""
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated exception types
        raise ValueError(f"not msgpack: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError(f"not a map: {type(body).__name__}")
    kind = body.pop("type", None)
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown message type {kind!r}")
    if body.get("version") != PROTOCOL_VERSION:
        raise ValueError(f"{kind}: protocol version {body.get('version')!r}, "
                         f"expected {PROTOCOL_VERSION}")
    names = {f.name for f in dataclasses.fields(cls)}
    if set(body) - names:
        raise ValueError(f"{kind}: unknown fields {sorted(set(body) - names)}")
    for name in _TUPLE_FIELDS[cls] & set(body):
        body[name] = _tuples(body[name])
    try:
        return cls(**body)
    except TypeError as exc:  # missing fields
        raise ValueError(f"{kind}: {exc}") from None


def frame(msg: Message) -> bytes:
    """``msg`` as one frame: 4-byte big-endian length + :func:`encode`."""
    payload = encode(msg)
    if len(payload) > MAX_FRAME:
        raise ValueError(f"{msg.type} message of {len(payload)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(payload)) + payload


def write_message(fd: int, msg: Message) -> None:
    """Write one frame to a blocking fd (all of it; BrokenPipeError if the reader left)."""
    view = memoryview(frame(msg))
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_message(fd: int) -> Message | None:
    """Read one frame from a blocking fd; None at a clean end of file.

    EOFError if the stream ends inside a frame, ValueError for a bad frame.
    """
    header = _read_exactly(fd, _HEADER.size)
    if not header:
        return None
    if len(header) < _HEADER.size:
        raise EOFError("end of file inside a frame header")
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes exceeds {MAX_FRAME}")
    payload = _read_exactly(fd, length)
    if len(payload) < length:
        raise EOFError(f"end of file after {len(payload)} of {length} bytes")
    return decode(payload)


class FrameReader:
    """Incremental decoder for select/poll loops: feed it bytes, get whole messages.

    A frame whose payload does not decode is skipped (its framing is still sound)
    and described in :attr:`dropped`, so one bad message never stops the loop. A
    length over :data:`MAX_FRAME` means the stream is out of step: ValueError, and
    the stream should be closed.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.dropped: list[str] = []

    @property
    def pending(self) -> int:
        """Bytes held of an incomplete frame (nonzero at EOF means a truncated frame)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Message]:
        """Add ``data``; return the messages it completed, in order."""
        self._buf += data
        out: list[Message] = []
        while len(self._buf) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buf)
            if length > MAX_FRAME:
                raise ValueError(f"frame of {length} bytes exceeds {MAX_FRAME}")
            end = _HEADER.size + length
            if len(self._buf) < end:
                break
            payload = bytes(self._buf[_HEADER.size:end])
            del self._buf[:end]
            try:
                out.append(decode(payload))
            except ValueError as exc:
                self.dropped.append(str(exc))
        return out
