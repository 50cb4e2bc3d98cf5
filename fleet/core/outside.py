"""What reaches a step from outside its own run: `fleet cancel`, and another fleet's
claim on the run directory (Elsewhere, Settled, Reclaim; see fleet.core.states).

A part of fleet.core.scheduler.Scheduler (a mixin on the scheduler's own records),
kept apart so that the scheduler's module holds the step's own cycle (entered, ready,
started, exited) and the pass.
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.core import waits as W
from fleet.core.decisions import Cancel, Decision, Elsewhere, Finished, Ignored, Kill, Reclaim, Skipped, Wait
from fleet.core.jobs import take_out


class Outside:
    """How the Scheduler takes a cancel and another fleet's word on a step."""

    def _cancel(self, ev: Cancel, out: list[Decision]) -> None:
        """A running step is to be killed (its exit, cancelled, ends it); one not started
        ends cancelled now. Either way its dependents are blocked, and a changed
        definition waiting to replace it is dropped. Every step named is cancelled
        before any dependent is blocked: a named dependent ends cancelled, not blocked.
        The Kills that stop running steps come last, after those that drop queued ones:
        a node told to stop a step before it hears that the step queued behind it is
        dropped starts that one as the first ends (its code ran after the cancel: 5 runs
        in 15 of `fleet cancel --all` until 2026-12-07)."""
        ended, ready, stops = [], [], []
        for sid in self._with_children(ev.steps):  # a waiting parent's children with it
            job = self._jobs.get(sid)
            if job is not None and job.state == S.QUEUED:
                self.window.cancel(job, ev.reason, out)  # its node drops it
                continue
            if job is None or job.state not in (S.WAITING, S.READY, S.RUNNING, S.SUSPENDED):
                out.append(Ignored(f"cancel of {sid!r}: " + (f"it is {job.state}" if job else "unknown step")))
                continue
            self._after.pop(sid, None)
            if job.state == S.RUNNING:
                job.cancelled = True
                stops.append(Kill(sid, job.attempt, ev.reason))
                continue
            if job.state == S.READY:
                ready.append(job)
            elif job in self._unresolved:
                self._unresolved.remove(job)
            self._set(job, "cancel")
            out.append(Finished(sid, job.attempt, S.CANCELLED, ev.reason, ran=False))
            ended.append(job)
        out += stops
        take_out(self._classes, ready, self._quiet.changed)  # one rebuild per class, not a heap scan per step
        for job in ended:
            self._block_descendants(job, job.spec.id, out)

    def _elsewhere(self, ev, out: list[Decision]) -> None:
        job = self._jobs.get(ev.step)
        if isinstance(ev, Elsewhere) and job is not None and job.state == S.QUEUED and job.attempt == ev.attempt:
            return self.window.elsewhere(job, ev.reason, out)
        if isinstance(ev, Elsewhere):
            if job is None or job.state != S.RUNNING or job.attempt != ev.attempt:
                out.append(Ignored(f"{ev.step!r} attempt {ev.attempt} is not running"))
                return
            self._stop_running(job)
            self._set(job, "elsewhere")
            out.append(Wait(job.spec.id, W.WaitReason(W.ELSEWHERE, detail=ev.reason)))
            return
        if job is None or job.state != S.ELSEWHERE:
            out.append(Ignored(f"{ev.step!r} is not elsewhere"))
            return
        if isinstance(ev, Reclaim):
            self._set(job, "reclaim")
            self._enqueue(job)
            self._pending.back(job)  # (judged at the pass, after a loss: fleet.core.unfit)
        elif ev.outcome == S.SUCCEEDED:
            self._set(job, "done_elsewhere")
            out.append(Skipped(job.spec.id))
            for dj in self._dependents(job):
                dj.unmet -= 1
                if dj.unmet == 0 and dj.state == S.WAITING and dj.demand is not None:
                    self._make_ready(dj)
        else:
            self._set(job, "failed_elsewhere")
            out.append(Finished(job.spec.id, job.attempt, S.FAILED, ev.reason or "failed in another fleet"))
            self._block_descendants(job, job.spec.id, out)
