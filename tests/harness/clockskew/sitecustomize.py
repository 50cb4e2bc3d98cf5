"""Test shim (on PYTHONPATH): time.time()/time_ns() shifted by the seconds in
$CLOCK_SKEW_FILE, read again every 0.2 s of the monotonic clock, which is left alone:
a host whose wall clock is set apart from the others', as NTP leaves it. File times
(mtimes the kernel sets) are not shifted, as on another host they would not be either."""

import os
import time as _t

_f = os.environ.get("CLOCK_SKEW_FILE")
if _f:
    _rt, _rtn, _mono = _t.time, _t.time_ns, _t.monotonic
    _st = {"at": -1.0, "off": 0.0}

    def _off() -> float:
        m = _mono()
        if m - _st["at"] > 0.2:
            _st["at"] = m
            try:
                with open(_f) as fh:
                    _st["off"] = float(fh.read().strip() or 0)
            except (OSError, ValueError):
                pass
        return _st["off"]

    _t.time = lambda: _rt() + _off()
    _t.time_ns = lambda: _rtn() + int(_off() * 1e9)
