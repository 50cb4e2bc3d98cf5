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
fleet up, at the cost of that read, for --shard only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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
    n = shard.parse(shard_text)[1]
    owner, done = {}, 0
    for s in steps:
        if s.id in foreign:
            owner[s.id] = f"{shard.owner(s.task, n)}/{n}"
            done += records.succeeded_as(records.read_done(run_dir, s.id), s)
    return OtherShards(owner, done)


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
