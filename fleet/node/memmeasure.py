"""How much memory a step's processes use, as the watchdog counts it (fleet.node.memwatch
for a node's steps, fleet.control.foreground for `fleet step`'s).

What it counts is what a memory cgroup would charge the step: every page its processes
touched, once, however many of them map it; not the pages a forked step shares with
the zygote that forked it (its preloaded modules), which the zygote touched first.
Without privilege /proc tells no page's identity (/proc/kpagecount is root's), so that
count is had per mapping: a mapping the zygote has too (a forked process's inherited
modules and heap: the same start address in /proc/ZYGOTE/maps) counts its pages private
to the process (USS); any other mapping its proportional share (PSS: each page divided
among the processes mapping it), so that memory one of the step's processes touched and
then forked children sharing counts once among them, not at all (USS) nor once per
process (RSS). A process that ran exec has inherited nothing: its PSS.

That needs /proc/PID/smaps, the dearest file of all, so cheaper bounds decide first,
each only when the one before cannot, and the count is read only in between:

1. the summed RSS (/proc/PID/statm) is never less than the count: within the limit, it
   is the answer;
2. from /proc/PID/smaps_rollup, the summed USS is never more than the count and the
   summed PSS never less: past the limit by USS, or within it by PSS, that is the
   answer; and a step of one process shares what it shares only with processes outside
   it: its USS.

What each costs on the test machine is in docs/operations.md, "Memory limits". What the
count misses: pages a forked step wrote in a mapping it inherited (the zygote's heap,
grown after the fork) and then shared with children it forked count as USS does, not
at all while they are shared; and files the step writes to a tmpfs (/dev/shm), which
a cgroup charges, not mapped: no pass over its open files either (docs/operations.md,
"What the watchdog does not count").
"""

from __future__ import annotations

import os
import time

import psutil

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STATM = os.path.exists("/proc/self/statm")
_ROLLUP = os.path.exists("/proc/self/smaps_rollup")
FRESH_S = 0.1  # the zygote's mappings, read once, serve every step counted this long after
_parent: tuple[float, int, frozenset[bytes]] = (float("-inf"), 0, frozenset())


def rss(pid: int) -> int:
    """A process's resident bytes: /proc/PID/statm where there is one (a third of
    psutil's cost, which reads /proc/PID/stat as well to know the process), else psutil."""
    if _STATM:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    return psutil.Process(pid).memory_info().rss


