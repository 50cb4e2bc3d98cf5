"""The agent's side of memory limits: the watchdog, and what each step's exit says of memory.

The agent sees every Launch (the step's memory), Started (its process group) and
Exited of its node. With a cgroup mechanism (fleet.node.memlimit) the kernel holds
the limit; after the exit the agent reads the step's cgroup (its peak; OOM kills in
it) and removes it, retrying while the last of its processes are still dying. With
the watchdog, the agent samples the resident memory of each limited step's process
group every :data:`WATCH_S` seconds (one pass over the node's processes for all of
them), and SIGKILLs a group past its memory.

RSS double-counts what a forked step shares with its zygote (the pre-imported
modules), so a group whose summed RSS passes its limit is measured again by its
processes' private memory (USS, from smaps: dearer, so only then); only that,
past the limit, kills. The cgroup charges a step alike: for the pages it touches,
not the ones it shares.

Either way an exit so caused is rewritten, before it is relayed, to outcome
``out_of_memory`` with an error naming the peak and the declaration, and every limited
step's Exited carries its peak (``memory_peak``: the cgroup's, or the watchdog's
sampled one). A step the kernel's OOM killer took within its own limit (the node or a
parent cgroup ran out: fleet.node.memlimit.usage tells them apart) stays ``terminated``
(the coordinator names its neighbours), and a step that exits as it would despite OOM
kills in it (its shell waited on a child the kernel killed, and exited 0) keeps its
outcome; either way its Exited carries ``oom_kills`` and its error says what happened.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from dataclasses import dataclass

import psutil

from fleet.core import states as S
from fleet.core.units import format_memory
from fleet.node import memlimit as M
from fleet.wire import messages as P

WATCH_S = 0.25  # between two samples of the watchdog
REMOVE_TRIES = 200  # ticks a dying step's cgroup is retried for before it is left to release()


@dataclass
class Watched:
    pgid: int
    limit: int
    peak: int = 0
    killed: bool = False


class Enforcer:
    """One agent's memory limits (its node's :class:`fleet.node.memlimit.Choice`)."""

    def __init__(self, choice: M.Choice, interval: float = WATCH_S):
        self.choice = choice
        self.interval = interval
        self.limits: dict[tuple[str, int], int] = {}  # limited steps launched and not yet exited
        self.watched: dict[tuple[str, int], Watched] = {}
        self.dying: dict[str, int] = {}  # cgroup dirs to remove -> tries left
        self.next_sample = time.monotonic()
        self.samples = 0

    @property
    def cgroups(self) -> bool:
        return self.choice.kind in (M.CGROUP1, M.CGROUP2)

    def launched(self, msg: P.Launch) -> None:
        limit = M.limited(msg)
        if limit and self.choice.kind != M.NONE:
            self.limits[(msg.step, msg.attempt)] = limit

    def started(self, msg: P.Started) -> None:
        limit = self.limits.get((msg.step, msg.attempt))
        if limit and self.choice.kind == M.WATCHDOG:
            self.watched[(msg.step, msg.attempt)] = Watched(msg.pgid, limit)

    def dropped(self, msg: P.Dropped) -> None:
        """A queued launch its node dropped unstarted (fleet.node.queued): nothing to judge."""
        self.limits.pop((msg.step, msg.attempt), None)

    def exited(self, msg: P.Exited, payload: bytes) -> bytes:
        """The Exited to relay: ``payload`` as it came, or re-encoded with what memory says."""
        key = (msg.step, msg.attempt)
        limit = self.limits.pop(key, 0)
        watched = self.watched.pop(key, None)
        if not limit:
            return payload
        if self.cgroups:
            path = M.cgroup_dir(self.choice, msg.step, msg.attempt)
            used = M.usage(self.choice, path)
            if not M.remove(path):  # something the step started is still in it: it ends too
                M.kill_members(path)
                self.dying[path] = REMOVE_TRIES
            judged = judge_cgroup(msg, limit, used, self.choice)
        elif watched is not None:
            judged = judge_watched(msg, watched)
        else:
            return payload
        return payload if judged is msg else P.encode(judged)

    def due_in(self, now: float) -> float | None:
        """Seconds until the next sample or removal retry; None if nothing waits."""
        if self.watched or self.dying:
            return max(0.0, self.next_sample - now)
        return None

    def tick(self, now: float) -> None:
        """Sample (watchdog) and retry removals, if it is time."""
        if now < self.next_sample:
            return
        self.next_sample = now + self.interval
        for path in list(self.dying):
            self.dying[path] -= 1
            if M.remove(path) or self.dying[path] <= 0:
                del self.dying[path]
        if self.watched:
            self.sample()

    def sample(self) -> None:
        """One pass over the node's processes: each watched group's memory; kill past it."""
        self.samples += 1
        groups = {w.pgid: w for w in self.watched.values() if not w.killed}
        members: dict[int, list[int]] = {g: [] for g in groups}
        rss = dict.fromkeys(groups, 0)
        for pid in psutil.pids():
            try:
                g = os.getpgid(pid)
                if g in rss:
                    rss[g] += _rss(pid)
                    members[g].append(pid)
            except (OSError, psutil.Error):
                continue  # gone meanwhile
        for g, w in groups.items():
            used = rss[g]
            if used > w.limit:
                used = _private(members[g])
            w.peak = max(w.peak, used)
            if used > w.limit:
                w.killed = True
                try:
                    os.killpg(g, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def close(self) -> None:
        """At the agent's end, after its zygote: every cgroup of this agent removed."""
        deadline = time.monotonic() + 2.0
        while self.dying and time.monotonic() < deadline:
            for path in list(self.dying):
                if M.remove(path):
                    del self.dying[path]
            time.sleep(0.02)
        M.release(self.choice)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STATM = os.path.isdir("/proc/self") and os.path.exists("/proc/self/statm")


