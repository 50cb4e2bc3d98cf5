"""Steps before fleet: when a node runs out of memory, the kernel's OOM killer takes a
step, not the coordinator, an agent or a zygote.

The kernel kills the process of the highest badness: its share of the node's memory
plus its oom_score_adj (-1000 to 1000, in thousandths of that memory). fleet's own
processes keep theirs (0 as a rule); every step process is raised to STEP_ADJ, and
what a step starts inherits it (its subprocesses, an MPI launcher and the ranks it
forks). So a step is chosen first unless a fleet process holds more than half the
node's memory, and among steps the kernel still picks the largest, as before (the
report names the neighbours of a step the kernel killed, fleet.report). The
coordinator holds a few KB for every step it was given (benchmarks/README.md, "The
coordinator's memory"), gigabytes for a million steps, on the first node, among steps:
without this, a step that overran its node could take the whole fleet down with it.

Raising one's own or one's child's value needs no privilege (lowering it below 0
would). Where /proc/<pid>/oom_score_adj cannot be written (not Linux, a read-only
/proc), nothing changes and the step runs as before.

Cost: the call steps' children are forked by the zygote's helper, which raises its
own value once (fleet.node.forker): they inherit it, no work per step. A child the
zygote forks itself raises its own (one write); a command step is raised by the zygote
right after it is spawned (one write).
"""

from __future__ import annotations

import os

STEP_ADJ = 500


def raise_for(pid: int | str = "self", adj: int = STEP_ADJ) -> bool:
    """Set the oom_score_adj of `pid` (default: this process) to at least `adj`; True
    if it is at least that now."""
    path = f"/proc/{pid}/oom_score_adj"
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        now = int(os.read(fd, 16) or b"0")
        if now >= adj:
            return True
        os.write(fd, str(adj).encode())
        return True
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)
