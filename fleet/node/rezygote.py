"""A zygote that died under its agent, unasked: the agent starts a new one.

The kernel's OOM killer picks the zygote (the big pre-imported process), a preloaded C
extension segfaults, a stray kill: before, the agent stopped and its node left the
fleet for the rest of the allocation. Now the agent, once its zygote ended (its pipe
closed, its pid ended, or a write to it failed: fleet.node.zygotewatch):

- ends what the dead zygote's steps left (their process groups and sessions, then every
  process below the agent but its watcher: fleet.node.orphans; all of it was the dead
  zygote's) and removes their memory cgroups: nothing of them outlives the fleet, and
  none of them is judged by a process that may still write its outputs;
- starts a new zygote as the first was started (the same preload modules and memory
  limits, the agent's token in its environment, the agent's own cgroup and
  oom_score_adj inherited as before), and the Preloads the old one had taken;
- tells the coordinator at once (``Ok("restarted")``, with the new zygote's pid and the
  [step, attempt] of each step that had started in the old one): it ends those steps
  (fleet.control.rezygote), logs it, and records a ``zygote_restarted`` node event;
- keeps heartbeating while the new zygote imports (a preload may take tens of seconds
  on a parallel filesystem), holding what the coordinator sends for it meanwhile;
- once the new zygote's Hello comes, writes it the launches the old one had surely not
  started (queued behind a step the old one never reaped: its process is the agent's
  child now, see unreaped; or dropped as it stopped unasked on a SIGTERM: Unstarted.held;
  each waiting for what it waited for there, the drops it made followed:
  Unstarted.dropped), in the order they came, then what was held; one queued behind a
  step of the dead zygote is stamped decided when the agent ended that step, its cores
  free (Unstarted.restamp: its startup counts from there). Every other launch
  whose Started never came may have started (a step can kill its zygote before its
  Started is written; a queued one starts as the step it waits for is reaped, and its
  Started waits for the zygote's turn to end) and ends with the steps that ran, or, still
  queued at the coordinator, runs again as its next attempt (fleet.core.unsure): none
  runs twice as one attempt.

Bounded: at most MAX_RESTARTS restarts in WINDOW_S. The next death stops the agent as
before (its node leaves the fleet), its goodbye saying why. A new zygote that dies
before its Hello (a preload that now fails to import) also stops the agent: a preload
that crashes at once is not retried in a loop.

Left as it was: the agent's watcher (fleet.node.watcher) keeps the first zygote's pid
for its frozen-node check; a gone zygote counts as stopped there, which only matters
when the agent itself is stopped (SIGSTOP) for the fence time: then the steps are
killed at once, as the new zygote's own fencing would.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time

from fleet.node import orphans, session
from fleet.wire import framing
from fleet.wire import messages as P

MAX_RESTARTS = 3  # at most this many new zygotes ...
WINDOW_S = 600.0  # ... within this many seconds; the next death stops the agent


class Restarts:
    """When this agent's zygotes were restarted (the last MAX_RESTARTS, within WINDOW_S)."""

    def __init__(self, most: int = MAX_RESTARTS, window: float = WINDOW_S):
        self.most = most
        self.window = window
        self.times: collections.deque[float] = collections.deque()
        self.total = 0

    def allow(self, now: float) -> bool:
        """True (and counted) if one more restart is within the bound."""
        while self.times and now - self.times[0] > self.window:
            self.times.popleft()
        if len(self.times) >= self.most:
            return False
        self.times.append(now)
        self.total += 1
        return True

    def refusal(self) -> str:
        """Why no more: said in the agent's goodbye after how the zygote died."""
        return (f"(restarted {len(self.times)} time(s) in the last {self.window:g} s, at most {self.most}: "
                f"not restarted again)")


