"""Reading a run directory's events.jsonl: whole lines, a block at a time, typed.

A line that is not a fleet record (not JSON, or JSON that is no record: a line a
killed writer cut, a disk that lost a block) is skipped, but not silently: where it was,
the records read carry a :class:`Damaged` mark, which the report counts and names
(what such a line said, an `exit` say, is missing from the report). The one line that
is skipped without a mark is the stream's last, which a live run's writer may be
writing still.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, NamedTuple

from fleet.wire import events as E


class Damaged(NamedTuple):
    """`lines` damaged lines here in the stream; `t`: the time of the record before them
    (of the one after, at a block's start), so that the mark falls in their session."""

    t: float
    lines: int
    fleet: str = ""


def events_path(run_dir: Path) -> Path:
    """The stream of a run directory (or the file itself, if given one)."""
    p = Path(run_dir)
    return p if p.is_file() else p / "events.jsonl"


# The stream is read this many bytes at a time (whole lines), and each block's records are
# gathered and dropped before the next is read: a million steps' stream is ~1 GB, and its
# records held at once came to ~7 GB (benchmarks/README.md, "fleet report on a million
# steps"). Small blocks keep the transient objects few (and the heap unfragmented by
# them); one json.loads of a MiB of lines costs no more per line than one of 32.
CHUNK_BYTES = 1 << 20


def load(run_dir: Path) -> list[E.Record | E.Unknown]:
    """The records written so far, typed (damaged lines, and a torn last line of a live
    run, skipped; no marks)."""
    out: list = []
    for block in blocks(run_dir):
        out += [rec for rec in block if type(rec) is not Damaged]
    return out


def blocks(run_dir: Path) -> Iterator[list]:
    """The records written so far, typed, CHUNK_BYTES of whole lines at a time, with a
    :class:`Damaged` mark where lines were not records: what gather_session reads
    without ever holding the whole stream's records."""
    with open(events_path(run_dir), "rb") as f:
        block, t = _whole(f), 0.0
        while block:
            after = _whole(f)  # (read ahead: the last block holds the stream's last line)
            recs = _records(block.decode("utf-8", "replace"), last=not after, t=t)  # (a torn last line may end mid-character)
            if recs:
                t = recs[-1].t
            yield recs
            block = after


def _whole(f) -> bytes:
    """The next CHUNK_BYTES of f and the rest of the line they end in."""
    block = f.read(CHUNK_BYTES)
    if block and not block.endswith(b"\n"):
        block += f.readline()  # whole lines: a multi-byte character is never cut
    return block


def _records(text: str, last: bool = False, t: float = 0.0) -> list:
    """The records of some whole lines. One parse of them as an array is much quicker
    than one per line; lines with a damaged one among them are read one by one.
    `last`: they end the stream; `t`: the time of the record before them."""
    if not text.strip():
        return []
    try:
        dicts = json.loads("[" + text.rstrip("\n").replace("\n", ",") + "]")
    except ValueError:
        return _one_by_one(text.split("\n"), last, t)
    parse = E.parse
    out = [rec for rec in map(parse, dicts) if rec is not None]
    return out if len(out) == len(dicts) else _one_by_one(text.split("\n"), last, t)


def _one_by_one(lines: list[str], last: bool, t: float) -> list:
    """The records of these lines, each run of damaged ones marked where it was."""
    end = max((i for i, line in enumerate(lines) if line.strip()), default=-1) if last else -1
    out: list = []
    bad = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = E.parse(json.loads(line))
        except ValueError:
            rec = None
        if rec is None:
            bad += i != end  # (the stream's last line: a live run's writer may not be done with it)
            continue
        if bad:
            out.append(Damaged(out[-1].t if out else (t or rec.t), bad))
            bad = 0
        out.append(rec)
    if bad:
        out.append(Damaged(out[-1].t if out else t, bad))
    return out
