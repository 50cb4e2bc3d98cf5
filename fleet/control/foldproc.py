"""A rotated journal segment folded in a process of its own, not on a thread.

`python -m fleet.control.foldproc ROOT SEGMENT PARENT_PID` runs fleet.control.fold's
fold of SEGMENT into ROOT/folded.jsonl; fleet.control.fold.rotate starts it (start())
and the recorder waits for it at the end (join()), as it did for the thread.

Why a process: on a thread the fold stalled the coordinator's loop for seconds while
it ran (1,000 simulated agents: loop turns of 4.3-4.6 s with 0.5-0.7 s of the loop's
own CPU in them; benchmarks/README.md, "A million steps of 1 s"). Two reasons, both
of one interpreter: the fold parses and encodes tens of MiB holding the interpreter
lock, and the loop, which lets go of the lock at every socket call, waits up to the
switch interval (5 ms) to get it back each time; and the fold's allocations set off
the collector's full collections, which walk the coordinator's whole heap with the
lock held (1.1-1.5 s of collections in each of those turns). A process has neither,
and runs on another core. (Starting it costs a Python start-up, once per rotation.)

The process dies with the fleet (PR_SET_PDEATHSIG; it folds nothing if the fleet is
already gone): the fold is crash-safe at every point, and a segment left unfolded is
folded at the next start. The fold's test faults (fleet.control.fold.FAULT_ENV) kill
the fleet too, as they did when the fold was the fleet's own thread.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("fleet.control.foldproc")


class Folding:
    """A fold process, with the thread's is_alive() and join() the recorder uses."""

    def __init__(self, root: Path, segment: Path):
        here = str(Path(__file__).resolve().parents[2])  # this fleet's code, whatever the path says
        path = os.pathsep.join([here, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
        # Same process group as the fleet (stopped with it); no descriptor of ours.
        self.proc = subprocess.Popen([sys.executable, "-m", "fleet.control.foldproc", str(root), str(segment),
                                      str(os.getpid())], stdin=subprocess.DEVNULL, close_fds=True,
                                     env={**os.environ, "PYTHONPATH": path})
        self.pid = self.proc.pid

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def join(self, timeout: float | None = None) -> None:
        self.proc.wait(timeout)


def start(root: Path, segment: Path) -> Folding | None:
    """Fold `segment` into root's folded journal in a new process (None if it could
    not start: the segment, a sealed journal, is folded at the next start)."""
    try:
        return Folding(root, segment)
    except OSError as e:
        log.error("could not start folding the journal %s: %s", segment, e)
        return None


def main(argv: list[str]) -> int:
    root, segment, parent = Path(argv[0]), Path(argv[1]), int(argv[2])
    from fleet.control import fold
    from fleet.node.child import set_pdeathsig
    set_pdeathsig(signal.SIGKILL)
    # Ctrl-C reaches the whole process group: the fleet decides how it stops, and waits for this fold.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() != parent:
        return 1  # the fleet is gone: its next start folds the segment
    fold.FAULT_ALSO.append(parent)  # a test fault stops the fleet as well
    fold._fold_segment(root, segment)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
