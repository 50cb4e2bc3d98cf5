"""The zygote's queued launches (a node's window, fleet.core.window).

A Launch with ``after`` names a step running here: it is held until that step's
process is reaped, and started then, before anything else happens in that loop turn
(the Exited of the one goes out first, then the Started of the other). A launch whose
``after`` is not running here (it ended already, or never came: the coordinator ended
it without launching it) starts at once. A Kill with ``cancel`` or ``withdraw`` of a
held launch drops it: nothing ran (reported as Dropped). A withdrawal that comes after
the launch has started does nothing: the step runs here (fleet.core.windowback).

A step that ends asking to run again at once (its next stage, a restart, or to wait
for its children, which run before new work: its Exited's outcome ``next``, ``restart``
or ``wait``) comes before the steps queued behind it (the core puts
it ahead of every step queued at its priority), so they do not start: they are dropped
(:meth:`Queued.behind`), tail first, each reported Dropped after its Exited, and the
coordinator decides again (fleet.core.windoworder._stays). A launch queued behind it (or
behind one dropped so) that comes after that reap is dropped too (:meth:`Queued.gone`):
the coordinator expects its Dropped as well. Such a step is remembered until a launch of
it comes again: the coordinator's launches to a node come in order, so any launch queued
behind its earlier run comes before its own next launch.

A launch may also name a step that is itself held here (a chain, fleet.core.windowchain):
it starts when that one is reaped in turn. A held launch that is dropped hands the
launches waiting for it to the step it waited for, as the coordinator does; one whose
launch could not be made when it was due releases them at once (the zygote's reap).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time

from fleet.wire import messages as P

# The outcomes of a step that runs again at once (fleet.core.states.AT_ONCE, the same):
# a wait too, whose children (or itself, none pending) come before what was queued here.
GOES_ON = frozenset({"next", "restart", "wait"})
FORGET_S = 600.0  # how long a step that went on is remembered (Queued._remember)
# A test hook (tests only): a zygote that has started a queued launch (the step it waited
# for reaped) sleeps, before it reports either, while this file exists (at most HOLD_MOST_S),
# so that a test can kill it in between (tests/control/test_zygote_restart_unsure.py).
HOLD_FILE = os.environ.get("FLEET_TEST_PROMOTED_HOLD", "")
HOLD_MOST_S = 120.0


def test_hold() -> None:
    """(FLEET_TEST_PROMOTED_HOLD) After the start of a queued launch that came due."""
    end = time.monotonic() + HOLD_MOST_S
    while HOLD_FILE and os.path.exists(HOLD_FILE) and time.monotonic() < end:
        time.sleep(0.01)


class Queued:
    """Held launches, by the step they wait for."""

    def __init__(self) -> None:
        self._after: dict[str, list[tuple[P.Launch, bytes | None]]] = {}
        self._keys: dict[tuple[str, int], str] = {}  # (step, attempt) -> the step it waits for
        self._steps: dict[str, int] = {}  # held step -> its launches held (a chain may wait for it)
        # went on, or dropped so, since its last launch here -> when (oldest first: _forget)
        self._went_on: collections.OrderedDict[str, float] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._keys

    def hold(self, msg: P.Launch, payload: bytes | None) -> None:
        """Keep ``msg`` until the step ``msg.after`` is reaped."""
        self._after.setdefault(msg.after, []).append((msg, payload))
        self._keys[(msg.step, msg.attempt)] = msg.after
        self._steps[msg.step] = self._steps.get(msg.step, 0) + 1

    def due(self, step: str) -> list[tuple[P.Launch, bytes | None]]:
        """The launches that waited for ``step``, which was just reaped: start them now.
        Each comes back with no ``after``: it waits for nothing any more, so that a launch
        of the step it named, held again here meanwhile, cannot hold it a second time
        (a cycle the zygote's reap would walk for ever)."""
        held = self._after.pop(step, None)
        if not held:
            return []
        for msg, _ in held:
            del self._keys[(msg.step, msg.attempt)]
            self._unhold(msg.step)
        # Its start is decided now, when its cores came free: its startup counts from here,
        # not from when it was handed over (re-encoded, then: a few queued steps only).
        now = time.time()
        return [(dataclasses.replace(msg, decided_at=now, after=""), None) for msg, _ in held]

    def behind(self, step: str) -> list[tuple[str, int]]:
        """Drop the launches that waited for ``step`` (just reaped, going on) and those
        waiting for them in turn; their (step, attempt), each chain's tail first."""
        chain: list[tuple[str, int]] = []
        todo = [step]
        self._remember(step)
        while todo:
            for msg, _ in self._after.pop(todo.pop(), ()):
                del self._keys[(msg.step, msg.attempt)]
                self._unhold(msg.step)
                chain.append((msg.step, msg.attempt))
                todo.append(msg.step)
                self._remember(msg.step)
        return chain[::-1]

    def gone(self, msg: P.Launch) -> bool:
        """Whether ``msg`` is to be dropped, queued behind a step that went on (or one
        dropped so) before it came. Any launch of a step here forgets that of it."""
        if not self._went_on:
            return False
        self._went_on.pop(msg.step, None)
        if msg.after not in self._went_on:
            return False
        self._remember(msg.step)
        return True

    def _remember(self, step: str) -> None:
        """Remember that ``step`` went on (or was dropped so), and forget those that did
        longer than FORGET_S ago: a launch queued behind one is in flight for moments, not
        minutes (its node would be lost first), and a step that goes on and then runs on
        another node is never launched here again; unforgotten, a node of a million-step
        run of stages would keep an id for each."""
        now = time.monotonic()
        went = self._went_on
        went.pop(step, None)
        went[step] = now
        while now - went[next(iter(went))] > FORGET_S:  # (ends at `step` at the latest)
            went.popitem(last=False)

    def holds(self, step: str) -> bool:
        """Whether a launch of ``step`` is held here (a launch may wait behind it)."""
        return step in self._steps

    def drop(self, step: str, attempt: int) -> bool:
        """Drop the held launch of this attempt; True if there was one. What waited
        behind it waits for what it waited for."""
        after = self._keys.pop((step, attempt), None)
        if after is None:
            return False
        self._unhold(step)
        held = self._after[after]
        held[:] = [(m, p) for m, p in held if (m.step, m.attempt) != (step, attempt)]
        if step not in self._steps:  # (no other attempt of it held: never, but then they wait on)
            # Their launches name `after` from now on: a launch of `step` that comes again
            # (taken back, queued anew behind one of them) is not what they wait for.
            for m, _ in self._after.pop(step, ()):
                self._keys[(m.step, m.attempt)] = after
                held.append((dataclasses.replace(m, after=after), None))
        if not held:
            del self._after[after]
        return True

    def _unhold(self, step: str) -> None:
        n = self._steps[step] - 1
        if n:
            self._steps[step] = n
        else:
            del self._steps[step]

    def clear(self) -> list[tuple[str, int]]:
        """Forget every held launch (the zygote stops: none of them starts); their
        (step, attempt), to be reported Dropped."""
        dropped = list(self._keys)
        self._after.clear()
        self._keys.clear()
        self._steps.clear()
        return dropped
