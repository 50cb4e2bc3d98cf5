"""The steps of other shards that a shard's submission waits for (`fleet run --shard`),
as `fleet run` counts them: apart from its own.

A shard's submission holds its own steps and the other shards' steps they depend on
(foreign: waited for through their outcomes, never run here:
fleet.control.submissions). The fleet counts both in the submission; `fleet run` says
its own steps, and those of other shards apart, each named with the shard that runs it
(before 2026-12-06 "suite 'sh': 9 steps" for a shard of 5, the other shard's steps
"skipped", and left "not run: run the suite again" after an interrupt).

The client reads them from the suite as the fleet does (submissions.chosen, writing
nothing): for free when it checked the suite before starting an embedded fleet; with a
fleet up, for --shard only, on a thread while the fleet enters the submission (`later`),
so the read (seconds at a million steps) does not hold the submission back. Their
markers are read as a submission reads them (markerscan.read_markers: a listing a
directory, not an open a step).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fleet.control import shard
from fleet.wire import records


@dataclass(frozen=True)
class OtherShards:
    """Other shards' steps a shard's submission holds: whose each is, and how many of
    them had succeeded when read (the fleet counts those `already done` too)."""

    owner: dict = field(default_factory=dict)  # step id -> "I/N", the shard that runs it
    done: int = 0

    def __len__(self) -> int:
        return len(self.owner)


def of(steps, foreign, shard_text: str, run_dir: Path) -> OtherShards:
    """The foreign steps among `steps` (StepSpecs, as chosen() gives them), each with its
    owner under the `--shard I/N` given, and how many have a success on record."""
    if not foreign or not shard_text:
        return OtherShards()
    from fleet.control.markerscan import read_markers
    n = shard.parse(shard_text)[1]
    theirs = [s for s in steps if s.id in foreign]
    markers = read_markers(run_dir, [s.id for s in theirs])
    owner = {s.id: f"{shard.owner(s.task, n)}/{n}" for s in theirs}
    return OtherShards(owner, sum(records.succeeded_as(markers.get(s.id), s) for s in theirs))


def read(msg, run_dir: Path) -> OtherShards:
    """With a fleet up: the submission's other shards' steps, read from its suite as the
    fleet reads it; none if it cannot be read (the fleet then says why it refuses)."""
    from fleet.control.submissions import Problems, chosen
    if not msg.shard:
        return OtherShards()
    try:
        _, _, steps, _, foreign = chosen(msg, None, run_dir, record=False)
    except (Problems, OSError, ValueError):
        return OtherShards()
    return of(steps, foreign, msg.shard, run_dir)


def later(msg, run_dir: Path) -> Callable[[], OtherShards]:
    """:func:`read` on a thread started now; the returned callable waits for its answer."""
    box: list[OtherShards] = []
    t = threading.Thread(target=lambda: box.append(read(msg, run_dir)), name="othershards", daemon=True)
    t.start()

    def answer() -> OtherShards:
        t.join()
        return box[0] if box else OtherShards()
    return answer
