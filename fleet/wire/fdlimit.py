"""The open-file limit of a fleet process: its soft limit raised toward the hard one.

A coordinator holds a descriptor for each node's connection (ZeroMQ's TCP connections)
besides its journal, sockets and clients, so a fleet of 1,000 nodes under the common
soft limit of 1,024 runs out (EMFILE) as its nodes join. Batch jobs inherit the login
shell's soft limit; the hard limit is usually far above it, and a process may raise its
own soft limit up to it. The raise is bounded by what the fleet needs (not the hard
limit itself, which may be a million: programs the fleet starts inherit the soft
limit, and some close every descriptor up to it).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

SPARE = 1024  # descriptors besides the nodes': journal, logs, clients, the launcher's pipes


INF = resource.RLIM_INFINITY


def _text(n: int) -> str:
    return "unlimited" if n == INF else str(n)


@dataclass(frozen=True)
class FdLimit:
    """The soft limit before and after the raise, the hard limit, and the number wanted
    (RLIM_INFINITY where a limit is unlimited)."""

    before: int
    soft: int
    hard: int
    need: int

    def enough(self) -> bool:
        return self.soft == INF or self.soft >= self.need

    def line(self) -> str:
        """What coordinator.log says of it."""
        if not self.enough():
            return (f"open files: the limit is {self.soft} (hard {_text(self.hard)}), below the ~{self.need} this "
                    f"fleet may need (a descriptor a node): raise the hard limit (ulimit -Hn, or the site's "
                    f"limits.conf) before fleet up, or nodes will fail to join")
        if self.soft != self.before:
            return f"open files: soft limit raised from {_text(self.before)} to {self.soft} (hard {_text(self.hard)})"
        return f"open files: limit {_text(self.soft)} (hard {_text(self.hard)}), enough for ~{self.need}"


def for_nodes(nodes: int) -> int:
    """The descriptors a coordinator of `nodes` nodes may hold at once: one a node's
    connection (measured: ~26 at rest and one more for each agent), and SPARE."""
    return max(nodes, 0) + SPARE


def raise_soft(need: int) -> FdLimit:
    """Raise this process's soft RLIMIT_NOFILE to `need` (never above the hard limit,
    never lowered). Returns the limits, for the log."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    now = soft
    if soft != INF and need > soft:
        want = need if hard == INF else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            now = want
        except (ValueError, OSError):  # (the kernel's nr_open below it: keep what there is)
            pass
    return FdLimit(before=soft, soft=now, hard=hard, need=need)