class Unstarted:
    """What the agent wrote its zygote that a new zygote may need again: each launch
    not yet started (with the step it waits for, and the Kills that followed it), and
    the Preloads taken."""

    def __init__(self) -> None:
        self.frames: dict[tuple[str, int], list[bytes]] = {}  # in launch order
        self.after: dict[tuple[str, int], str] = {}
        self.preloads: list[bytes] = []
        # Dropped by a zygote that stopped on its own (a SIGTERM: `kill $PPID`), not
        # asked: surely not started. Said to the coordinator only if the agent stops
        # too (its node's loss puts them back); a new zygote is handed them again.
        self.kept: list[tuple[P.Dropped, bytes]] = []

    def refused(self, modules: tuple) -> None:
        """The zygote refused the Preload of ``modules``: not for a new zygote."""
        for i, frame in enumerate(self.preloads):
            if tuple(P.decode(frame).modules) == tuple(modules):
                del self.preloads[i]
                return

    def launched(self, key: tuple[str, int], frame: bytes, after: str) -> None:
        self.frames[key] = [frame]
        self.after[key] = after

    def killed(self, key: tuple[str, int], frame: bytes) -> None:
        if key in self.frames:
            self.frames[key].append(frame)

    def done(self, key: tuple[str, int]) -> None:
        """Started, exited or dropped: not for a new zygote."""
        self.frames.pop(key, None)
        self.after.pop(key, None)

    def dropped(self, key: tuple[str, int]) -> None:
        """The zygote dropped this held launch: as its Queued.drop did, the launches that
        waited for it wait for what it waited for (a new zygote is written them so; with
        the `after` the coordinator sent, they would start at once there, and the agent
        would judge them started, leaving them to no one: before 2026-12-06)."""
        after = self.after.get(key)
        self.done(key)
        if after is None or any(k[0] == key[0] for k in self.frames):
            return
        for k in [k for k, a in self.after.items() if a == key[0]]:  # (a window's launches: a few)
            self.after[k] = after
            self.frames[k][0] = P.encode(dataclasses.replace(P.decode(self.frames[k][0]), after=after))

    def release(self) -> list[tuple[P.Dropped, bytes]]:
        """The kept drops, now to be said (the agent stops: no new zygote runs them)."""
        kept, self.kept = self.kept, []
        for msg, _ in kept:
            self.done((msg.step, msg.attempt))
        return kept

    def held(self, running: set[str]) -> list[tuple[str, int]]:
        """The launches surely not started: each queued behind a step still ``running``
        at the zygote's death (one it never reaped: unreaped), or behind one such, or kept
        (its zygote dropped it as it stopped), or behind one such. The others may have
        been (a launch's process can start, and kill its zygote, before its Started is
        written): they end with the zygote's steps, never run twice as one attempt."""
        held: list[tuple[str, int]] = []
        waiting = set(running)
        kept = {(m.step, m.attempt) for m, _ in self.kept}
        for key in self.frames:
            if key in kept or (self.after[key] and self.after[key] in waiting):
                held.append(key)
                waiting.add(key[0])
        return held

    def replay(self, held: list[tuple[str, int]], freed_at: float) -> list[bytes]:
        """What a new zygote is written once it says hello: the Preloads, then the
        ``held`` launches, in the order they came; every other launch forgotten. Those
        queued behind a step gone with the dead zygote (not held in turn: the new one
        starts them at once) are stamped decided at ``freed_at`` (restamp)."""
        keep = set(held)
        self.kept = []
        for key in [k for k in self.frames if k not in keep]:
            self.done(key)
        self.restamp(freed_at)
        return [*self.preloads, *(f for fs in self.frames.values() for f in fs)]

    def restamp(self, freed_at: float) -> None:
        """Stamp each launch queued behind a step of the dead zygote decided at ``freed_at``
        (when that step's cores came free: the agent had ended what it left), as the
        zygote's Queued.due does when the step it waits for is reaped: its startup counts
        from there. Before 2026-12-07 it kept the coordinator's stamp from when it was
        queued, and the whole run of the step it waited for counted as its startup. One
        queued behind a launch replayed with it waits there and is stamped when that one
        ends (Queued.due). A few launches per restart: re-encoded here."""
        steps = {s for s, _ in self.frames}
        for key, after in self.after.items():
            if after and after not in steps:
                msg = P.decode(self.frames[key][0])
                if msg.decided_at < freed_at:
                    self.frames[key][0] = P.encode(dataclasses.replace(msg, decided_at=freed_at))


