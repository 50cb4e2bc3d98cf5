"""What `fleet run` prints while a submission's steps end: a line per step in a log, a
progress bar on a terminal (where successes only move the bar), a failed step's line
naming its log. Of the steps skipped (done before, or by another fleet), a log lists
SKIPPED_LISTED and counts the rest: a rerun of a big suite would otherwise write a line
per step it did not run. A shard's steps of other shards (fleet.control.othershards)
are counted apart: their lines are not numbered, and name the shard that runs them."""

from __future__ import annotations

import os
import time

from fleet.control.api import Update
from fleet.control.drain import NODES_LOST, UNWRITABLE
from fleet.control.notsucceeded import LOGGED, NotSucceeded, has_log
from fleet.control.stuck import TOO_LONG
from fleet.core import states as S
from fleet.core.oneline import one_line
from fleet.wire.records import no_log

DRAINED = (S.INTERRUPTED, "not_started")  # outcomes the drain gives (fleet.control.drain)
SKIPPED_LISTED = 100
BAR_WIDTH = 30
# Nothing of a shard's own ran for OTHERS_QUIET_S while it waits for other shards' steps:
# those it waits for are named, then again every OTHERS_AGAIN_S of the same quiet (the
# environment's FLEET_TEST_OTHERS_QUIET_S shortens the first, for tests).
OTHERS_QUIET_S = 30.0
OTHERS_AGAIN_S = 600.0
OTHERS_NAMED = 5
# LOGGED: outcomes of a step whose own output says why: their line names its log
# (steps/<id>/log, fleet.wire.records.log_path). No other line does: a million successes print no path.


