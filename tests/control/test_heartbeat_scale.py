"""Heartbeats on a big allocation (fleet.control.liveness.scaled): fewer per node, so
one coordinator is not kept busy by them; benchmarks/control_scale.py measures it."""

from __future__ import annotations

from pathlib import Path

from fleet.control.coordinator import Coordinator
from fleet.control.liveness import BEATS_PER_S, TIMEOUT_BEATS, scaled


class _NoAgents:
    """A launcher that starts nothing (the coordinator is only built here)."""

    def start(self, *a, **k):
        pass

    def failed(self):
        return None

    def note_failure(self, reason):
        pass

    def stop(self):
        pass


def test_a_small_allocation_beats_as_asked_and_a_big_one_beats_less_often_with_a_longer_timeout():
    assert scaled(1.0, 10.0, 2) == (1.0, 10.0)
    assert scaled(1.0, 10.0, BEATS_PER_S) == (1.0, 10.0)
    period, timeout = scaled(1.0, 10.0, 10_000)
    assert period == 10_000 / BEATS_PER_S and timeout == TIMEOUT_BEATS * period
    assert 10_000 / period <= BEATS_PER_S  # the heartbeats a second the coordinator takes, each way
    assert scaled(1.0, 120.0, 10_000) == (period, 120.0)  # a longer timeout asked for is kept
    assert scaled(30.0, 90.0, 10_000) == (30.0, 90.0)  # as is a longer period


def test_a_coordinator_for_ten_thousand_nodes_tells_its_agents_the_scaled_heartbeat(tmp_path: Path):
    coord = Coordinator(tmp_path, 10_000, _NoAgents(), heartbeat_s=1.0, timeout_s=10.0)
    try:
        assert (coord.heartbeat_s, coord.timeout_s) == scaled(1.0, 10.0, 10_000)
        assert (coord.liveness.heartbeat_s, coord.liveness.timeout_s) == (coord.heartbeat_s, coord.timeout_s)
    finally:
        coord.transport.close()
        coord.events.close()
