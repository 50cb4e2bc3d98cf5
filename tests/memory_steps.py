"""Step functions for the memory-limit tests (tests/control/test_memory_limits.py)."""

from __future__ import annotations

import time


def hog(mib: int, hold: float = 60.0) -> int:
    """Touch `mib` MiB (every page written, so it is resident), then hold it."""
    data = b"\x01" * (mib << 20)
    time.sleep(hold)
    return len(data)


def hog_then_say(mib: int, ready: str, hold: float = 60.0) -> int:
    """Touch `mib` MiB, write the file `ready` (a neighbour waits for it), then hold it."""
    data = b"\x01" * (mib << 20)
    with open(ready, "w") as f:
        f.write("hogged")
    time.sleep(hold)
    return len(data)


# A command's code (python -c GROWER READY MIB): it waits for the file READY, then starts
# a process holding 50 MiB every 0.1 s up to MIB in all (each far smaller than the step
# that wrote READY, so that an OOM killer takes that step first), and ends 15 s later.
GROWER = ("import os, subprocess, sys, time\n"
          "ready, deadline, held = sys.argv[1], time.time() + 60, []\n"
          "while not os.path.exists(ready) and time.time() < deadline:\n"
          "    time.sleep(0.05)\n"
          "hold = 'import time; b = b\"\\\\x01\" * (50 << 20); time.sleep(60)'\n"
          "while len(held) < int(sys.argv[2]) // 50:\n"
          "    held.append(subprocess.Popen([sys.executable, '-c', hold]))\n"
          "    time.sleep(0.1)\n"
          "time.sleep(15)\n"
          "for p in held:\n"
          "    p.kill()\n")


def fork_sharing(mib: int, children: int, child_mib: int, hold: float = 60.0) -> int:
    """Touch `mib` MiB, then fork `children` processes that each touch `child_mib` MiB more
    of their own while sharing the first `mib` with this one (copy on write); hold all."""
    import os
    data = bytearray(mib << 20)
    data[::4096] = b"\x01" * len(range(0, len(data), 4096))  # every page written: resident
    kids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            own = b"\x02" * (child_mib << 20)
            time.sleep(hold)
            os._exit(len(own) & 1)
        kids.append(pid)
    time.sleep(hold)
    for pid in kids:
        os.waitpid(pid, 0)
    return len(data)


def hog_in_new_session(mib: int, hold: float = 60.0) -> int:
    """Run a process that touches `mib` MiB in a session of its own (as a library's
    subprocess.run(..., start_new_session=True)), and wait for it."""
    import subprocess
    import sys
    code = f"import time; b = b'\\x01' * ({mib} << 20); time.sleep({hold})"
    return subprocess.run([sys.executable, "-c", code], start_new_session=True, timeout=hold + 30).returncode


def brief(seconds: float = 0.2, mib: int = 0) -> int:
    """Touch `mib` MiB and return after `seconds`: a step shorter than a watchdog sample."""
    data = b"\x01" * (mib << 20)
    time.sleep(seconds)
    return len(data)


def spike_when(mib: int, go: str, more: int) -> int:
    """Touch `mib` MiB, wait for the file `go` (the test has sampled it meanwhile; none: a
    second), then touch `more` MiB and return at once: a spike the watchdog's samples miss."""
    import os
    data = b"\x01" * (mib << 20)
    deadline = time.monotonic() + (60 if go else 1)
    while not (go and os.path.exists(go)) and time.monotonic() < deadline:
        time.sleep(0.01)
    spike = b"\x02" * (more << 20)
    return len(data) + len(spike)


def spike_first(mib: int, go: str) -> int:
    """Touch `mib` MiB at once and free it, say so (the file `go`.spiked), then wait for
    the file `go`: a spike before the agent's first look at the step (its Started read late)."""
    import os
    data = b"\x02" * (mib << 20)
    n = len(data)
    del data
    open(go + ".spiked", "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
    return n
