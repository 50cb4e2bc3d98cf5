"""Step functions for the memory-limit tests (tests/control/test_memory_limits.py)."""

from __future__ import annotations

import time


def hog(mib: int, hold: float = 60.0) -> int:
    """Touch `mib` MiB (every page written, so it is resident), then hold it."""
    data = b"\x01" * (mib << 20)
    time.sleep(hold)
    return len(data)
