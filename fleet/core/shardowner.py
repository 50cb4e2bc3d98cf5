"""Which shard of `--shard I/N` owns a task: a stable function of the task's id — id mod
N for integer ids, a stable hash otherwise — never of what is still pending, so that
ownership does not move as work completes (fleet.control.shard splits a suite by it; the
report names another shard's step by it). Pure: no I/O."""

from __future__ import annotations

import hashlib


def owner(task: str, n: int) -> int:
    """The shard that owns a task (steps sharing a task share an owner)."""
    if task.isdigit():
        try:
            return int(task) % n
        except ValueError:  # a digit int() does not read ("²"): hashed, as any other text
            pass
    return int.from_bytes(hashlib.sha256(task.encode()).digest()[:8], "big") % n