def end_steps(agent, clean: bool = False) -> list[list]:
    """Kill what the dead zygote's steps left running; the [step, attempt] of each that
    had started or may have (every launch not held: Unstarted.held), now ended here.
    ``clean``: it stopped itself (Ok("replace")) with no step running, having answered
    every launch it started (Started and Exited, or Dropped): each launch unanswered is
    unread, or read and left so as it drained (fleet.node.preload): never started, so held."""
    held = set(agent.unstarted.frames) if clean else set(agent.unstarted.held(unreaped(agent)))
    started = sorted(k for k in agent.graces if k not in held)
    session.kill_all(agent.pgids.values())
    # Everything below the agent but its watcher is the dead zygote's now (its steps'
    # processes, their orphans, a child it forked and had not reported yet).
    orphans.end(0.0, keep=agent.keep, log=agent._warn)
    for key in started:
        agent.pgids.pop(key, None)
        agent.graces.pop(key, None)
        agent.memory.forget(key)
    return [list(k) for k in started]


def unreaped(agent) -> set[str]:
    """The steps whose Started came that the dead zygote never reaped: each is the agent's
    child now (adopted, running or a zombie: fleet.node.orphans), until end_steps reaps it.
    The zygote starts a launch queued behind a step only once it has reaped that step, so
    what waited for one of these surely did not start; one reaped may have been followed
    by its queued launch's start, unheard (its reports wait for the turn's end, or longer:
    fleet.node.outbox). Before 2026-12-07 every step whose Exited had not come counted as
    unreaped, and such a launch ran again on the new zygote as the same attempt. A zygote
    not waited for (hello.zygote_end: it closed its pipe only) has adopted nothing here:
    then none is, and each queued launch may have started (fleet.core.unsure)."""
    mine = set(orphans.children())  # (a step's pid is its group's id: fleet.node.zygote._Step)
    return {s for (s, _), pgid in agent.pgids.items() if pgid in mine}


def kept(agent, msg, payload: bytes) -> bool:
    """(The zygote's Started, Exited or Dropped ``msg``) True if kept for a new zygote:
    dropped as its zygote stopped unasked (a SIGTERM: `kill $PPID` from a step), not
    said to the coordinator, which would leave it queued (its node is not lost) with no
    process for good (before 2026-12-06). Else what the agent wrote is done with."""
    key = (msg.step, msg.attempt)
    if isinstance(msg, P.Dropped):
        if msg.stopped and not agent.stopping:
            agent.unstarted.kept.append((msg, payload))
            return True
        agent.unstarted.dropped(key)
    else:
        agent.unstarted.done(key)
    return False


def say_kept(agent) -> None:
    """Say the launches a zygote that stopped unasked dropped (Unstarted.kept), now that
    none goes to a new one: the agent stops, and its node's loss puts them back."""
    kept = agent.unstarted.release()
    for msg, _ in kept:
        agent.pgids.pop((msg.step, msg.attempt), None)
        agent.graces.pop((msg.step, msg.attempt), None)
        agent.memory.dropped(msg)
    if kept:
        agent.report([payload for _, payload in kept])


def pipe_closed(agent, zygote_end, start) -> bool:
    """The zygote's pipe closed. Unasked, it died under ``agent``: True if a new one was
    started; else the goodbye says how (``zygote_end``: fleet.node.hello), judged by the
    coordinator (fleet.control.jobend), and what it dropped as it stopped is said. One
    that asked to be replaced (``Ok("replace")``: a preload gave it a thread,
    fleet.node.preload) is restarted so too, its reason said."""
    how, clean = zygote_end(agent.zygote), bool(agent.replacing)
    if clean:
        how, agent.replacing = f"{agent.replacing}, so it stopped ({how}): it could fork no call step safely", ""
    if not agent.stopping and closed(agent, how, start, clean):
        return True
    say_kept(agent)
    return False


def closed(agent, how: str, start, clean: bool = False) -> bool:
    """The zygote's pipe closed, unasked (``how`` it ended): True if a new one was
    started; else the agent stops, its goodbye saying why."""
    if agent.booting is not None:
        failed(agent, f"the new one {how} before saying hello")
    elif agent.restarts.allow(time.monotonic()):
        restart(agent, how, start, clean)
        return True
    else:
        agent.zygote_end = f"{how} {agent.restarts.refusal()}"
        agent.stopping = f"the zygote {agent.zygote_end}"
    return False


