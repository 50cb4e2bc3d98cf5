"""Test shim for the tests of clocks (put this directory first on PYTHONPATH): moves
time.time() and time.time_ns() of some processes, never the monotonic clock. File times
(mtimes the kernel sets) are not moved, as on another host they would not be either.

- CLOCKSHIM_NODE and CLOCKSHIM_S: the agent of that node (and every process
  it starts, through the environment) sees its wall clock CLOCKSHIM_S seconds off,
  as a node whose clock disagrees with the coordinator's host.
- CLOCKSHIM_FILE (or CLOCK_SKEW_FILE): every process adds the seconds the file holds
  (read again each 0.2 s of the monotonic clock), as a host whose clock NTP steps under
  the fleet, or one set apart from the others' (the zygote's forked steps too; a command
  step's own clock is not moved)."""

import os
import time as _t

_node = os.environ.get("CLOCKSHIM_NODE", "")
if _node and not os.environ.get("CLOCKSHIM_SKEWED"):
    try:
        with open("/proc/self/cmdline", "rb") as _f:
            _cmd = _f.read().split(b"\0")
    except OSError:
        _cmd = []
    if b"fleet.node.agent" in _cmd and _node.encode() in _cmd:
        os.environ["CLOCKSHIM_SKEWED"] = "1"  # (its zygote and steps inherit it)

_file = os.environ.get("CLOCKSHIM_FILE") or os.environ.get("CLOCK_SKEW_FILE", "")
if os.environ.get("CLOCKSHIM_SKEWED") or _file:
    _time, _time_ns, _mono = _t.time, _t.time_ns, _t.monotonic
    _fixed = float(os.environ.get("CLOCKSHIM_S", "0")) if os.environ.get("CLOCKSHIM_SKEWED") else 0.0
    _read = {"at": -1.0, "off": 0.0}

    def _off() -> float:
        if not _file:
            return _fixed
        m = _mono()
        if m - _read["at"] > 0.2:
            _read["at"] = m
            try:
                with open(_file) as f:
                    _read["off"] = float(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
        return _fixed + _read["off"]

    _t.time = lambda: _time() + _off()
    _t.time_ns = lambda: _time_ns() + int(_off() * 1e9)