def _rss(pid: int) -> int:
    """A process's resident bytes: /proc/PID/statm where there is one (a third of
    psutil's cost, which reads /proc/PID/stat as well to know the process), else psutil."""
    if _STATM:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    return psutil.Process(pid).memory_info().rss


def used_by(pids: list[int], limit: int) -> int:
    """The bytes ``pids`` use as the watchdog measures a group: summed RSS, and past
    ``limit`` their private memory (what it kills for)."""
    rss = 0
    for pid in pids:
        try:
            rss += _rss(pid)
        except (OSError, psutil.Error, ValueError):
            continue  # gone meanwhile
    return _private(pids) if rss > limit else rss


WATCHDOG_HOW = f"killed by the fleet's watchdog (sampled every {WATCH_S:g} s, private memory of its process group)"


def _private(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().uss
        except (psutil.Error, OSError):
            continue
    return total


def node_used(offered: int = 0) -> int:
    """Bytes in use on this node (total less available: one read of /proc/meminfo). An
    agent offering ``offered`` bytes of a larger machine (a local fleet's pretend node:
    they share it) says its share of that: the machine's use times offered / total."""
    vm = psutil.virtual_memory()
    used = vm.total - vm.available
    return int(used * offered / vm.total) if 0 < offered < vm.total else int(used)


def oom_reason(peak: int | None, limit: int, how: str) -> str:
    """The error of an out_of_memory exit: its peak, its declaration and what ended it."""
    seen = format_memory(peak) if peak else "an unknown amount"
    return f"out of memory: used {seen} of its memory {format_memory(limit)}; {how}"


def _oom(msg: P.Exited, peak: int | None, limit: int, how: str) -> P.Exited:
    return dataclasses.replace(msg, outcome=S.OUT_OF_MEMORY, memory_peak=peak, error=oom_reason(peak, limit, how))


def judge_cgroup(msg: P.Exited, limit: int, used: M.Usage | None, choice: M.Choice) -> P.Exited:
    """The exit, as the step's cgroup tells it: out_of_memory if the kernel killed in it
    for its own limit (or it failed on a MemoryError at its limit); else as it ended,
    with its peak and, if the kernel's OOM killer took any of its processes, a word of it
    (:func:`oom_note`)."""
    if used is None:
        return msg
    described = M.DESCRIBED[choice.kind]
    stopped = msg.outcome in (S.TIMED_OUT, S.CANCELLED) or msg.outcome == S.SUCCEEDED
    if not stopped and used.own_oom:
        return _oom(msg, used.peak, limit, f"killed by the kernel at its {described}")
    if not stopped and used.hit_limit and "MemoryError" in (msg.error or ""):
        return _oom(msg, used.peak, limit, f"a MemoryError at its {described}")
    if not used.oom_kills:
        return dataclasses.replace(msg, memory_peak=used.peak)
    note = oom_note(used, limit, described)
    return dataclasses.replace(msg, memory_peak=used.peak, oom_kills=used.oom_kills,
                               error=f"{msg.error}; {note}" if msg.error else note)


def oom_note(used: M.Usage, limit: int, described: str) -> str:
    """What a step that did not end out_of_memory is told of the OOM kills in it: at its
    own limit (it went on, and exited as it did: its outcome is its exit's), or the
    node's or a parent cgroup's (its neighbours are named by the coordinator)."""
    n = used.oom_kills
    who = f"{n} process{'es' if n > 1 else ''} of it"
    seen = format_memory(used.peak) if used.peak else "an unknown amount"
    if used.own_oom:
        return f"the kernel killed {who} at its memory {format_memory(limit)} ({described}; used {seen})"
    return (f"the kernel's OOM killer took {who} within its memory {format_memory(limit)} (used {seen}): "
            "the node or a parent cgroup ran out")


def judge_watched(msg: P.Exited, w: Watched) -> P.Exited:
    """The exit of a watched step: out_of_memory if the watchdog killed it."""
    if w.killed and msg.outcome != S.SUCCEEDED:
        return _oom(msg, w.peak, w.limit, WATCHDOG_HOW)
    return dataclasses.replace(msg, memory_peak=w.peak or None)
