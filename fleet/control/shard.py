"""Splitting one suite across several fleets (job-array elements) with --shard I/N.

A task's owner is a stable function of its id — id mod N for integer ids, a stable
hash otherwise — never of a list of what is still pending, so ownership does not move
as work completes or as shards start and restart at different times. The shard count
is recorded in the run directory for its generation; a later run with another count is
refused unless it starts a new generation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleet.core.shardowner import owner  # noqa: F401 (the API's: shard.owner; the report's too, in fleet.core)
from fleet.wire import owndirs, ownfiles, records

FILE = "shards.json"


class ShardError(ValueError):
    pass


def parse(text: str) -> tuple[int, int]:
    """"2/4" -> (2, 4); shards are numbered 0..N-1."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ShardError(f"--shard takes I/N (e.g. 0/4), got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ShardError(f"--shard {text}: need 0 <= I < N")
    return i, n


def check(run_dir: Path, n: int, new_generation: bool = False) -> None:
    """What record() would refuse, found without writing anything (fleet run's check
    before it starts an embedded fleet): ShardError if the run directory is split
    another number of ways and no new generation is asked for."""
    path = Path(run_dir) / FILE
    try:
        cur = json.loads(path.read_text())
    except FileNotFoundError:
        return
    if cur.get("shards") != n and not new_generation:
        raise _another_count(path, cur, n)


def _another_count(path: Path, cur: dict, n: int) -> ShardError:
    return ShardError(f"{path}: this run directory is split {cur.get('shards')} ways (generation "
                      f"{cur.get('generation', 1)}); a run with {n} shards would give tasks new owners. "
                      f"Use --new-generation to start a new generation with {n} shards.")


def record(run_dir: Path, n: int, new_generation: bool = False) -> int:
    """Check (or make) the run directory's shard count; the generation in force."""
    path = Path(run_dir) / FILE
    owndirs.makedirs(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, ownfiles.MODE)
        with os.fdopen(fd, "w") as f:
            json.dump({"shards": n, "generation": 1}, f)
        return 1
    except FileExistsError:
        pass
    cur = json.loads(path.read_text())
    if cur.get("shards") == n:
        return int(cur.get("generation", 1))
    if not new_generation:
        raise _another_count(path, cur, n)
    gen = int(cur.get("generation", 1)) + 1
    tmp = path.with_name(f".{FILE}.{os.getpid()}")
    ownfiles.write_text(tmp, json.dumps({"shards": n, "generation": gen, "previous": cur}))
    os.replace(tmp, path)
    return gen


def ended_there(rec: dict | None, final: dict | None) -> str | None:
    """Why another shard's step, not done here, settles as not succeeded (its dependents
    blocked), from its marker `rec` (not of this definition: the caller looked) and its
    final record, whenever written: the final record when it is newer than the marker
    (how the step last ended), else a success of another definition; None: neither.
    A final record of its fleet's allocation (records.of_allocation: that fleet lost the
    nodes) is none: the step waits for that shard's next run, as one its fleet drained."""
    good = rec if rec is not None and rec.get("outcome") == "succeeded" else None
    if records.of_allocation(final):
        final = None
    if final is not None and (good is None or float(final.get("at") or 0) >= float(good.get("ended_at") or 0)):
        return records.ended_in_fleet(final)
    if good is not None:
        where = f" in fleet {good['fleet']}" if good.get("fleet") else ""
        return f"another definition of it succeeded{where}: run its own shard again with this suite"
    return None


def ended_before(run_dir: Path, ids, markers: dict) -> dict[str, str]:
    """ended_there() of another shard's steps not done for this submission (`ids`), as
    found when it is checked (`markers`: each step's done marker read, no entry where
    the step has no directory): one read of the final record of each with a directory,
    on the submission's worker thread."""
    out = {}
    for sid in ids:
        if sid in markers:
            why = ended_there(markers[sid], records.read_final(run_dir, sid))
            if why is not None:
                out[sid] = why
    return out
