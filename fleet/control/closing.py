"""The drain's close: every step of a submission that never ended here is counted ended
in it, `not_started` (or interrupted, if its exit never came), so that `fleet run`
hears its submission finished and exits 3 (fleet.control.drain says when).

A close walks every step of the submissions it closes: at a job end of 700,000 steps one
walk held the coordinator's loop ~0.9 s, the longest turn of the job's end
(benchmarks/README.md, "A job ended under the fleet"). So it goes CLOSE_STEPS steps a
loop turn, submission by submission, and the loop does not sleep while a close is
under way (Closing.busy). Between two turns a step may still end (an interrupted exit
that comes late, a `fleet cancel`): Submissions.ended counts it then, and adds it to
the set of steps its submission counted while the walk is under way
(Submissions.closing), which the walk passes over, so no step is counted twice. One
`not_started` event says how many steps the close counted so, when it is done, with
their reason, the steps that no allocation like this one could start either
(fleet.control.stuck: by reason, or with the step they need), and whether every step
the drain left (interrupted or not started) is so: then another job like this one would
not finish the suite (`fleet report` and `fleet audit` say so from it, `fleet status`
from longer_only). One record for the close, not one a step: a million steps left are
one line (~20 MB if each is too long). (Before 2026-12-06 it held the counts alone: the
report and the audit gave such steps a generic reason, and said the next run goes on.)
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.control.stuck import Stuck
from fleet.core import states as S
from fleet.wire import events

NOT_STARTED = "not_started"  # a step's outcome in a submission the drain ended (never started here)
PARENT_WHY = "; it had succeeded, but children it submitted had not all ended: it runs again next time"
CLOSE_STEPS = 50_000  # steps of a close walked in one loop turn (~60 ms of the loop; more where the end is
# known: whether an allocation like this one could start each step, fleet.control.stuck, is asked too)


@dataclass
class _Walk:
    sub: object  # fleet.control.submissions.Submission
    reason: str  # a not_started step's reason
    at: int = 0  # the next of sub.steps to look at


class Closing:
    """The closes under way of one coordinator (`coord`: its scheduler, submissions,
    events and interrupted steps; `drain`: its fleet.control.drain.Drain)."""

    def __init__(self, coord, drain):
        self.coord = coord
        self.drain = drain
        self.closed: set[int] = set()  # submissions closed, or being closed (later ones are too)
        self._walks: list[_Walk] = []
        self._counted = -1  # steps counted not_started by the closes under way (-1: no close to say)
        self._reason = ""  # their reason, unless _longer names them
        self._longer: dict[str, list[str]] = {}  # reason -> the not_started steps too long themselves
        self._needs: list[str] = []  # the not_started steps that need one, each with it (events.NotStarted)
        self.left = 0  # steps the closes found interrupted or not started (fleet-wide)
        self.left_longer = 0  # of them, those no allocation like this one could start or finish either
        self.stuck = Stuck(coord, None)  # which of them an allocation like this one could not start either
        self.early: dict[int, str] = {}  # submissions closed before the drain point, not drained: why (fleet run)

    @property
    def busy(self) -> bool:
        """A close is under way: the loop must not wait."""
        return bool(self._walks)

    @property
    def longer_only(self) -> bool:
        """Every step the closes left needs a longer allocation than this one (Stuck):
        another job like this one would not finish them (fleet run exits 1, not 3)."""
        return self.left > 0 and self.left_longer == self.left

    def open_subs(self) -> bool:
        """A submission not closed yet."""
        return any(sid not in self.closed for sid in self.coord.submissions.subs)

    def close(self, now: float, reason: str, early: str = "") -> None:
        """Close every submission not closed yet (its steps' reason: `reason`), a first part
        now; `early`: why it closes them early, before the drain point, if it does."""
        subs = self.coord.submissions
        self._counted = max(self._counted, 0)
        self._reason = reason
        for sub in list(subs.subs.values()):
            if sub.id in self.closed:
                continue
            self.closed.add(sub.id)
            if early:
                self.early[sub.id] = early
            # (a step added again after it ended there is not counted until it ends again)
            subs.closing[sub.id] = {row[0] for row in sub.finished if row[1] != "retry"} - sub.again
            self._walks.append(_Walk(sub, reason))
        d = self.drain
        self.stuck = Stuck(self.coord, d.window(), d.ran_out)
        self.step(now)

    def step(self, now: float) -> None:
        """Walk up to CLOSE_STEPS steps of the closes under way (every loop turn)."""
        budget = CLOSE_STEPS
        while self._walks and budget > 0:
            walk = self._walks[0]
            end = min(len(walk.sub.steps), walk.at + budget)
            budget -= end - walk.at
            self._walk(walk, end, now)
            if walk.at >= len(walk.sub.steps):
                self._walks.pop(0)
                self.coord.submissions.closing.pop(walk.sub.id, None)
        if not self._walks and self._counted >= 0:
            self._done(now)

    def _walk(self, walk: _Walk, end: int, now: float) -> None:
        c, drain = self.coord, self.drain
        sub, counted, state = walk.sub, c.submissions.closing[walk.sub.id], c.sched.state
        why = None
        for sid in sub.steps[walk.at:end]:
            try:
                st = state(sid)
            except KeyError:
                st = S.WAITING  # not entered before the drain
            if sid in counted or st in S.FINAL:
                if st == S.INTERRUPTED:  # (its exit came: left to the next job, too long if it ran out)
                    self.left += 1
                    self.left_longer += sid in drain.ran_out
                continue
            # (A queued step is promoted when the step it waited for ends, lest its node
            # started it: its node's Dropped, in the same batch, says it did not.)
            outcome = S.INTERRUPTED if st == S.INTERRUPTED and sid not in drain.dropped else NOT_STARTED
            counted.add(sid)
            self.left += 1
            if c.recorder.parents and c.recorder.parents.pop(sid, None) is not None:
                # It succeeded, children it submitted had not all ended: no marker, it runs
                # again next time (fleet.control.recording.parent_ended); not lost, no attempt.
                c.recorder.interrupted(sid)
                sub.finished.append([sid, S.INTERRUPTED, 0, (why := why or drain.why()) + PARENT_WHY])
            elif outcome == NOT_STARTED:
                self._counted += 1
                too = self.stuck.why(sid)
                if too is not None:
                    self.left_longer += 1
                    dep = self.stuck.needs.get(sid)
                    if dep is None:
                        self._longer.setdefault(too, []).append(sid)
                    else:
                        self._needs += (sid, dep)
                sub.finished.append([sid, outcome, 0, too or walk.reason])
                sub.not_started += 1
            else:
                why = why or drain.why()
                if sid not in c.interrupted:  # (its node lost as it began)
                    c.interrupted.add(sid)
                    from fleet.control.outcomes import unreported_interrupted
                    c.events.write(unreported_interrupted(now, c.sched.view(sid), why))
                sub.finished.append([sid, outcome, 0, why])
            sub.remaining -= 1
        walk.at = end

    def _done(self, now: float) -> None:
        c = self.coord
        c.events.write(events.NotStarted(t=now, steps=self._counted, held=c.sched.deadline.held,
                                         reason=self._reason, longer=self._longer, needs=self._needs,
                                         longer_only=self.longer_only or None))
        self._counted, self._longer, self._needs = -1, {}, []  # said: nothing to say until the next close
