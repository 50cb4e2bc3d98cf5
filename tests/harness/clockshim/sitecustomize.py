"""A wall clock set apart or stepped, for the tests of clocks (fleet.control.drain,
fleet.node.exits, fleet.wire.sightings): with CLOCK_SKEW_FILE set, time.time() and
time.time_ns() are moved by the seconds that file holds, read again every 0.2 s of the
monotonic clock, which is left alone. A change to the file acts as a step of the wall
clock by NTP (or `date -s`) does; a constant one is a host whose clock is set apart from
the others'. For every process of a fleet started with this directory on PYTHONPATH (the
zygote's forked steps too; a command step's own clock is not moved). File times (mtimes
the kernel sets) are not moved, as on another host they would not be either."""

import os
import time as _time

_file = os.environ.get("CLOCK_SKEW_FILE")
if _file:
    _time_real, _time_ns_real, _mono = _time.time, _time.time_ns, _time.monotonic
    _state = {"at": -1.0, "off": 0.0}

    def _off() -> float:
        m = _mono()
        if m - _state["at"] > 0.2:
            _state["at"] = m
            try:
                with open(_file) as f:
                    _state["off"] = float(f.read().strip() or 0)
            except (OSError, ValueError):
                pass  # (kept: the file is written by rename, but a test may remove it)
        return _state["off"]

    _time.time = lambda: _time_real() + _off()
    _time.time_ns = lambda: _time_ns_real() + int(_off() * 1e9)
