"""The zygote's reports to its agent, written once per loop turn, or held a while.

Every report of a loop turn goes to the agent in one write at the turn's end. A report
of a step whose Launch allows it (`hold`, seconds: the coordinator gives it to steps
no other step waits for when the window chains steps, fleet.core.windowchain) may wait
up to that long while the zygote has launches queued: a busy node's reports then go
together, one write and one wake-up of the agent for several steps. Any other report,
or a zygote with nothing queued, flushes everything held at the turn's end, in order.
"""

from __future__ import annotations

import math
import time

from fleet.wire import framing
from fleet.wire import messages as P


class Outbox:
    """Encoded reports waiting for the end of the turn (or their hold)."""

    __slots__ = ("fd", "held", "due", "gone")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.held: list[bytes] = []
        self.due = math.inf  # time.monotonic() by which `held` is to be written
        self.gone = False  # the agent is gone: nothing is written any more

    def add(self, msg, hold: float = 0.0) -> None:
        """Report `msg` at the end of this turn, or within `hold` seconds."""
        if not self.gone:
            self.held.append(P.encode(msg))
            if hold <= 0.0:
                self.due = -math.inf
            elif self.due != -math.inf:
                self.due = min(self.due, time.monotonic() + hold)

    def wait_ms(self, queued: int) -> int | None:
        """Milliseconds the reports may still wait (None: nothing held); 0 when they are
        due now. `queued`: launches the zygote holds (none: nothing waits)."""
        if not self.held:
            return None
        if not queued or self.due == -math.inf:
            return 0
        left = self.due - time.monotonic()
        return 0 if left <= 0 else max(1, math.ceil(left * 1000))

    def flush(self) -> bool:
        """Write what is held in one write; False if the agent is gone (broken pipe)."""
        out, self.held, self.due = self.held, [], math.inf
        if not out or self.gone:
            return not self.gone
        try:
            framing.write_payloads(self.fd, out)
        except OSError:  # BrokenPipeError: the agent is gone, so are we
            self.gone = True
        return not self.gone