def high_water(pid: int) -> int:
    """A process's highest resident bytes yet (VmHWM); 0 if it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


def least_start(parent: int) -> int:
    """The least high-water RSS a call step forked from ``parent`` (a zygote) can begin
    with; 0 if unknown. A forked process's high water begins at what it has when forked
    (the pages it was given, not its parent's high water), and a spare is cloned from
    the zygote's forker helper (fleet.node.forker), forked when the zygote was smaller:
    the least of the zygote's and of its children's that run its program (the helper,
    spares, call steps, whose own high water is no less than what they began with)."""
    least = high_water(parent)
    try:
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            program = f.read()
        with open(f"/proc/{parent}/task/{parent}/children", "rb") as f:
            children = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return least
    for pid in children:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() != program:  # (an orphan it adopted, a command, a zombie)
                    continue
        except OSError:
            continue
        own = high_water(pid)
        if 0 < own < least or not least:
            least = own
    return least


def used(pids: list[int], limit: int, parent: int = 0) -> int:
    """The bytes ``pids`` (a step's processes) use as the watchdog counts them, or a
    bound of it on the same side of ``limit`` (the module's doc); ``parent``: the pid
    of the process the step was forked from (its zygote; 0: none)."""
    total = 0
    for pid in pids:
        try:
            total += rss(pid)
        except (OSError, psutil.Error, ValueError, IndexError):
            continue  # gone meanwhile
    if total <= limit:
        return total
    rolled = {}
    for pid in pids:
        try:
            rolled[pid] = _rollup(pid)
        except (OSError, psutil.Error, ValueError, IndexError):
            continue
    uss = sum(private for private, _ in rolled.values())
    pss = sum(share for _, share in rolled.values())
    if len(rolled) <= 1 or uss > limit:
        return uss
    if pss <= limit:
        return pss
    inherited = _parent_starts(parent)
    total = 0
    for pid, (private, share) in rolled.items():
        try:
            total += _by_mapping(pid, inherited) if _forked(pid, inherited) else share
        except (OSError, ValueError, IndexError):
            total += private  # gone meanwhile: what it had cannot be more (it held it no more)
    return total


def _rollup(pid: int) -> tuple[int, int]:
    """(USS, PSS) of a process: one read of smaps_rollup (Linux 4.14), else psutil's."""
    if not _ROLLUP:
        full = psutil.Process(pid).memory_full_info()
        return full.uss, getattr(full, "pss", full.uss)
    private = share = 0
    with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
        for line in f.read().split(b"\n")[1:]:
            if line.startswith(b"Pss:"):
                share = int(line.split()[1])
            elif line.startswith((b"Private_Clean:", b"Private_Dirty:")):  # (not _Hugetlb: no cgroup's)
                private += int(line.split()[1])
    return private << 10, share << 10


def _parent_starts(parent: int) -> frozenset[bytes]:
    """The start addresses of the mappings of ``parent`` (read at most every FRESH_S)."""
    global _parent
    now = time.monotonic()
    if parent <= 0:
        return frozenset()
    if _parent[1] != parent or now - _parent[0] > FRESH_S:
        try:
            with open(f"/proc/{parent}/maps", "rb") as f:
                starts = frozenset(line[:line.index(b"-")] for line in f.read().split(b"\n") if line)
        except (OSError, ValueError):
            starts = frozenset()
        _parent = (now, parent, starts)
    return _parent[2]


def _forked(pid: int, inherited: frozenset[bytes]) -> bool:
    """Whether ``pid`` still has its zygote's address space (not exec'd since): its first
    mapping (the executable's, placed anew by each exec) is one of the zygote's. One
    short read: the kernel writes /proc/PID/maps as it is read."""
    if not inherited:
        return False
    fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY)
    try:
        first = os.read(fd, 64)
    finally:
        os.close(fd)
    return first[:first.find(b"-")] in inherited


def _by_mapping(pid: int, inherited: frozenset[bytes]) -> int:
    """A forked process's count: USS of the mappings it inherited, PSS of the others."""
    with open(f"/proc/{pid}/smaps", "rb") as f:
        return _count(f.read().split(b"\n"), inherited)


def _count(lines: list[bytes], inherited: frozenset[bytes]) -> int:
    # Every mapping has the same fields in the same order (one kernel's): read by stride,
    # a quarter of the CPU of a loop over every line; any other layout by that loop.
    at = _layout(lines)
    if at is None:
        return _by_line(lines, inherited)
    n, pss, clean, dirty = at
    total = 0
    for head, share, c, d in zip(lines[0::n], lines[pss::n], lines[clean::n], lines[dirty::n]):
        if head[:head.find(b"-")] in inherited:
            total += int(c[14:-3]) + int(d[14:-3])  # Private_Clean:, Private_Dirty: ... kB
        else:
            total += int(share[4:-3])  # Pss: ... kB
    return total << 10


def _layout(lines: list[bytes]) -> tuple[int, int, int, int] | None:
    """(lines per mapping, index of Pss, Private_Clean, Private_Dirty in one) if every
    mapping of ``lines`` (smaps, split) has them at the same places; else None."""
    first = {}
    for i, line in enumerate(lines):
        key = line[:line.find(b":")] if i else b""
        if key == b"VmFlags":
            n = i + 1
            break
        first.setdefault(key, i)
    else:
        return None
    at = (n, first.get(b"Pss", -1), first.get(b"Private_Clean", -1), first.get(b"Private_Dirty", -1))
    if min(at) < 1 or (len(lines) - 1) % n or lines[-1]:
        return None
    fields = ((at[1], b"Pss:"), (at[2], b"Private_Clean:"), (at[3], b"Private_Dirty:"), (n - 1, b"VmFlags:"))
    if not all(line.startswith(name) for i, name in fields for line in lines[i::n]):
        return None
    return at


def _by_line(lines: list[bytes], inherited: frozenset[bytes]) -> int:
    total = 0
    own = True  # the mapping the fields read belong to is not inherited
    for line in lines:
        head = line[:1]
        if head == b"P":
            if line.startswith(b"Pss:"):
                if own:
                    total += int(line.split()[1])
            elif not own and line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                total += int(line.split()[1])
        elif head and head in b"0123456789abcdef":
            own = line[:line.find(b"-")] not in inherited
    return total << 10
