"""Messages over a byte stream (the pipes between an agent and its zygote).

A frame is a 4-byte big-endian length followed by that many bytes of payload: one
message as :func:`fleet.wire.messages.encode` makes it, the same bytes ZeroMQ carries
as one frame. So the agent can relay a payload between the two transports as it
came, after checking it with :func:`fleet.wire.messages.decode`.

:func:`write_message`, :func:`write_payload` and :func:`read_message` work on blocking
descriptors; :class:`FrameReader` decodes incrementally for select/poll loops.

Batches. What one loop turn has for the same peer goes as one write, or one ZeroMQ
message: on a pipe, the frames back to back in one write (:func:`write_payloads`); over
ZeroMQ, one multipart message of one message per frame (coordinator -> agent: the
turn's Launches, and what follows them; agent -> coordinator: the Started, Exited and
Dropped reports of a turn). So a batch is nothing but messages in order: a receiver
reads it as it would read them one by one (a DEALER's plain recv() gets the frames one
after another), and there is no batch type to version.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from fleet.wire import messages

# A launch carries a step's args; anything near this size is a bug or garbage, and a
# bound keeps a corrupt length from making the reader buffer gigabytes. Larger than
# ZeroMQ's bound (messages.MAX_FRAME): whatever the agent relays fits either way, and
# a zygote driven directly (benchmarks, tests) may be given larger launches.
MAX_FRAME = 16 * 1024 * 1024

_HEADER = struct.Struct(">I")


def decode(payload: bytes) -> Any:
    """:func:`fleet.wire.messages.decode` with the pipes' size bound."""
    return messages.decode(payload, limit=MAX_FRAME)


def frame_payload(payload: bytes) -> bytes:
    """An encoded message as one frame: 4-byte big-endian length + ``payload``."""
    if len(payload) > MAX_FRAME:
        raise ValueError(f"message of {len(payload)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(payload)) + payload


def frame(msg: Any) -> bytes:
    """``msg`` as one frame."""
    return frame_payload(messages.encode(msg))


def write_payload(fd: int, payload: bytes) -> None:
    """Write an encoded message as one frame to a blocking fd (all of it;
    BrokenPipeError if the reader left)."""
    view = memoryview(frame_payload(payload))
    while view:
        view = view[os.write(fd, view):]


def write_payloads(fd: int, payloads: list[bytes]) -> None:
    """Write several encoded messages, each its own frame, in one write where the pipe
    takes it (a batch: see the module doc)."""
    view = memoryview(b"".join(frame_payload(p) for p in payloads))
    while view:
        view = view[os.write(fd, view):]


def write_message(fd: int, msg: Any) -> None:
    """Write ``msg`` as one frame to a blocking fd."""
    write_payload(fd, messages.encode(msg))


def _read_exactly(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_message(fd: int) -> Any | None:
    """Read one frame from a blocking fd; None at a clean end of file.

    EOFError if the stream ends inside a frame, ValueError (ProtocolError for the
    payload) for a bad frame.
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

    def feed(self, data: bytes) -> list[Any]:
        """Add ``data``; return the messages it completed, in order."""
        return [msg for _payload, msg in self.feed_frames(data)]

    def feed_frames(self, data: bytes) -> list[tuple[bytes, Any]]:
        """Add ``data``; return (payload, message) for each frame it completed, in
        order: the payload is what a relay forwards, the message what it reads."""
        self._buf += data
        out: list[tuple[bytes, Any]] = []
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
                out.append((payload, decode(payload)))
            except ValueError as exc:
                self.dropped.append(str(exc))
        return out
