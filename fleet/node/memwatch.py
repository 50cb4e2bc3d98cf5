"""The agent's side of memory limits: the watchdog, and what each step's exit says of memory.

The agent sees every Launch (the step's memory), Started (its process) and
Exited of its node. With a cgroup mechanism (fleet.node.memlimit) the kernel holds
the limit; after the exit the agent reads the step's cgroup (its peak; OOM kills in
it) and removes it, retrying while the last of its processes are still dying. With
the watchdog, the agent samples the memory of each limited step's processes every
:data:`WATCH_S` seconds (one pass over the node's processes for all of them), as
fleet.node.memmeasure counts it, and SIGKILLs a step past its memory.

A step's processes are those of its session (each step leads one: fleet.node.session),
whatever process groups they are in (`timeout`, a shell's jobs), and of the sessions
they made (setsid, subprocess's start_new_session): a session new since the last pass
whose leader's parent is a step's process is that step's from then on. A step killed
so has every process group of those sessions killed with it, at once and again at its
exit: the zygote sweeps the session of a step it stopped, not of one the agent killed.
What a step's process leaves by a double fork (its parent gone before a pass sees it)
is not followed; it is ended when the fleet stops (fleet.node.orphans).

Either way an exit so caused is rewritten, before it is relayed, to outcome
``out_of_memory`` with an error naming the peak and the declaration, and every limited
step's Exited carries its peak (``memory_peak``: the cgroup's, or the watchdog's
largest sample; a step that ended before its first sample has the look taken when it
started), or its exit's rusage where that says more (:meth:`Enforcer.rusage_peak`;
a step past its memory so, unseen by the samples, keeps its outcome and is told so:
:func:`over_note`). A step the kernel's
OOM killer took within its own limit (the node or a parent cgroup ran out:
fleet.node.memlimit.usage tells them apart) stays ``terminated``
(the coordinator names its neighbours), and a step that exits as it would despite OOM
kills in it (its shell waited on a child the kernel killed, and exited 0) keeps its
outcome; either way its Exited carries ``oom_kills`` and its error says what happened.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from dataclasses import dataclass, field

import psutil

from fleet.core import states as S
from fleet.core.units import format_memory
from fleet.node import memlimit as M
from fleet.node import memmeasure, session
from fleet.wire import messages as P

WATCH_S = 0.25  # between two samples of the watchdog
REMOVE_TRIES = 200  # ticks a dying step's cgroup is retried for before it is left to release()


@dataclass
class Watched:
    """A limited step the watchdog samples: its pid (the id of its session), its limit,
    its largest sample (the first: when it was seen started), whether a
    sample found it running (``sampled``) and killed it, and its sessions (its own and
    those its processes made)."""

    pid: int
    limit: int
    peak: int = 0
    sampled: bool = False
    killed: bool = False
    forked: bool = False  # a call step (forked from the zygote), not a command (spawned)
    began: int = 0  # a call step's high water less its own memory, at the first look (0: not read)
    sessions: set[int] = field(default_factory=set)

    def __post_init__(self):
        self.sessions.add(self.pid)


class Enforcer:
    """One agent's memory limits (its node's :class:`fleet.node.memlimit.Choice`)."""

    def __init__(self, choice: M.Choice, interval: float = WATCH_S, parent: int = 0):
        self.choice = choice
        self.interval = interval
        self.parent = parent  # the zygote: what a step forked from it shares with it is not counted
        self.limits: dict[tuple[str, int], int] = {}  # limited steps launched and not yet exited
        self.calls: set[tuple[str, int]] = set()  # those of them that are call steps
        self.start = (float("-inf"), 0, 0)  # (when, zygote, memmeasure.least_start of it)
        self.watched: dict[tuple[str, int], Watched] = {}
        self.dying: dict[str, int] = {}  # cgroup dirs to remove -> tries left
        self.next_sample = time.monotonic()
        self.samples = 0
        self.unrelated: set[int] = set()  # sessions seen to be no step's (while they last)

    @property
    def cgroups(self) -> bool:
        return self.choice.kind in (M.CGROUP1, M.CGROUP2)

    def launched(self, msg: P.Launch) -> None:
        limit = M.limited(msg)
        if limit and self.choice.kind != M.NONE:
            self.limits[(msg.step, msg.attempt)] = limit
            if msg.kind == "call":
                self.calls.add((msg.step, msg.attempt))

    def started(self, msg: P.Started) -> None:
        limit = self.limits.get((msg.step, msg.attempt))
        if limit and self.choice.kind == M.WATCHDOG:
            w = Watched(msg.pid, limit, forked=(msg.step, msg.attempt) in self.calls)
            # A first look now, for a step that may end before the first sample (its peak).
            w.peak = memmeasure.used([msg.pid], limit, self.parent)
            if w.forked and (hwm := memmeasure.high_water(msg.pid)) > w.peak:
                # What it was forked with: the zygote's pages it holds; no more than the
                # zygote holds now (what a step forked from it begins with), which a spike
                # the step made and freed before this look (its Started heard late, under
                # load) would otherwise pass for.
                w.began = min(hwm - w.peak, memmeasure.rss(self.parent) or hwm)
            self.watched[(msg.step, msg.attempt)] = w

    def dropped(self, msg: P.Dropped) -> None:
        """A queued launch its node dropped unstarted (fleet.node.queued): nothing to judge."""
        self.limits.pop((msg.step, msg.attempt), None)
        self.calls.discard((msg.step, msg.attempt))

    def exited(self, msg: P.Exited, payload: bytes) -> bytes:
        """The Exited to relay: ``payload`` as it came, or re-encoded with what memory says."""
        key = (msg.step, msg.attempt)
        limit = self.limits.pop(key, 0)
        watched = self.watched.pop(key, None)
        self.calls.discard(key)
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
            if watched.killed:  # what it still has in its sessions goes too (the zygote swept its group)
                _kill([], watched.sessions)
            # Sampled or not, its exit's rusage can show more than any sample did: a spike
            # between two samples (before 2026-12-07 a sampled step's peak was its largest
            # sample, "within its memory" for a step that needed 30 % more).
            watched.peak = self.rusage_peak(msg, watched)
            judged = judge_watched(msg, watched)
        else:
            return payload
        return payload if judged is msg else P.encode(judged)

    def forget(self, key: tuple[str, int]) -> None:
        """A step whose zygote died under it (fleet.node.rezygote): ended without an
        Exited; its cgroup removed (what is left in it killed), nothing judged."""
        watched = self.watched.pop(key, None)
        self.calls.discard(key)
        if self.limits.pop(key, 0) and self.cgroups:
            path = M.cgroup_dir(self.choice, *key)
            if not M.remove(path):
                M.kill_members(path)
                self.dying[path] = REMOVE_TRIES
        elif watched is not None:
            _kill([], watched.sessions)

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
        """One pass over the node's processes: each watched step's memory; kill past it."""
        self.samples += 1
        for key, pids in self._find().items():
            w = self.watched[key]
            if w.killed:  # not gone yet, or started since: killed again
                _kill(pids)
                continue
            if not pids:
                continue  # (a call step's child not yet in its session)
            used = memmeasure.used(pids, w.limit, self.parent)
            w.sampled = w.sampled or used > 0  # (0: all of them ended, not yet reaped)
            w.peak = max(w.peak, used)
            if used > w.limit:
                w.killed = True
                _kill(pids, w.sessions)

    def _find(self) -> dict[tuple[str, int], list[int]]:
        """Each watched step's processes: those of its sessions, in one pass (a getsid each)."""
        owner = {sid: key for key, w in self.watched.items() for sid in w.sessions}
        found: dict[tuple[str, int], list[int]] = {key: [] for key in self.watched}
        leaders, present = [], set()
        for pid in psutil.pids():
            try:
                sid = os.getsid(pid)
            except OSError:
                continue  # gone meanwhile
            present.add(sid)
            key = owner.get(sid)
            if key is not None:
                found[key].append(pid)
            elif sid == pid and sid not in self.unrelated:
                leaders.append(pid)
        self.unrelated &= present
        self._follow(leaders, found)
        return found

    def _follow(self, leaders: list[int], found: dict[tuple[str, int], list[int]]) -> None:
        """Of the sessions first seen in this pass (their ``leaders``), those whose leader's
        parent is a watched step's process are that step's from now on (a process of such a
        session made another: followed too); the others are no step's."""
        of = {pid: key for key, pids in found.items() for pid in pids}
        while leaders:
            rest = []
            for pid in leaders:
                key = of.get(_parent_of(pid))
                if key is None:
                    rest.append(pid)
                else:
                    self.watched[key].sessions.add(pid)
                    found[key].append(pid)  # (the rest of its session from the next pass)
                    of[pid] = key
            if len(rest) == len(leaders):
                break
            leaders = rest
        self.unrelated.update(leaders)

    def rusage_peak(self, msg: P.Exited, w: Watched) -> int:
        """The peak of a step at its exit: its largest sample (for a step that ended before
        a sample found it running: its size when it was seen started), or its exit's rusage
        (its largest process's high-water RSS, ``maxrss_kb``) if that is more than the high
        water it began with: a command's is
        the zygote's (set from it by the vfork that spawned it), a call step's the least
        a step forked there begins with (memmeasure.least_start: before 2026-12-06 the
        zygote's too, far above it, and a call step that ended before the agent's look
        at it, which under load its Started may come after, had no peak). 0: unknown (a
        command that ended before the agent saw it, smaller than the zygote). A call step's
        high water counts the zygote's pages it was forked with, which the watchdog's own
        count leaves out: what it added to that start is its peak (before 2026-12-07 the
        whole high water was, ~220 MiB for a 2 MiB step of a zygote holding 200 MiB).
        A sample sees only what is resident at its moment: what a step touched between two
        samples (and freed, or ended with) only its rusage shows, for a sampled step too.
        The high water is one process's RSS: it counts pages it shares with processes
        outside the step (a file others map too), which a cgroup would not charge it."""
        maxrss = (msg.maxrss_kb or 0) << 10
        if w.forked:
            # Not below what it was forked with, where the first look read that: the least
            # start is an older step's when the zygote grew since (a preload while serving),
            # and before 2026-12-07 the zygote's growth was counted as the step's (a 12 MiB
            # step "used 310MiB of its memory 100MiB").
            start = max(self._least_start(), w.began)
            return max(w.peak, maxrss - start) if 0 < start < maxrss else w.peak
        if maxrss > w.peak and maxrss > memmeasure.high_water(self.parent) > 0:
            return maxrss
        return w.peak

    def _least_start(self) -> int:
        """memmeasure.least_start of the zygote, read at most once a sample interval (a pass
        over its children: not one for each short step that ends)."""
        now = time.monotonic()
        at, parent, least = self.start
        if parent != self.parent or now - at > self.interval:
            least = memmeasure.least_start(self.parent)
            self.start = (now, self.parent, least)
        return least

    def close(self) -> None:
        """At the agent's end, after its zygote: every cgroup of this agent removed."""
        deadline = time.monotonic() + 2.0
        while self.dying and time.monotonic() < deadline:
            for path in list(self.dying):
                if M.remove(path):
                    del self.dying[path]
            time.sleep(0.02)
        M.release(self.choice)


