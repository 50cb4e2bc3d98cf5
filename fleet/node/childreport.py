"""The records a call step's child writes to the zygote's report pipe (shared by all
its children): ``begin`` just before the step's own work and ``end`` just after. Each
is one ``os.write`` shorter than PIPE_BUF, so records of different children never mix.
"""

from __future__ import annotations

import os
import select
import sys
import time

import msgpack

from fleet.node import stepcontext

# Room below PIPE_BUF (4096 on Linux, 512 by POSIX) for a report record.
_REPORT_MAX = 4000 if sys.platform.startswith("linux") else select.PIPE_BUF


def write_report(fd: int, record: dict) -> None:
    """Write one record to the report pipe in a single atomic write. Text UTF-8 cannot
    carry (a lone surrogate: an undecodable byte of a file name, as os.listdir gives it)
    is written escaped (:func:`escaped`), and a value msgpack cannot pack as its repr:
    before 2026-12-06 such a record was lost, and with it the step's reason (its
    ``fleet.Broken`` was even retried, as a plain failure)."""
    try:
        data = msgpack.packb(record, use_bin_type=True)
    except (ValueError, TypeError, OverflowError):  # (UnicodeEncodeError is a ValueError)
        record = _packable(record)
        data = msgpack.packb(record, use_bin_type=True)
    if len(data) > _REPORT_MAX:
        # A huge core list or a wordy error: keep placement_ok and the error's start.
        error = record.get("error")
        record = dict(record, affinity=[], error=error[:200] if isinstance(error, str) else None)
        data = msgpack.packb(record, use_bin_type=True)
    if len(data) > _REPORT_MAX:
        data = msgpack.packb(_least(record, len(data)), use_bin_type=True)
    os.write(fd, data)


def _least(record: dict, size: int) -> dict:
    """A record still too long once shortened (a stage too long, set round fleet.Next's
    check; a field of a kind no record has): its scalars alone, and an error saying so.
    A write over PIPE_BUF may mix with another child's, and one over the pipe's buffer
    blocks the child for good (the zygote reads the pipe when it reaps a child): a
    report never may. Its ``control`` goes (but for the count of children submitted), so
    a step that asked to go on fails (its exit status is not 0) instead."""
    keep = {k: v for k, v in record.items() if isinstance(v, (int, float, bool)) or v is None}
    keep["phase"] = record.get("phase")  # (begin or end)
    ctl = record.get("control")
    submitted = ctl.get("submitted") if isinstance(ctl, dict) else None
    error = record.get("error")
    return dict(keep, affinity=[], control={"submitted": submitted} if isinstance(submitted, int) else {},
                error=f"{error[:200] if isinstance(error, str) else ''} (fleet: its {record.get('phase')} record "
                      f"was {size:,} bytes, over the {_REPORT_MAX} a report may be: its fields were left out)")


def escaped(text: str) -> str:
    """``text`` as UTF-8 can carry it: an undecodable byte (a surrogate escape) written
    as ``\\xe9``, another lone surrogate as ``\\udce9``."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _packable(value):
    """``value`` with its text escaped and what msgpack cannot pack as its repr."""
    if isinstance(value, str):
        return escaped(value)
    if isinstance(value, dict):
        return {_packable(k): _packable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_packable(v) for v in value]
    if value is None or isinstance(value, (bool, float, bytes)) or (isinstance(value, int) and -2**63 <= value < 2**64):
        return value
    return escaped(repr(value))


def report_end(report_fd: int, first_at: float, work_start: float | None,
               work_end: float | None, affinity: list, placement_ok: bool,
               error: str | None, full: int | None = None, worked: float | None = None) -> None:
    """The ``end`` record; a step that never reached its work is given none (now).
    ``full``: the errno with which its set-up found the file system full or read-only (fleet.node.diskfull).
    ``worked``: its work's length by the monotonic clock (P.Exited.worked_s), if it worked."""
    now = time.time()
    record = {
        "pid": os.getpid(), "phase": "end", "first_at": first_at,
        "work_start": work_start if work_start is not None else now,
        "work_end": work_end if work_end is not None else now,
        "affinity": affinity, "placement_ok": placement_ok, "error": error,
        "control": stepcontext.control}
    if full is not None:
        record["full"] = full
    if worked is not None:
        record["worked_s"] = worked
    try:
        write_report(report_fd, record)
    except OSError:
        pass  # the pipe itself failed: the zygote hears the exit status alone
    except BaseException as exc:  # never the step's end without its record: the least of it then
        write_report(report_fd, dict(record, control={}, error=(
            f"{escaped(error or '')[:200]} (fleet: its end record could not be written whole: "
            f"{type(exc).__name__})")))
