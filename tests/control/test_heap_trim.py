"""The coordinator gives the C library's free heap back to the system (fleet.control.heap.trim).

Measured in a process of its own, through the kernel's count of its resident pages:
memory Python frees in the middle of malloc's heap stays resident until trimmed.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys

import pytest

PROBE = r"""
import json, os
from fleet.control import heap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

heap.trim(force=True)
base = rss()
keep, junk = [], []
for i in range(120_000):  # ~120 MB in objects over 512 bytes: malloc's, not Python's own arenas
    (keep if i % 50 == 0 else junk).append(bytes(1000))
keep.append(bytes(1000))  # the heap's top stays in use: free() alone cannot shrink it
full = rss()
del junk
freed = rss()
assert heap.trim(force=True) and not heap.trim()  # (then not again before TRIM_S)
print(json.dumps({"base": base, "full": full, "freed": freed, "trimmed": rss(), "trims": heap.trims}))
"""


def kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=10)


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).malloc_trim
        return True
    except (OSError, AttributeError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc(), reason="malloc_trim is glibc's")
def test_memory_python_freed_inside_the_heap_stays_resident_until_trimmed_and_then_goes_back():
    p = subprocess.Popen([sys.executable, "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=120)
    finally:
        kill_group(p)
    assert p.returncode == 0, err
    m = json.loads(out)
    grown = m["full"] - m["base"]
    assert grown > 100e6, m
    # Freed, the memory stays: the kept objects pin the heap around the holes ...
    assert m["freed"] - m["base"] > 0.8 * grown, m
    # ... until trimmed: most of what was freed (49 objects in 50) is given back.
    assert m["freed"] - m["trimmed"] > 0.7 * grown, m
    assert m["trims"]["count"] == 2 and m["trims"]["seconds"] >= 0, m
