"""The coordinator's side of the allocation's end (the scheduler's is fleet.core.deadline).

The end is known when the fleet comes up (fleet.site.allocation reads it once from the
batch system, or `fleet up --end/--walltime` gives it); nothing polls the batch system
afterwards. It is turned at once into a deadline on the coordinator's monotonic clock,
which every decision takes (the drain point, what no longer fits, the warning signal's
judgement): a wall clock stepped by NTP or by hand (+1 h) drained a fleet at once, and
told the user to ask for more time, and one stepped back never drained (before
2026-12-07). The end and drain point are shown as read (status, report, events). At
the coordinator's first heartbeat the end is recorded and handed to the scheduler
(AllocationEnds); if the wall clock steps later it is handed again with the step
(AllocationEnds.shift: the scheduler's time is the wall clock's; follow_clock). The
drain is a timer of its own, not the heartbeat's (at 10,000 nodes a beat comes every
20 s): the loop's wait is bounded by the time to the
drain point (wait_ms) and tick, a float compare, runs every loop turn, so the drain
starts within one turn of its point whatever the heartbeat period. The batch system's
warning signal (SIGUSR1, e.g. `#SBATCH --signal=B:USR1@300`, passed on by `fleet run`)
brings it forward, but in a job shorter than its drain margin (early_warning): Slurm
sends the warning at a short job's start (`@300` in a 2-min job), which tells nothing
the fleet did not read itself, so such a fleet drains at its drain point (before
2026-12-06 it drained at once, and a resubmitting script ran job after job that did next
to nothing). A signal ends the loop's wait at once (wakeup: the signal writes to a
pipe the loop's poller watches, so SIGTERM's stop is not a period late either). At the drain point the scheduler kills every
running step (SIGTERM, SIGKILL after its grace, cut so that it comes before the end:
fleet.core.deadline; a submission with a step whose grace would be cut is warned of:
long_graces); each exit is recorded interrupted (not an attempt: coordinator._interrupt),
handed back to the scheduler, and its claim released, so the next allocation's fleet
runs it at once; but for a timeout, an out_of_memory or a `fleet cancel` that came
before, which keep their outcome (fleet.core.deadline.drained_exit). When none runs any more,
every step that never started is counted ended, `not_started`, in each submission:
`fleet run` then exits 3 (the allocation ended before the suite did). A job ended with
no warning (its agents stopped by the batch system's SIGTERM) drains the same way, at
once (outside; fleet.control.jobend).

A full run directory drains the same way, with one difference. When a step's set-up
(its directories, its log: fleet.node.child) fails because the file system is full
(ENOSPC, or EDQUOT: a block or file-count quota), the next steps would fail the same way
in milliseconds, each burning an attempt. So the first such report (`disk_full`) drains the
fleet at once, without stopping the running steps (they may need no more space, and
their work is not thrown away): nothing more starts, that step and every step that
ends otherwise than succeeded from then on are interrupted (no attempt), the rest are
`not_started`, and `fleet run` exits 4. Free space (or raise the quota) and run the
suite again: what succeeded is skipped, the rest run.

A read-only run directory (EROFS: ext4's errors=remount-ro after a disk error, a Lustre
target gone read-only, an admin's remount) drains the same way, with a reason of its own
(READ_ONLY), and `fleet run` exits 4 too. Before 2026-12-06 each next step's set-up
failed on it, using an attempt, and `fleet run` never returned: a finished submission
waited for a journal that could not be made durable.

The coordinator's own writes to the run directory (the event stream, the journal) that
fail so (or with EIO: its file system fails, FAILING; an fsync that failed so cannot be
trusted to be made good by another) drain the fleet the same way (`cannot_write`), and
the coordinator goes on: what
it could not write stays buffered and is written first at the next attempt, so nothing
is torn or dropped while it lives. Outcomes the journal could not make durable are not
recorded: those steps run again next time. A finished submission is then answered
`done` with the drain's reason (P.ProgressReply.full), and `fleet run` exits 4.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import signal
import time

import zmq

from fleet.control import stuck
from fleet.control.closing import Closing
from fleet.core import states as S
from fleet.core.deadline import AllocationEnds, DrainNow, end_margin
from fleet.core.units import counted
from fleet.core.scheduler import StepExited
from fleet.wire import events
from fleet.wire.numtext import work_seconds

log = logging.getLogger("fleet.control.coordinator")

CLOCK_STEP_S = 1.0  # a step of the wall clock against the monotonic one the scheduler is told of

DRAIN_BEFORE_S = 300.0  # the default drain point: five minutes before the end
FULL = "the run directory's file system is full"  # a full drain's reason starts so (fleet run's exit 4)
READ_ONLY = "the run directory cannot be written: its file system is read-only"  # (EROFS: exit 4 too)
FAILING = "the run directory cannot be written: its file system fails"  # (EIO, the coordinator's own writes)
UNWRITABLE = (FULL, READ_ONLY, FAILING)  # a drain's reason that starts with one of these: fleet run exits 4
# A drain's reason that starts so: every node left with no signal of the batch system (its
# coordinator frozen past its agents' fence: fleet.control.jobend.frozen). `fleet run` exits 5.
NODES_LOST = "the fleet lost its nodes"
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})  # (fleet.node.diskfull's, on the coordinator's side)
_CAUSES = {errno.ENOSPC: FULL, errno.EDQUOT: FULL, errno.EROFS: READ_ONLY, errno.EIO: FAILING}


def unwritable(err: int | None) -> str:
    """The words for a run directory that an error with errno `err` says cannot be
    written (FULL, READ_ONLY or FAILING), or "" if it does not say so (EACCES, say: a
    file's mode, not the file system; the step fails as ever)."""
    return _CAUSES.get(err, "")


def early_warning(now: float, drain_at: float | None, cut: bool) -> bool:
    """Whether the batch system's warning at `now` is to be taken at the drain point
    (`drain_at`), not now: it came before it, in a job shorter than its drain margin
    (`cut`: the margin was cut to half the time left, fleet.control.coordinator_cli._end;
    `--drain-before 5m` in a 2-min job, or the default 5 min in a job under 10). Slurm
    sends its warning as soon as less than `@N` (and up to a minute) is left: with `@N`
    as long as the margin, at such a job's start, when it tells nothing the fleet did
    not read itself. In a longer job the warning is news (an `@N` longer than the
    margin, a time limit lowered since, an operator's `scancel --batch --signal=USR1`):
    drain now. No end known: no drain point, drain now."""
    return cut and drain_at is not None and now < drain_at


def clock(t: float) -> str:
    """A time of day (this machine's zone), as the logs and records say it."""
    return time.strftime("%H:%M:%S", time.localtime(t))


class Drain:
    """One coordinator's allocation end: `coord` is the coordinator (its scheduler,
    events, feed, claims, submissions and interrupted steps)."""

    def __init__(self, coord):
        self.coord = coord
        # A finished submission's answer says so when the fleet drained for a full or read-only disk (exit 4).
        coord.submissions.full = lambda: self.reason if self.full else ""
        # ... and that it closed early, not drained, when it did (fleet run says so: not "the allocation ended").
        coord.submissions.early = lambda sid: self.closing.early.get(sid, "")
        self.end: float | None = None
        self.drain_at: float | None = None
        self.began: float | None = None  # when the end was planned: the fleet's start
        self.since: float | None = None  # what the window is measured from (window): this job's first fleet's start
        self.deadline: float | None = None  # the drain point on the monotonic clock (decisions)
        self._offset = 0.0  # the wall clock less the monotonic one when the end was read
        self._shift = 0.0  # the wall clock's step since then that the scheduler was told of
        self.source = ""
        self.announced = False
        self.signalled = ""  # the warning signal's words, once it came
        self.cut = False  # the drain margin was cut, the job being shorter than it (early_warning)
        self.drained = False
        self.at: float | None = None  # when it drained (for the allocation's end)
        self.planned = True  # drained for the allocation's planned end, not as the job ends now (outside)
        self._at_mono = 0.0  # the same on the monotonic clock (why_for)
        self.reason = ""
        self.full = False  # drained because the run directory cannot be written: full, read-only (not the end)
        self._complained = 0.0
        self.closing = Closing(coord, self)  # submissions closed after the drain (later ones are too)
        self.dropped: set[str] = set()  # queued steps their stopping nodes dropped unstarted (P.Dropped.stopped)
        self.ran_out: dict[str, str] = {}  # interrupted steps that had all this job could give: why (control.stuck)
        self._wake = -1  # the wakeup pipe's read end (wakeup)

    def plan(self, end: float | None, drain_before: float, source: str, cut: bool = False) -> None:
        """The allocation ends at `end` (epoch seconds; None: unknown), from `source`;
        `cut`: the drain margin is shorter than asked for, the job being shorter (early_warning)."""
        self.cut = cut
        if end is None:
            log.info("allocation end: not known (%s); no drain", source)
            return
        self.end, self.drain_at, self.source = end, end - drain_before, source
        self.began, mono = time.time(), time.monotonic()
        self.since = self.began  # (a later fleet of the job: its first fleet's start, measured_from)
        self.deadline, self._offset = mono + (self.drain_at - self.began), self.began - mono
        log.info("allocation ends at %s (%s); drain point %s (%g s before)", clock(end), source,
                 clock(self.drain_at), drain_before)

    def measured_from(self, since: float) -> None:
        """What an allocation like this one gives steps (window) is measured from `since`:
        this batch job's first fleet's start in the run directory, for a fleet brought up
        again later in the job (fleet.control.jobstart), not this fleet's own."""
        if self.began is not None:
            self.since = min(since, self.began)

    def window(self) -> float | None:
        """The seconds an allocation like this one gives steps, from this job's first
        fleet's start to the drain point (fleet.control.stuck); None: no end known."""
        return None if self.since is None or self.drain_at is None else self.drain_at - self.since

    def long_graces(self, steps) -> str:
        """A warning, logged and returned (for the submitter), if some of `steps` have a
        grace the drain would cut (fleet.core.deadline: its SIGKILL comes end_margin
        before the allocation's end); "" if none has, or no end is known."""
        if self.end is None or self.drain_at is None:
            return ""
        before = self.end - self.drain_at
        left = max(0.0, before - end_margin(before))
        long = [s for s in steps if s.grace > left]
        if not long:
            return ""
        first = max(long, key=lambda s: s.grace)
        note = (f"{counted(len(long), 'step')} (the longest: {first.id}, {first.grace:g} s) with a grace longer than "
                f"the drain leaves: the drain point is {before:g} s before the allocation's end, and the drain "
                f"SIGKILLs what still runs {end_margin(before):g} s before the end ({left:g} s after the drain point); "
                f"give --drain-before more than the grace (or the steps a shorter grace)")
        log.warning("%s", note)
        return note

    def on_signal(self, signum, frame) -> None:
        """The batch system's warning (a signal handler: only noted; the loop's next turn acts)."""
        self.signalled = f"the batch system's warning signal ({signal.Signals(signum).name})"

    def wakeup(self, poller) -> None:
        """Every signal to this process writes to a pipe `poller` watches
        (signal.set_wakeup_fd), so each ends the loop's wait at once (the handler alone
        runs only to find the poll resumed with what was left of its wait). Not where
        no wakeup can be set (not the main thread)."""
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        try:
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:
            os.close(r), os.close(w)
            return
        self._wake = r
        poller.register(r, zmq.POLLIN)

    def _woken(self) -> None:
        """Empty the wakeup pipe (the poller said it is readable; the handlers ran)."""
        try:
            while os.read(self._wake, 512):
                pass
        except BlockingIOError:
            pass

    def wait_ms(self, now: float, beat_ms: int) -> int:
        """How long the loop may wait (ms): until its next heartbeat (`beat_ms`), or the
        first moment the drain has something to do, if sooner (rounded up: no spinning).
        (`now`: the wall clock's; the drain point is the monotonic clock's.)"""
        if (self.end is not None and not self.announced) or self.closing.busy:
            return 0
        if self.drained or self.deadline is None:
            return max(0, beat_ms)
        return max(0, min(beat_ms, math.ceil((self.deadline - time.monotonic()) * 1000)))

    def shift(self) -> float:
        """How far the wall clock has stepped against the monotonic one since the end was read."""
        return time.time() - time.monotonic() - self._offset

    def follow_clock(self, now: float) -> None:
        """Tell the scheduler of a step of the wall clock (its time) since the end was
        read, so that what fits before the drain point is judged on the monotonic clock
        (AllocationEnds.shift); cheap (two clock reads), on every loop turn before
        anything is handled. Once told of the end only."""
        if not self.announced or self.deadline is None:
            return
        step = self.shift()
        if abs(step - self._shift) < CLOCK_STEP_S:
            return
        log.warning("the wall clock stepped %+.1f s (NTP, or set by hand): the allocation's end stays %.0f s "
                    "from now by the monotonic clock (the drain point %.0f s from now)", step - self._shift,
                    self.deadline - time.monotonic() + (self.end - self.drain_at), self.deadline - time.monotonic())
        self._shift = step
        self.coord._feed(AllocationEnds(self.end, self.drain_at, self.source, step), now)

    def tick(self, now: float, ready=()) -> None:
        """On every loop turn (cheap: a few compares until the drain point): announce the
        end, drain at its point, close what never started. `ready`: what the loop's poll
        found readable (the wakeup pipe is emptied here)."""
        c = self.coord
        if self._wake in ready:
            self._woken()
        mono = time.monotonic()  # (the drain point's clock: a wall clock's step moves it not)
        if self.signalled and not self.drained and early_warning(mono, self.deadline, self.cut):
            log.warning("%s came %.0f s before the drain point at %s, in a job shorter than its drain margin "
                        "(Slurm sends it at such a job's start): draining at the drain point", self.signalled,
                        self.deadline - mono, clock(self.drain_at))
            self.signalled = ""
        if self.end is not None and not self.announced:
            self.announced = True
            self._shift = self.shift()
            c.events.write(events.AllocationEnd(t=now, end=self.end, drain_at=self.drain_at, source=self.source))
            c._feed(AllocationEnds(self.end, self.drain_at, self.source, self._shift), now)
        else:
            self.follow_clock(now)
        # (A full disk's drain lets the running steps run: at the drain point they stop.)
        at_point = self.deadline is not None and mono >= self.deadline
        if (not self.drained or self.full) and (self.signalled or at_point):
            self._drain(self.signalled or f"the drain point, {self.end - self.drain_at:g} s before the end", now)
        if self.closing.busy:
            self.closing.step(now)
        if (self.drained and c.sched.deadline.drained and c.sched.running_count() == 0
                and self.closing.open_subs()):
            self._close(now)
        elif (not self.drained and c.sched.deadline.held_ids and c.sched.running_count() == 0
              and self.closing.open_subs()
              and c.intake.count() == 0 and c.sched.held_only()):
            # Nothing left can start before the drain point: say so now, not at it (a
            # job script resubmits sooner; the fleet stays up for what comes next).
            early = f"nothing left can end before the drain point at {clock(self.drain_at)}"
            log.warning("%s: the steps left are not started", early)
            self._close(now, f"not started: it would not end before the drain point at {clock(self.drain_at)}", early)

    def _drain(self, reason: str, now: float, planned: bool = True) -> None:
        """Drain now: stop the running steps, start nothing more (`planned`: for the
        allocation's planned end, its warning or drain point; else the job ends now)."""
        c = self.coord
        self.drained, self.full, self.reason, self.at, self._at_mono = True, False, reason, now, time.monotonic()
        self.planned = planned
        log.warning("draining (%s): stopping %d running steps, starting nothing more", self.reason,
                    c.sched.running_count())
        c.events.write(events.Drained(t=now, reason=self.reason, running=c.sched.running_count()))
        c._feed(DrainNow(self.reason), now)

    def outside(self, reason: str, now: float, planned: bool = False) -> None:
        """The job is ending under the fleet (`reason`: an agent stopped by a signal, or
        every agent gone for good; fleet.node.jobend): drain now, as at the warning
        signal, unless a drain for the end is under way. What ends from now on is
        interrupted, what never started is `not_started`, and `fleet run` exits 3.
        Its steps' reasons say when, not the allocation's planned end (not `planned`:
        the job ends now, scancel say; `planned`: the warning signal reached an agent)."""
        if not self.drained or self.full:
            self._drain(reason, now, planned)

    def disk_full(self, node: str, step: str, errno: int, now: float) -> None:
        """A step's set-up on `node` found the run directory's file system full or
        read-only (`errno`, P.Exited's disk_full: ENOSPC, EDQUOT or EROFS): drain now,
        letting the running steps end (see the module's doc). Once: later reports change
        nothing; a drain already under way (the allocation's end) stays as it is."""
        if not self.drained:
            cause = unwritable(errno) or FULL  # (an errno a later agent may send: said as the full disk's)
            self._full(f"{cause} ({os.strerror(errno)}: the set-up of step {step!r} on {node})", now)

    def _full(self, reason: str, now: float) -> None:
        """Drain for a file system that cannot be written: nothing more starts, the running steps go on."""
        c = self.coord
        self.drained = self.full = True
        self.reason = reason
        log.error("draining (%s): starting nothing more; %d running steps go on; %s and run the suite again",
                  self.reason, c.sched.running_count(), "free space" if reason.startswith(FULL) else "make it writable")
        c.events.write(events.Drained(t=now, reason=self.reason, running=c.sched.running_count()))
        c._feed(DrainNow(self.reason, stop_running=False), now)

    def cannot_write(self, what: str, e: OSError, now: float) -> bool:
        """The coordinator's own write of `what` failed with `e`: drain, as disk_full does,
        if the file system cannot be written (full: ENOSPC, EDQUOT; read-only: EROFS;
        failing: EIO); whether it cannot. Logged at most every 10 s (it is tried again
        every loop turn)."""
        cause = unwritable(e.errno)
        if now >= self._complained:
            self._complained = now + 10.0
            log.error("cannot write %s: %s%s", what, e, " (kept, written once it can be)" if cause else "")
        if cause and not self.drained:
            self._full(f"{cause} ({os.strerror(e.errno)}: the coordinator's {what})", now)
        return bool(cause)

    def write_events(self, close: bool = False) -> None:
        """Flush the event stream (close: and close it); a write that fails is
        cannot_write's (its lines are kept for the next flush)."""
        c = self.coord
        try:
            c.events.close() if close else c.events.flush()
        except OSError as e:
            self.cannot_write("events.jsonl", e, time.time())

    def why_for(self, msg) -> str:
        """why() for the interrupted exit `msg`, after TOO_LONG's reason if the step had
        nearly all the time this allocation gives and saved no progress (fleet.control.stuck):
        the time it ran until the drain, not its grace after it (nor a drain brought
        forward's time to the drain point: the warning signal came, it ran no longer). How
        long it ran is its work by its node's monotonic clock (P.Exited.worked_s) less the
        time since the drain by ours: its node's wall stamps against this machine's clock
        (before 2026-12-07) judged a step on a node whose clock is ahead not stuck."""
        why = self.why()
        if not self.drained or self.full or self.window() is None or self.at is None:
            return why
        ran = work_seconds(msg.work_start, msg.work_end, msg.worked_s) - max(0.0, time.monotonic() - self._at_mono)
        too = stuck.ran_out(ran, self.window(), bool(msg.control))
        if not too:
            return why
        self.ran_out[msg.step] = too  # (its dependents need a longer allocation too: Stuck)
        return f"{too}; {why}"

    def why(self) -> str:
        """The reason an interrupted exit gives: the drain's, or the fleet going down."""
        from fleet.control.outcomes import STOPPED_WITH_FLEET
        if not self.drained:
            return STOPPED_WITH_FLEET
        return "drained: " + self._words()

    def _words(self) -> str:
        """Why the fleet drained, as its steps' reasons say it: the allocation's planned
        end only where it drained for it (its warning signal, its drain point); a job that
        ends now (scancel, its agents signalled) says when instead: before 2026-12-07 it
        said the planned end, minutes after the job was cancelled, as if it had drained for it."""
        if self.full:
            return self.reason
        if not self.planned:
            return f"at {clock(self.at)}, {self.reason}" if self.at else self.reason
        return (f"the allocation ends at {clock(self.end)}; " if self.end else "") + self.reason

    def interrupted(self, step: str, attempt: int, now: float) -> None:
        """A step's exit after the drain, recorded interrupted: the scheduler frees its
        resources, and its claim goes (the next allocation's fleet runs it at once).
        While the fleet goes down instead, nothing is decided: no-op."""
        c = self.coord
        if not self.drained or c.stopping:
            return
        c._feed(StepExited(step, attempt, S.INTERRUPTED, self.reason), now)
        self.release(step)

    def release(self, step: str) -> None:
        """An interrupted step's claim goes: the next allocation's fleet runs it at once.
        Its journal says it ended (no attempt): killed after the drain with the journal
        unsealed, the fleet did not die with it (fleet.control.recording counts no loss)."""
        c = self.coord
        c.recorder.interrupted(step)
        if step in c.claims.claimed:  # a lease holder alone claims nothing (fleet.control.lease)
            c.claims.release(c.claims.run_dir_of(step), step)

    def _close(self, now: float, reason: str = "", early: str = "") -> None:
        """Count every step of each submission not yet closed that never ended here as
        ended in it: `not_started`, or interrupted if its exit never came; a bounded part
        each loop turn (fleet.control.closing). Each submission is closed once (one that
        comes after the drain too). `early`: closed before the drain point, not drained: why."""
        self.closing.close(now, reason or "not started: " + self._words(), early)
