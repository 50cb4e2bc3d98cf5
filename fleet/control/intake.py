"""A submission's way in, on the coordinator's loop, a bounded piece per turn.

A client's Submit is answered when its submission is in, not before; meanwhile the
loop keeps answering agents and clients:

1. the suite is read, checked, split for its shard and its done markers read on the
   worker thread (fleet.control.worker; fleet.control.submissions.check), with a
   copy of the fleet's nodes;
2. back on the loop, results are taken in the order the Submits came: a refusal is
   answered; an accepted one is registered (fleet.control.submissions) and, if its
   suite preloads what some zygote lacks, held (fleet.control.preloads): later ones
   wait behind it, and behind the one being entered;
3. its steps are declared (counted, recorded) DECLARE at a time, one batch per turn;
4. it is handed to the scheduler as a Submitted of CHUNK steps a part
   (fleet.core.decisions.EnterMore): as many parts a turn as the turn's time leaves
   after the agents' reports. When the scheduler says it is all in (Entering), the
   client is answered.

Steps a running step submitted (its children: fleet.control.children) come the same
way, read on the same worker thread, queued with the clients' submissions and entered
in parts; when they are in, the parent's exit goes to the scheduler.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, replace

from fleet.control import children as children_mod
from fleet.control import heap, mpimemory
from fleet.control import submissions as subs_mod
from fleet.control.submissions import Accepted, Submissions
from fleet.control.worker import Worker
from fleet.core import states as S
from fleet.core.scheduler import EnterMore, Entering
from fleet.wire import events
from fleet.wire import messages as P

log = logging.getLogger("fleet.control.coordinator")

DECLARE = 1000  # steps declared per turn (a record each: ~50 ms on a loaded 2-core machine)
CHUNK = 2000    # steps per part handed to the scheduler (Submitted.chunk; ~50 ms likewise)
_RUNS_HERE = frozenset({S.WAITING, S.READY, S.RUNNING, S.QUEUED, S.SUSPENDED})  # a step still to end here


@dataclass
class _Entry:
    ident: bytes
    msg: P.Submit
    acc: Accepted
    declared: int = 0
    fed: bool = False   # the Submitted went to the scheduler
    more: bool = False  # the scheduler paused: EnterMore next
    batch: children_mod.Batch | None = None  # children, not a client's submission
    notes: tuple = ()  # warnings the answer carries (fleet run prints them)
    takes: frozenset = frozenset()  # steps held as another shard's that it runs (Submitted.takes)


class Intake:
    """Submissions on their way in: being checked, waiting their turn, being entered."""

    def __init__(self, coord):
        self.coord = coord
        self.worker: Worker | None = None
        self.waiting: deque = deque()  # (client, Submit, Checked or refusal), in arrival order
        self.entry: _Entry | None = None
        self.children = children_mod.Children(coord, self)

    def start(self) -> None:
        self.worker = Worker("fleet-submissions")
        self.coord.submissions.offload = lambda fn, *args: self.worker.put(None, fn, *args)

    def close(self) -> None:
        """The fleet stops: clients still waiting are told, and the thread ends."""
        c = self.coord
        waiting = [(ident, msg) for ident, msg, _ in self.waiting if ident is not None]
        if self.entry is not None and self.entry.ident is not None:
            waiting.append((self.entry.ident, self.entry.msg))
        if self.worker is not None:
            waiting += [done.tag for done in self.worker.collect() if isinstance(done.tag, tuple)]
        for ident, msg in waiting:
            c.transport.reply(c.client_sock, ident, P.SubmitReply(False, problems=[
                f"{msg.suite}: the fleet is going down; nothing more of it starts"]))
        self.waiting.clear()
        self.entry = None
        if self.worker is not None:
            self.worker.close()

    def submit(self, ident: bytes, msg: P.Submit) -> None:
        """A client's Submit: checked on the worker thread, answered when it is in."""
        c = self.coord
        if not c.ready:
            c.transport.reply(c.client_sock, ident, P.SubmitReply(False, problems=["the fleet is still starting"]))
            return
        nodes = list(c.sched.pool.nodes())  # a copy: the pool changes on the loop
        unread = getattr(c.launcher, "gpus_unread", "")  # (a test's stand-in launcher may not say)
        notes = {"GPU": f"the nodes offer no GPUs: {unread}"} if unread else {}
        if held := c.nocores.note():  # (a node whose cores are all held back: fleet.control.nocores)
            notes["core"] = held
        notes = notes or None
        self.worker.put((ident, msg), checked, msg, nodes, c.run_dir, c.profile.mpi, notes)

    def collect(self) -> None:
        """Take the worker's results (its fd was readable)."""
        for done in self.worker.collect():
            if done.tag is None:  # a file write (Submissions.offload)
                if done.error is not None:
                    log.warning("writing a submission's record failed: %r", done.error)
                continue
            if isinstance(done.tag, children_mod.Tag):
                self.children.collected(done, time.time())
                continue
            ident, msg = done.tag
            result = done.value
            if done.error is not None:
                log.error("checking %s failed: %r", msg.suite, done.error)
                result = P.SubmitReply(False, problems=[f"{msg.suite}: internal error while checking: {done.error}"])
            self.waiting.append((ident, msg, result))

    def count(self) -> int:
        """Submissions not yet in: being checked, waiting, held or being entered."""
        held = self.coord.preloads.held is not None
        return (self.worker.pending if self.worker else 0) + len(self.waiting) + (self.entry is not None) + held

    def ready(self) -> bool:
        """Whether work waits for the next turn (the loop then does not sleep)."""
        e = self.entry
        if e is not None:
            return not e.fed or e.more
        return bool(self.waiting) and self.coord.preloads.held is None

    def work(self, now: float, until: float) -> None:
        """Move submissions on until `until` (time.monotonic()), a bounded piece each."""
        c = self.coord
        if self.count():
            heap.settle()  # a big submission's objects: out of the collector's sight (control/heap)
        while time.monotonic() < until:
            e = self.entry
            if e is None:
                if c.preloads.held is not None or not self.waiting:
                    return
                self._next(now)
            elif e.declared < len(e.acc.steps):
                batch = e.acc.steps[e.declared:e.declared + DECLARE]
                c.submissions.declare(e.acc, batch, now, e.takes)
                e.declared += len(batch)
            elif not e.fed or e.more:
                first, e.fed, e.more = not e.fed, True, False
                t0 = time.monotonic()
                if e.batch is not None and first:
                    c._feed(e.batch.event, now)
                else:
                    c._feed(Submissions.submitted(e.acc, e.msg, CHUNK, e.takes) if first else EnterMore(), now)
                # More parts while the turn has time for one more like this one: the loop's
                # other work came first this turn (the agents' reports were pumped before),
                # so a busy fleet's entry takes what its turns leave, an idle fleet's a turn.
                t1 = time.monotonic()
                if t1 + (t1 - t0) > until:
                    return
            else:
                return  # the scheduler has it; its Entering comes back through _act

    def _next(self, now: float) -> None:
        c = self.coord
        ident, msg, result = self.waiting.popleft()
        if isinstance(result, children_mod.Batch):
            self.entry = _Entry(None, None, result.acc, batch=result)
            return
        if isinstance(result, P.SubmitReply):
            c.transport.reply(c.client_sock, ident, result)
            return
        acc = c.submissions.register(result, msg)
        if not c.preloads.hold(ident, msg, acc):
            self.begin(ident, msg, acc, now)

    def begin(self, ident: bytes, msg: P.Submit, acc: Accepted, now: float) -> None:
        """Start entering an accepted (and no longer held) submission."""
        claims = self.coord.claims
        self.coord.submissions.announce(acc, msg, now)
        # Two shards submitted to one fleet (a job array on a `fleet up`): the steps the
        # first waits for as another shard's are this one's to run (before 2026-12-06
        # both waited for ever).
        takes = claims.ours_now(acc.deps, acc.foreign) if claims.elsewhere else frozenset()
        # (and those an earlier submission of the other shard runs here are not waited for as elsewhere)
        state = self.coord.sched.state_of
        claims.held_by_other_shards({s for s in acc.foreign - acc.done if state(s) not in _RUNS_HERE}, now, acc.ended)
        note = self.coord.drain.long_graces(acc.steps)  # (said once, to its submitter: its steps' graces)
        self.entry = _Entry(ident, msg, acc, notes=acc.notes + ((note,) if note else ()), takes=takes)

    def entering(self, d: Entering) -> None:
        """The scheduler's word on the submission being entered."""
        e = self.entry
        if e is None:
            return
        if d.entered < d.total:
            e.more = True
            return
        self.entry = None
        c = self.coord
        c.events.write(events.Entered(t=time.time(), submission=e.acc.sub.id, steps=d.total))
        if e.batch is not None:  # children: now the parent's exit (fleet.control.children)
            c._feed(e.batch.then, time.time())
            return
        c.transport.reply(c.client_sock, e.ident, P.SubmitReply(True, e.acc.sub.id, len(e.acc.sub.steps),
                                                                len(e.acc.done), notes=list(e.notes)))
        c.recorder.legacy.add(e.acc.legacy)  # their markers rewritten with the new hash, in batches


def checked(msg: P.Submit, nodes: list, run_dir, launcher: str, notes: dict | None = None):
    """fleet.control.submissions.check on the worker thread (`notes`: what its fit
    problems add, fleet.control.checks.fit_problems), and the warnings its submitter is
    to hear of the steps it would run: MPI steps' memory that `launcher` (the profile's
    `mpi`) does not enforce (fleet.control.mpimemory)."""
    c = subs_mod.check(msg, nodes, run_dir, notes, blocks=launcher == "pals")
    if isinstance(c, P.SubmitReply):
        return c
    skipped = c.done | c.foreign
    note = mpimemory.note(launcher, (s for s in c.steps if s.id not in skipped))
    return replace(c, notes=(note,)) if note else c
