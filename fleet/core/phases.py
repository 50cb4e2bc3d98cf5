"""Steps that run in phases: steps that add steps, wait for them, and go on in stages.

A running step may submit children (steps of its own, ids `<parent>/<given id>`) and
end an attempt early in one of four ways (fleet.core.states.CONTROL), httk's ht_steps
protocol:

- wait: it waits for its children. It releases its resources and uses no attempt; it
  is SUSPENDED until every child it submitted is final, then READY again with its phase
  one higher and its children's outcomes in its Start (Resume). Nothing to wait for:
  READY at once (twice in a row with no new child: the coordinator fails the attempt
  instead, fleet.control.children).
- next: READY again at once, at the stage it named (phase one higher).
- restart: READY again at once, from scratch (phase 0, no stage), in a fresh work
  directory (the node moves the old one aside: fleet.node.protocol). Past MAX_RESTARTS
  in a run (what ``ctx.restarts`` counts) a restart is a loop: the step fails there,
  not retried (a retry would go on restarting), and its dependents are blocked.
- broken: final (BROKEN), never retried; its dependents are blocked.

A child that ended without success runs again when its parent submits it again (a
sweep that retries its failed cases once). Past MAX_RESUBMITS such submissions of one
child in a run the parent is in a loop (it submits the child whatever became of it):
the next one fails the parent there, not retried, its dependents blocked, and the
child is not entered (resubmit_loop says why; fleet.control.children fails the parent's
attempt before the children go in, as it does a refused child).

A retry (the step failed) keeps its phase and stage: the stage that failed runs again.
A start at phase 0 begins a run (its first, a retry of phase 0, a restart, a run anew):
the children a Resume reports (ctx.children) are those submitted since (_run_begins).

Order: a step that goes on, and children, are queued ahead of every step already queued
at the same priority (a sequence counting down from -1, where suite steps count up from
0): children run depth-first, before new top-level work, and a started step finishes
before new ones start. A batch of children keeps its own order.

A parent's dependents wait for its final success, which comes only after its last
phase, so after the children it waited for. A parent that succeeds without waiting for
children still to end is SUSPENDED until they have ended, then SUCCEEDED without
running again (its dependents start after its whole family, whatever the children's
outcomes: it did not look at them).
"""

from __future__ import annotations

from collections import deque
from typing import Iterator

from fleet.core import made
from fleet.core import states as S
from fleet.core.decisions import Blocked, Finished, Resume, Submitted  # noqa: F401  (Blocked: docs)


# Restarts a step may ask for in a run. Each moves its work directory aside into an
# attempt-<n> folder: before 2026-12-06 a step that restarted whatever it found did so
# ~30 times a second, for ever, filling its directory.
MAX_RESTARTS = 20
RESTART_LOOP = ("it asked to restart again after {most} restarts in this run (fleet.Restart, or exit 4 with "
                "protocol \"steps\": a loop, it seems; at most {most} a run); not retried")
# Times a parent may submit again, in a run, a child that ended without success. Before
# 2026-12-06 a parent that submitted a child that always failed in every phase did so
# for ever, a phase and a child's run each time (3,400 in 40 s as found), burning the allocation.
MAX_RESUBMITS = 20
RESUBMIT_LOOP = ("it submitted child {child} again after it ended without success {ended} times in a row in this run "
                 "(ctx.submit, or a file in $FLEET_SUBMIT_DIR with protocol \"steps\": a loop, it seems; a child "
                 "that ended without success is submitted again at most {most} times in a row); not retried")


class Family:
    """What the scheduler keeps for a step that ran in phases or submitted children."""

    __slots__ = ("phase", "stage", "restarts", "kids", "pending", "suspended", "succeeded", "again", "earlier")

    def __init__(self) -> None:
        self.phase = 0
        self.stage = ""
        self.restarts = 0
        # Every child this run submitted (since its start at phase 0), in order (a set that
        # keeps it): ctx.children. Those of earlier runs are not its own (Phases._run_begins).
        self.kids: dict[str, None] = {}
        self.pending: set[str] = set()  # children not final, of any run: it waits for them all
        # Earlier runs' children still to end as this run began, not submitted again since
        # (None: none): waited for, so counted with this run's in what it waits for.
        self.earlier: set[str] | None = None
        self.suspended = False
        self.succeeded = False  # it succeeded with children still to end: final once they have
        self.again: dict[str, int] | None = None  # child -> times submitted again after it ended without success


