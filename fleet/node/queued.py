"""The zygote's queued launches (a node's window, fleet.core.window).

A Launch with ``after`` names a step running here: it is held until that step's
process is reaped, and started then, before anything else happens in that loop turn
(the Exited of the one goes out first, then the Started of the other). A launch whose
``after`` is not running here (it ended already, or never came: the coordinator ended
it without launching it) starts at once. A Kill with ``cancel`` or ``withdraw`` of a
held launch drops it: nothing ran (reported as Dropped). A withdrawal that comes after
the launch has started does nothing: the step runs here (fleet.core.windowback).
"""

from __future__ import annotations

import dataclasses
import time

from fleet.wire import messages as P


class Queued:
    """Held launches, by the step they wait for."""

    def __init__(self) -> None:
        self._after: dict[str, list[tuple[P.Launch, bytes | None]]] = {}
        self._keys: dict[tuple[str, int], str] = {}  # (step, attempt) -> the step it waits for

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._keys

    def hold(self, msg: P.Launch, payload: bytes | None) -> None:
        """Keep ``msg`` until the step ``msg.after`` is reaped."""
        self._after.setdefault(msg.after, []).append((msg, payload))
        self._keys[(msg.step, msg.attempt)] = msg.after

    def due(self, step: str) -> list[tuple[P.Launch, bytes | None]]:
        """The launches that waited for ``step``, which was just reaped: start them now."""
        held = self._after.pop(step, None)
        if not held:
            return []
        for msg, _ in held:
            del self._keys[(msg.step, msg.attempt)]
        # Its start is decided now, when its cores came free: its startup counts from here,
        # not from when it was handed over (re-encoded, then: a few queued steps only).
        now = time.time()
        return [(dataclasses.replace(msg, decided_at=now), None) for msg, _ in held]

    def drop(self, step: str, attempt: int) -> bool:
        """Drop the held launch of this attempt; True if there was one."""
        after = self._keys.pop((step, attempt), None)
        if after is None:
            return False
        held = self._after[after]
        held[:] = [(m, p) for m, p in held if (m.step, m.attempt) != (step, attempt)]
        if not held:
            del self._after[after]
        return True

    def clear(self) -> list[tuple[str, int]]:
        """Forget every held launch (the zygote stops: none of them starts); their
        (step, attempt), to be reported Dropped."""
        dropped = list(self._keys)
        self._after.clear()
        self._keys.clear()
        return dropped