class Lines:
    """Fleet.wait's on_progress for `fleet run`: prints each answer, and keeps what the
    summary needs (the outcomes, the steps the full disk drained, the skipped not listed)."""

    def __init__(self, out, total: int, others: dict | None = None):
        self.out, self.tty, self.total = out, out.isatty(), total
        self.others = others or {}  # step id -> the shard that runs it (waited for here, never run)
        self.others_ended: dict[str, str] = {}  # of those, the ones that ended: their outcome
        self.started = time.monotonic()
        self.outcomes: dict[str, str] = {}
        self.full: list[str] = []  # steps drained because the run directory cannot be written, or why (control.drain)
        self.cause = ""  # why it cannot: the first of drain.UNWRITABLE said (full, read-only, failing)
        self.early = ""  # why the fleet closed the submission early, not drained, if it did
        self.too_long: list[str] = []  # steps drained that no allocation like this one can start (control.stuck)
        self.nodes_lost = ""  # why the fleet drained for every node gone unsignalled (drain.NODES_LOST), if it did
        self.listed = self.unlisted = 0  # skipped steps listed in a log; those past SKIPPED_LISTED
        self.counts: dict[str, int] = {}  # the submission's steps by state, as last said (a Ctrl-C's summary)
        self.not_succeeded = NotSucceeded()  # the end's summary of what did not succeed, by kind
        self.elsewhere_said = 0  # steps said to wait for another fleet's run of them (said once)
        self.quiet_since = self.started  # nothing of this shard's own ran or ended since (_others_left)
        self.quiet_first = float(os.environ.get("FLEET_TEST_OTHERS_QUIET_S") or OTHERS_QUIET_S)
        self.quiet_said = 0.0

    def __call__(self, u: Update) -> None:
        out, tty, outcomes = self.out, self.tty, self.outcomes
        # Every step the submission counts now, its steps' children too (they add to it).
        self.total = max(self.total, sum(u.counts.values()) - len(self.others))
        self.counts = u.counts
        self.early = u.early or self.early
        if u.full and not self.cause:  # (the fleet's records cannot be written: said in each answer from then on)
            self.full.append(u.full)
            self._cause(u.full)
            if tty:
                out.write("\r\033[K")
            print(f"fleet: drained: {one_line(u.full)}; nothing more starts, the running steps go on", file=out,
                  flush=True)
        for step, outcome, attempt, reason, *more in u.finished:
            if step in self.others:
                self._other(step, outcome, reason)
                continue
            if outcome == S.SKIPPED and (tty or self.listed >= SKIPPED_LISTED):
                outcomes[step] = outcome  # a big rerun's fast path: nothing shown for the step
                self.total = max(self.total, len(outcomes))
                self.unlisted += not tty
                continue
            self.listed += outcome == S.SKIPPED
            if outcome == "retry":  # not final: counted when it is
                of = f" of {more[0]}" if more else ""
                line = f"  {'retry':<10} {step}: retry {attempt}{of}: {one_line(reason)}"
            else:
                if outcome not in (S.SUCCEEDED, S.SKIPPED) and outcomes.get(step) in (None, S.SUCCEEDED, S.SKIPPED):
                    self.not_succeeded.add(step, outcome, reason)  # (a step submitted again: counted once)
                elif outcome in (S.SUCCEEDED, S.SKIPPED) and outcomes.get(step) not in (None, S.SUCCEEDED, S.SKIPPED):
                    self.not_succeeded.succeeded(step)  # (it failed, and succeeded when submitted again)
                outcomes[step] = outcome
                if outcome in DRAINED and reason and self._cause(reason):
                    self.full.append(step)
                elif outcome in DRAINED and reason and reason.startswith(TOO_LONG):
                    self.too_long.append(step)
                if outcome in DRAINED and not self.nodes_lost and reason and NODES_LOST in reason:
                    self.nodes_lost = reason[reason.index(NODES_LOST):].split(";")[0]
                self.total = max(self.total, len(outcomes))  # steps its steps submitted count too
                # A success has a reason only where its node saw the kernel's OOM killer take a
                # process of it (fleet.node.memwatch.oom_note): said, on a terminal too, since
                # the step went on without it and its results may lack what that process made.
                # A step that ended in this run before and was submitted again (a retried
                # parent's child): its row says by whom, so its second line is not a repeat.
                again = f" ({more[0]})" if more and more[0] else ""
                line = f"  {outcome:<10} {step}{again}" + (
                    f": {one_line(reason)}" if reason and outcome != S.SKIPPED else "")
                if outcome in LOGGED and no_log(reason):  # (its directory could not be made: no log to read)
                    line += " (no log: the step failed before it could open one)"
                elif has_log(outcome, reason):  # (not one another fleet ended without running it)
                    line += f" (log in the run directory: steps/{step}/log)"
            if tty:
                out.write("\r\033[K")
            if not tty or outcome not in (S.SUCCEEDED, S.SKIPPED) or (outcome == S.SUCCEEDED and reason):
                print(f"[{len(outcomes):>{len(str(self.total))}}/{self.total}]{line}", file=out)
        self._elsewhere(u.counts.get(S.ELSEWHERE, 0))
        self._others_left(bool(u.finished) or u.counts.get(S.RUNNING, 0) > 0)
        if tty:
            self._bar(u.counts.get(S.RUNNING, 0))

    def _elsewhere(self, count: int) -> None:
        """Say once that steps wait for another fleet sharing the run directory, which
        holds them (their claims): before 2026-12-07 `fleet run` sat silent until they
        ended there. Other shards' steps not ended yet are said apart (`_other`)."""
        n = count - (len(self.others) - len(self.others_ended))
        if n <= 0 or self.elsewhere_said:
            return
        self.elsewhere_said = n
        if self.tty:
            self.out.write("\r\033[K")
        print(f"fleet: {n} step{'s' if n > 1 else ''} of this suite {'run' if n > 1 else 'runs'} in another fleet "
              f"sharing this run directory: waiting for {'them' if n > 1 else 'it'} to end there "
              f"(`fleet status` lists the fleets)", file=self.out, flush=True)

    def _others_left(self, busy: bool) -> None:
        """Name the other shards' steps this shard still waits for once nothing of its own
        has run or ended for OTHERS_QUIET_S, then every OTHERS_AGAIN_S: a shard whose
        other shards were not run (or whose suites disagree on which shard runs a step)
        otherwise waited in silence for ever (before 2026-12-07)."""
        now = time.monotonic()
        if busy or not self.others:
            self.quiet_since, self.quiet_said = now, 0.0
            return
        due = self.quiet_first if not self.quiet_said else self.quiet_said - self.quiet_since + OTHERS_AGAIN_S
        if now - self.quiet_since < due:
            return
        left = [s for s in self.others if s not in self.others_ended]
        if not left:
            return
        self.quiet_said = now
        named = ", ".join(f"{s} (shard {self.others[s]})" for s in left[:OTHERS_NAMED])
        more = f" and {len(left) - OTHERS_NAMED} more" if len(left) > OTHERS_NAMED else ""
        if self.tty:
            self.out.write("\r\033[K")
        print(f"fleet: nothing of this shard has run for {now - self.quiet_since:.0f} s; it waits for "
              f"{len(left)} step{'s' if len(left) > 1 else ''} of other shards: {named}{more}: they end when "
              f"their shards run them (`fleet run --shard I/N` of a suite that gives them to that shard)",
              file=self.out, flush=True)

    def _cause(self, reason: str) -> str:
        """Which of drain.UNWRITABLE `reason` says ("" for none), kept as the cause if it is the first."""
        for cause in UNWRITABLE:
            if cause in reason:
                self.cause = self.cause or cause
                return cause
        return ""

    def _other(self, step: str, outcome: str, reason: str) -> None:
        """Another shard's step ended as this fleet saw it: a success there is no skip of
        this shard's ("succeeded"), and only what did not succeed is shown on a terminal."""
        if outcome == "retry":
            return
        shown = S.SUCCEEDED if outcome == S.SKIPPED else outcome
        self.others_ended[step] = shown
        if self.tty and shown == S.SUCCEEDED:
            return
        if self.tty:
            self.out.write("\r\033[K")
        why = f": {one_line(reason)}" if reason and shown != S.SUCCEEDED else ""
        print(f"{'':>{2 * len(str(self.total)) + 3}}  {shown:<10} {step}{why} (shard {self.others[step]}'s step)",
              file=self.out)

    def of_others(self, ended: bool = True) -> str:
        """The summary's clause on other shards' steps ("" for none): how they ended, and
        how many had not (`ended`: the submission's end; else an interrupt's)."""
        if not self.others:
            return ""
        counts: dict[str, int] = {}
        for o in self.others_ended.values():
            counts[o] = counts.get(o, 0) + 1
        said = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        left = len(self.others) - len(self.others_ended)
        if left:
            said += (", " if said else "") + f"{left} not ended" + ("" if ended else " (their shards run them)")
        return f"; of other shards' steps: {said}"

    def _bar(self, running: int) -> None:
        n, total = len(self.outcomes), self.total
        fill = int(BAR_WIDTH * n / total) if total else BAR_WIDTH
        # (cleared after it, not before: a shorter bar than the last leaves nothing of it)
        self.out.write(f"\r[{'#' * fill}{'.' * (BAR_WIDTH - fill)}] {n}/{total} done, {running} running, "
                       f"{time.monotonic() - self.started:.0f} s\033[K")
        self.out.flush()

    def ended(self) -> None:
        """The last answer came: the bar's line ended, the skipped steps not listed counted."""
        if self.tty:
            self.out.write("\n")
        if self.unlisted:
            print(f"  ... and {self.unlisted} more skipped, not listed", file=self.out)