class Phases:
    """The scheduler's part for phases and children (a mixin, like Entries)."""

    def _phases_init(self) -> None:
        self._families: dict[str, Family] = {}
        # child id -> (parent id, seq, the front base of the submission that first entered it)
        self._parent_of: dict[str, tuple[str, int, int]] = {}
        self._front = 0  # the next front sequence is below this
        self._waiting: dict[str, None] = {}  # steps that began waiting for children, in order (suspended())
        self._later: list = []  # parents whose children all ended after the parent succeeded: to finish

    def _family(self, sid: str) -> Family:
        fam = self._families.get(sid)
        if fam is None:
            fam = self._families[sid] = Family()
        return fam

    def _link_children(self, ev: Submitted) -> None:
        """A parent's submission: its new children get front sequences, in their order, and
        the batch's base (shared: one int object for the batch, not one a child), which
        says which of a parent's submissions entered each first (entered_at)."""
        if not ev.parent:
            return
        fam = self._family(ev.parent)
        new = [s.id for s in ev.steps if s.id not in self._parent_of]
        base = self._front - len(new)
        self._front = base
        for i, cid in enumerate(new):
            self._parent_of[cid] = (ev.parent, base + i, base)
        named = ev.named or [s.id for s in ev.steps]  # known ones too: a parent run anew submits them again
        kids = fam.kids
        for cid in named:
            kids[cid] = None
        if fam.earlier:  # (this run's now)
            fam.earlier.difference_update(named)
        if len(new) < len(ev.steps):
            self._count_again(fam, ev.steps)

    def _count_again(self, fam: Family, steps) -> None:
        """Count each child submitted again after it ended without success (it runs
        again: fleet.core.generations), for resubmit_loop; one submitted again after it
        succeeded starts its count over (the loop is of failures in a row: a long
        convergence loop whose child fails now and then is none)."""
        for s in steps:
            job = self._jobs.get(s.id)
            if job is None or job.state not in S.FINAL:
                continue
            if job.state not in S.GOOD:
                if fam.again is None:
                    fam.again = {}
                fam.again[s.id] = fam.again.get(s.id, 0) + 1
            elif fam.again:
                fam.again.pop(s.id, None)

    def resubmit_loop(self, parent: str, ids) -> str | None:
        """Why the parent submitting the children `ids` would be a loop: one of them ended
        without success and was submitted again MAX_RESUBMITS times in this run already
        (the parent's attempt fails instead: fleet.control.children); None if none was.
        A walk over the children counted so (few), and `ids` only at a loop's end."""
        fam = self._families.get(parent)
        if fam is None or not fam.again:
            return None
        over = [(k, n) for k, n in fam.again.items()
                if n >= MAX_RESUBMITS and self._jobs[k].state in S.FINAL and self._jobs[k].state not in S.GOOD]
        if not over:
            return None
        mine = set(ids)
        for k, n in over:
            if k in mine:
                return RESUBMIT_LOOP.format(child=k, ended=n + 1, most=MAX_RESUBMITS)
        return None

    def _anew(self, sid: str) -> None:
        """A finished step runs anew (a new generation, on a live fleet): from phase 0.
        Its children stay its children (submitted again, one done is kept and one that
        ended without success runs again: fleet.control.children); its ctx.children lists
        those it submits in its new run only (_run_begins, at its start)."""
        fam = self._families.get(sid)
        if fam is not None:
            fam.phase, fam.stage, fam.restarts, fam.suspended, fam.succeeded = 0, "", 0, False, False
            fam.again = None
            self._waiting.pop(sid, None)

    def _added(self, job) -> None:
        """A job was made (new, or a new generation): a child is counted open in its parent."""
        link = self._parent_of.get(job.spec.id)
        if link is not None:
            job.seq = link[1]
            self._family(link[0]).pending.add(job.spec.id)

    def _ended(self, job) -> None:
        """A job reached a final state: its parent may go on."""
        link = self._parent_of.get(job.spec.id)
        if link is None or self._jobs.get(job.spec.id) is not job:
            return
        fam = self._families.get(link[0])
        if fam is None:
            return
        fam.pending.discard(job.spec.id)
        if len(fam.pending) == 1 and fam.suspended and self.window.queued_of:
            self.window.waits_one.append(link[0])  # (nothing queued behind its last child ahead of it)
        if not fam.pending and fam.suspended:
            fam.suspended = False
            self._waiting.pop(link[0], None)
            parent = self._jobs[link[0]]
            if parent.state == S.SUSPENDED and fam.succeeded:
                fam.succeeded = False
                self._set(parent, "children_ended")
                self._later.append(parent)  # (its Finished and dependents: at the next pass)
            elif parent.state == S.SUSPENDED:
                self._set(parent, "resume")
                self._again(parent)

    def _succeeds_later(self, job) -> bool:
        """A step's attempt succeeded: if children it submitted are still to end, it waits
        for them (SUSPENDED, holding nothing) and is SUCCEEDED once they have; True then."""
        fam = self._families.get(job.spec.id)
        if fam is None or not fam.pending:
            return False
        fam.suspended = fam.succeeded = True
        self._waiting[job.spec.id] = None
        self._set(job, "wait")
        return True

    def _released(self, job, out: list, reason: str = "") -> None:
        """A success: said (Finished, with its exit's `reason`: a success has one only
        where the kernel's OOM killer took a process of it), and its dependents made
        ready where it was the last of their deps."""
        out.append(made.finished(job.spec.id, job.attempt, S.SUCCEEDED, reason))
        for dj in self._dependents(job) if job.dependents else ():
            dj.unmet -= 1
            if dj.unmet == 0 and dj.state == S.WAITING and dj.demand is not None:
                self._make_ready(dj)
            elif dj.unmet == 1 and self.window.queued_of:  # it waits for one: not behind a later one
                self.window.awaited(dj, out)  # (fleet.core.windoworder)

    def _succeed_later(self, out: list) -> None:
        """The parents whose children ended after they succeeded: their success now."""
        later, self._later = self._later, []
        for job in later:
            if job.state == S.SUCCEEDED:
                self._released(job, out)

    def _again(self, job) -> None:
        """Queue a step that ran before ahead of what is queued at its priority."""
        self._front -= 1
        job.seq = self._front
        job.placement = ()
        self._enqueue(job)
        self._pending.back(job)  # (a node lost meanwhile may have been the only one it fits: fleet.core.unfit)

    def _control(self, job, ev, out: list) -> None:
        """An attempt ended with wait, next, restart or broken (its resources are released)."""
        sid = job.spec.id
        if ev.outcome == S.BROKEN:
            self._set(job, "broken")
            out.append(Finished(sid, job.attempt, S.BROKEN, ev.reason))
            self._block_descendants(job, sid, out)
            return
        fam = self._family(sid)
        if ev.outcome == S.RESTART:
            if fam.restarts >= MAX_RESTARTS:
                self._set(job, S.FAILED)
                out.append(Finished(sid, job.attempt, S.FAILED, RESTART_LOOP.format(most=MAX_RESTARTS),
                                    overrules=True))
                self._block_descendants(job, sid, out)
                return
            fam.phase, fam.stage, fam.restarts = 0, "", fam.restarts + 1
        else:
            fam.phase += 1
            if ev.outcome == S.NEXT:
                fam.stage = ev.stage
            elif fam.pending:
                fam.suspended = True
                self._waiting[sid] = None
                self._set(job, "wait")
                return
        self._set(job, "requeue")
        self._again(job)

    def with_children(self, ids) -> Iterator[str]:
        """The steps a Cancel of `ids` ends: these and the unfinished children of those
        that wait for them (what `fleet cancel` answers)."""
        return self._with_children(ids)

    def _with_children(self, ids) -> Iterator[str]:
        """Steps to cancel: these, each followed by the unfinished children of one that
        waits for them (and theirs), once each. A running parent's children are not
        followed: it may still take them into account."""
        todo, seen = deque(ids), set()
        while todo:
            sid = todo.popleft()
            if sid in seen:
                continue
            seen.add(sid)
            fam, job = self._families.get(sid), self._jobs.get(sid)
            kids = ()
            if fam is not None and job is not None and job.state == S.SUSPENDED:
                kids = sorted(fam.pending, key=lambda k: self._jobs[k].seq)
            yield sid
            todo.extend(kids)

    def _resume_of(self, sid: str) -> Resume | None:
        """What a Start of the step carries besides its placement (None: a plain step).
        A start at phase 0 begins a run (_run_begins)."""
        fam = self._families.get(sid)
        if fam is None:
            return None
        if fam.phase == 0:
            self._run_begins(fam)
            if fam.restarts == 0:
                return None
        # A child found done from before (SKIPPED) succeeded, as far as its parent can tell.
        # Phase 0 after a restart is from scratch: no children yet, as on its first run.
        kids = () if fam.phase == 0 else tuple((k, S.SUCCEEDED if self._jobs[k].state == S.SKIPPED
                                                else self._jobs[k].state) for k in fam.kids if k in self._jobs)
        return Resume(fam.phase, fam.stage, fam.restarts, kids)

    @staticmethod
    def _run_begins(fam: Family) -> None:
        """The step starts at phase 0: its first run, a retry of its phase 0, a restart,
        or a run anew (a later submission on a live fleet). Its ctx.children in a later
        phase lists only what it submits from now on: until 2026-12-07 it listed every
        child it had ever submitted in this fleet, and a sweep that fails on a failed
        child failed on one of an earlier run. The children of earlier runs still to end
        are waited for all the same (pending), and counted (earlier)."""
        fam.kids = {}
        fam.earlier = set(fam.pending) or None

    def suspended(self, limit: int) -> list[tuple[str, int, str, int, int]]:
        """The first `limit` steps waiting for their children, as family() says each, in
        the order they began to wait (a walk over the steps waiting, or cancelled while they
        waited: never over every step, nor every step that ran in phases)."""
        out = []
        for sid in self._waiting:
            fam = self._families[sid]
            if fam.suspended and self._jobs[sid].state == S.SUSPENDED:
                out.append((sid, fam.phase, fam.stage, len(fam.pending), len(fam.kids) + len(fam.earlier or ())))
                if len(out) >= limit:
                    break
        return out

    def ends_after(self, parent: str, ids) -> dict[str, str]:
        """Of `ids` (steps of this scheduler a child of `parent` would depend on), those
        that cannot end before the parent's family does, each with the step of it that
        they wait for: the parent itself or one of its ancestors (each ends only after its
        children), or a step not final that waits for one of them, through its deps or
        its own children still to end. A child that depended on one would wait for ever,
        and its family for it. Walks only steps not final (one that ended cannot deadlock),
        each once per call."""
        bound, link = {parent}, self._parent_of.get(parent)
        while link is not None:
            bound.add(link[0])
            link = self._parent_of.get(link[0])
        clear: set = set()  # steps found to wait for none of `bound`
        out = {}
        for sid in ids:
            hit = self._waits_for(sid, bound, clear)
            if hit is not None:
                out[sid] = hit
        return out

    def _waits_for(self, sid: str, bound: set, clear: set) -> str | None:
        """The step of `bound` that `sid` waits for (it, or upstream of it), if any; every
        step walked that waits for none of them is added to `clear`."""
        if sid in clear:
            return None
        seen, todo = {sid}, [sid]
        while todo:
            cur = todo.pop()
            if cur in bound:
                return cur
            job = self._jobs.get(cur)
            if job is None or job.state in S.FINAL:
                continue
            fam = self._families.get(cur)
            for nxt in (*job.deps, *(fam.pending if fam is not None else ())):
                if nxt not in seen and nxt not in clear:
                    seen.add(nxt)
                    todo.append(nxt)
        clear |= seen
        return None

    def entered_at(self, sid: str) -> int | None:
        """When a child was first entered: a number that grows with each submission and is
        the same for the children entered together in one (None: not a child). Of two
        children of one parent, the one with the lower number was entered before it
        (fleet.core.childdeps: a child may depend on an ancestor's child entered no later
        than its own branch)."""
        link = self._parent_of.get(sid)
        return -link[2] if link is not None else None

    def family(self, sid: str) -> tuple[str | None, int, str, int, int]:
        """(parent id, phase, stage, children not final, children) of a step."""
        link = self._parent_of.get(sid)
        fam = self._families.get(sid)
        if fam is None:
            return (link[0] if link else None, 0, "", 0, 0)
        return (link[0] if link else None, fam.phase, fam.stage, len(fam.pending),
                len(fam.kids) + len(fam.earlier or ()))
