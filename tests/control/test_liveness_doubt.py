"""The heartbeat reads the agents' waiting messages before judging silence only when
some agent is half way to its timeout (fleet.control.liveness.Liveness.doubtful): a
read of thousands of queued reports held a loop turn, and the launches decided in it,
for seconds, where nobody could have been judged lost anyway. A real Transport."""

from __future__ import annotations

import time

from fleet.control.liveness import Liveness
from fleet.control.transport import Transport
from fleet.wire import messages as P
from fleet.wire.events import EventLog


def test_nobody_is_in_doubt_while_every_agent_was_heard_within_half_the_timeout_and_a_silent_one_is(tmp_path):
    transport = Transport()
    log = EventLog(tmp_path / "events.jsonl")
    try:
        liveness = Liveness(transport, log, 2, 1.0, 2.0)
        for n, ident in (("n1", b"a1"), ("n2", b"a2")):
            liveness.join(ident, P.Join(n, "h", [0], [], 1 << 30, 1, 2, []), 0.0, False)
        assert not liveness.doubtful()
        deadline = time.monotonic() + 30
        while not liveness.doubtful() and time.monotonic() < deadline:
            liveness.listening_ended()  # short loop turns: listened all along
            liveness.known(b"a1", P.Heartbeat("n1"))  # n1 keeps talking, n2 says nothing
            liveness.listening()
            time.sleep(0.01)
        assert liveness.doubtful() and not list(liveness.beat(time.time()))  # in doubt, not yet lost
        liveness.known(b"a2", P.Heartbeat("n2"))
        assert not liveness.doubtful()  # both heard: no read needed before the beat
    finally:
        log.close()
        transport.close()