WATCHDOG_HOW = f"killed by the fleet's watchdog (sampled every {WATCH_S:g} s, the memory of its processes)"


def _parent_of(pid: int) -> int:
    """A process's parent's pid (/proc/PID/stat); 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2:].split(None, 2)[1])  # pid (comm) state ppid ...
    except (OSError, ValueError, IndexError):
        return 0


def _kill(pids: list[int], sessions=()) -> None:
    """SIGKILL the process groups of ``pids`` (a step's processes), then every other
    group of ``sessions`` (one pass over /proc: what a pass by getsid could not see)."""
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except OSError:
            continue  # gone meanwhile
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for sid in sessions:
        session.signal_rest(sid, 0, signal.SIGKILL)


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
    """The exit of a watched step: out_of_memory if the watchdog killed it; else as it
    ended, with its peak, and a word (:func:`over_note`) if that passed its memory."""
    if w.killed and msg.outcome != S.SUCCEEDED:
        return _oom(msg, w.peak, w.limit, WATCHDOG_HOW)
    if w.peak <= w.limit:
        return dataclasses.replace(msg, memory_peak=w.peak or None)
    # Past its memory where no sample saw it (between two, or as it ended): it is not made
    # out_of_memory now. Nothing stopped it: it ended as it would have, its outputs are
    # written, and its dependents may run on them; its success made a failure behind its
    # back would not be what ran (as for a step whose child the kernel killed, oom_note).
    # Its peak and reason say it, so that its `memory` is sized from what it really used.
    note = over_note(w.peak, w.limit)
    return dataclasses.replace(msg, memory_peak=w.peak, error=f"{msg.error}; {note}" if msg.error else note)


def over_note(peak: int, limit: int) -> str:
    """What a watched step that ended as it did is told of a peak past its memory."""
    return (f"used {format_memory(peak)} of its memory {format_memory(limit)}: passed it between two of the "
            f"watchdog's samples (every {WATCH_S:g} s) or as it ended, unstopped "
            "(a memory cgroup would have killed it)")