def restart(agent, how: str, start, clean: bool = False) -> None:
    """Start a new zygote for ``agent`` in place of the one that ``how`` died
    (``start``: fleet.node.agent.start_zygote) and tell the coordinator."""
    ended = end_steps(agent, clean)
    freed_at = time.time()  # (what they left is ended: their cores are free for what was queued behind them)
    agent.requests.close()  # (what waited for it: its launches are replayed, or ended with it)
    for fd in (agent.req_w, agent.rep_r):
        try:
            os.close(fd)
        except OSError:
            pass
    args = agent.args
    agent.zygote, agent.req_w, agent.rep_r = start(args.preload, fence=args.zygote_fence,
                                                   limits=args.memlimit.arg(), token=args.token)
    agent.requests = agent.requests.renewed(agent.req_w)
    agent.reader = framing.FrameReader()
    agent.died = how
    agent.booting = agent.unstarted.replay(sorted(agent.graces), freed_at)  # written once it says hello (booted)
    agent.preloads_replayed = len(agent.unstarted.preloads)
    agent._warn(f"the zygote {how}: started a new one, pid {agent.zygote.pid} "
                f"(restart {agent.restarts.total}); {len(ended)} step(s) that ran in it ended: "
                + (", ".join(f"{s} (attempt {a})" for s, a in ended) or "none"))
    agent.send(P.Ok("restarted", zygote=how, steps=tuple(ended), pid=agent.zygote.pid))


def boot(agent, data: bytes) -> None:
    """The new zygote's first words (``data``): at its Hello, what it is to run is
    written; a Refused (or anything else first) stops the agent, as at its start."""
    for _, msg in agent.reader.feed_frames(data):
        if agent.booting is None:
            break
        if isinstance(msg, P.Importing):
            continue
        if isinstance(msg, P.Hello):
            held, agent.booting = agent.booting, None
            agent.memory.parent = msg.pid
            agent._warn(f"the new zygote said hello (pid {msg.pid}, imported in {msg.import_s:.2f} s)")
            if held and not agent.to_zygote(*held):
                agent.stopping = agent.stopping or "the new zygote is gone"
            continue
        reason = msg.reason if isinstance(msg, P.Refused) else f"it sent {msg.TYPE} before its hello"
        failed(agent, f"the new one could not serve: {reason}")
    for reason in agent.reader.dropped:
        agent._warn(f"dropped a malformed message from the new zygote: {reason}")
    agent.reader.dropped.clear()


def failed(agent, why: str) -> None:
    """The new zygote will not serve (``why``): the agent stops, as when a zygote died
    at its start."""
    agent.booting = None
    agent.zygote_end = f"{agent.died}, was restarted, and {why}"
    agent.stopping = agent.stopping or f"the zygote {why}"
    agent.graces.clear()  # (the goodbye names no step as the killer: the loss puts them back)


def answered(agent, msg) -> bool:
    """True if ``msg`` is not for the coordinator: a Preloaded that answers a Preload
    replayed to a new zygote (the coordinator heard the first answer), a new zygote's
    first words that came as the agent stops, or the zygote's ``Ok("replace")`` (kept
    for :func:`pipe_closed`). A refused Preload is not replayed to a new zygote."""
    if isinstance(msg, (P.Importing, P.Hello)):
        return True
    if isinstance(msg, P.Ok) and msg.what == "replace":
        agent.replacing = msg.zygote or "asked to be replaced"
        return True
    if not isinstance(msg, P.Preloaded):
        return False
    if not agent.preloads_replayed:
        if not msg.ok:  # (one that gave its zygote a thread would do it again: fleet.node.preload)
            agent.unstarted.refused(msg.modules)
        return False
    agent.preloads_replayed -= 1
    if not msg.ok:
        agent._warn(f"the new zygote could not preload {', '.join(msg.modules)} again: {msg.reason}")
    return True

