"""What stopped the coordinator, said in coordinator.log and in its `fleet_down` record.

SIGTERM, SIGINT and SIGHUP stop it alike: the teardown stops its steps (each its grace),
records their ends and writes `fleet_down`, whose `signal` names the signal (none when
`fleet down` asked it, or when the fleet stopped itself: its `reason` says why then).
Before 2026-12-07 SIGHUP (sent by hand, or by a tool that hangs up the processes it
finds) killed it as a crash: no teardown, no `fleet_down`, its running
steps given no exit record, its agents dead of their parent's death; and no stop left
a line in coordinator.log saying what stopped it.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger("fleet.control.coordinator")

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopCause:
    """The first signal that stopped the coordinator (`signal`, its name), or whether
    `fleet down` asked it to (`asked`)."""

    def __init__(self, coord):
        self.coord = coord
        self.signal: str | None = None
        self.asked = False
        self.parent: int | None = None  # the process whose death SIGTERMs it (coordinator_cli arms that)

    def install(self) -> None:
        """SIGTERM, SIGINT and SIGHUP stop the fleet (main thread only, as every handler)."""
        for sig in SIGNALS:
            signal.signal(sig, self.on_signal)

    def on_signal(self, signum, frame) -> None:
        # (said at the teardown, not here: the handler may run inside a log call of the loop)
        if self.signal is None and not self.coord.stopping:
            self.signal = signal.Signals(signum).name
        self.coord.stopping = True

    def on_down(self) -> None:
        """`fleet down` asked the fleet to stop."""
        if not self.coord.stopping:
            self.asked = True
        self.coord.stopping = True

    def say(self, itself: str | None) -> None:
        """One line in coordinator.log, as the teardown begins: what stopped the fleet
        (`itself`: the reason it stopped itself, said where it decided so)."""
        if self.signal:
            log.warning("%s%s: the fleet stops (its steps get their grace)", self.signal, self._whose())
        elif self.asked:
            log.warning("asked to stop (fleet down): the fleet stops (its steps get their grace)")
        elif itself is None and self.coord.stopping:
            log.warning("the fleet stops")

    def _whose(self) -> str:
        """Where a SIGTERM may have come from: the death of the process that started the
        fleet (its death signal), said for sure once this process was given to another
        parent. (A parent killed with SIGKILL sends it as its threads end, before that:
        the parent's pid may still be this process's parent's then.)"""
        if self.signal != "SIGTERM" or not self.parent:
            return ""
        if os.getppid() != self.parent:
            return f" (the process that started it, pid {self.parent}, died)"
        return f" (sent to it, or its death signal: the process that started it, pid {self.parent}, ending)"
