"""A frame too big for ZeroMQ, found before it is sent.

A socket drops an inbound frame over its MAXMSGSIZE (messages.MAX_FRAME) and, with it,
the connection it came on: the sender is told nothing. Before 2026-12-07 a Launch of
1 MiB took its node's agent down (and the next node's, and the fleet's), and a client's
request of 1 MiB (a submission of a big `only=` selection) waited 60 s to be told the
coordinator "did not answer". So a sender checks the length of what it has encoded."""

from __future__ import annotations

from fleet.wire.messages import MAX_FRAME


class TooBig(ValueError):
    """An encoded message over MAX_FRAME: not sent (its text says what, how big, the limit)."""


def over(what: str, size: int) -> TooBig:
    """The error for `what`, a message of `size` bytes over MAX_FRAME."""
    return TooBig(f"{what} is {size:,} bytes, over the {MAX_FRAME:,} bytes (1 MiB) of a fleet message, "
                  f"so it was not sent")


def checked(frame: bytes, what: str) -> bytes:
    """frame, if it is at most MAX_FRAME bytes; else TooBig naming `what`."""
    if len(frame) > MAX_FRAME:
        raise over(what, len(frame))
    return frame
