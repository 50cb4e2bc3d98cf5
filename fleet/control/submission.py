"""One submission to a fleet: its steps, their counts by state, the rows of those that
ended (what a client following it is sent: fleet.control.submissions.Submissions.progress),
and which finished submissions keep them (kept).

A fleet lives for hours (a notebook, a driver script submitting the same suite again
and again): a submission's steps and rows take some 200 bytes a step, and before
2026-12-07 every submission ever made kept them for good (with its step definitions,
held elsewhere: about 1 KB a step a submission in all). Now a finished submission lets
them go once later ones came (release), and keeps what `fleet status` lists of it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fleet.core import states as S

# Every state a step can be in (each one the scheduler moves a step to is in its table):
# a submission's counts hold each from the start, so keeping them is two plain dict updates.
STATES = tuple(sorted({a for a, _ in S.TRANSITIONS} | set(S.TRANSITIONS.values())))

# Finished submissions whose steps and rows are kept for clients that follow them, the
# latest ones: at most KEEP_FINISHED, and beyond the latest one no more steps than
# KEEP_STEPS among them (a fleet that reruns a million-step suite keeps one, not eight).
KEEP_FINISHED = 8
KEEP_STEPS = 100_000
# One whose end no client has been told yet (its last progress answer, done, not asked
# for: `fleet run` following it, slow to read its last rows) is kept past those this long
# after it was first found finished.
UNTOLD_S = 600.0


@dataclass
class Submission:
    id: int
    suite: str
    steps: list[str]
    remaining: int
    finished: list = field(default_factory=list)
    # Its steps by state: every step waits until the scheduler has it (Submissions.moved
    # and _take keep it up to date); the counts always add up to len(steps).
    counts: dict = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    again: set = field(default_factory=set)  # steps that ended in it and were added again, until they end again
    # Of those, who added each again ("submitted again by p, attempt 2"): its second end's row says so.
    again_by: dict = field(default_factory=dict)
    # The children added to it (add, done_before): never one of the suite's own steps (a
    # child's id is refused if the fleet has it: fleet.control.children), so not a set of all.
    _has: set = field(default_factory=set)
    not_started: int = 0  # its steps the drain's close counted ended unstarted (fleet.control.closing)
    serial: bool = False  # `fleet run --serial`: its steps, and the children they submit, one at a time
    force: bool = False   # `fleet run --force`: its steps, and the children they submit, run again
    t: float = 0.0        # when it was registered (time.time(): Submissions.busy_since)
    told: bool = False    # a client was sent its last rows, finished (Submissions.progress)
    seen_done: float = 0.0  # when it was first found finished by to_release (0: not yet)
    _size: int = -1       # its step count once its steps and rows were let go (release); -1: kept

    def __post_init__(self):
        self.counts[S.WAITING] += len(self.steps)

    @property
    def released(self) -> bool:
        """Whether its steps and rows were let go (release)."""
        return self._size >= 0

    def step_count(self) -> int:
        """How many steps it has (its steps kept or not)."""
        return len(self.steps) if self._size < 0 else self._size

    def counts_now(self) -> dict[str, int]:
        """Its steps by state, the states none is in left out: O(states)."""
        return {k: n for k, n in self.counts.items() if n}

    def holds(self, sid: str) -> bool:
        """Whether a child was counted in it (submitted, or kept as done, since it began)."""
        return sid in self._has

    def done_before(self, ids, state_of) -> None:
        """Children that succeeded before it, counted in it as ended (skipped), if not in it yet."""
        for sid in ids:
            if sid not in self._has:
                self._has.add(sid)
                self.steps.append(sid)
                self.counts[state_of(sid)] += 1
                self.finished.append([sid, S.SKIPPED, 0, "already succeeded"])

    def add(self, ids, state_of, by: str = "") -> None:
        """More steps counted in this submission (a step's children: fleet.control.children).
        One it holds already (a retried parent submits a failed child again) is not
        counted twice: it is waited for again if it ended (`state_of`: the scheduler's
        state of a step), and counted waiting until the submission's declare counts it
        as it is (Submissions._take); `by` says who added it again, for its next end's row."""
        has, counts = self._has, self.counts
        for sid in ids:
            if sid not in has:
                has.add(sid)
                self.steps.append(sid)
                self.remaining += 1
                counts[S.WAITING] += 1
                continue
            state = state_of(sid)
            if state is None:
                continue
            counts[state] -= 1
            counts[S.WAITING] += 1
            if state in S.FINAL:
                self.remaining += 1
                self.again.add(sid)
                if by:
                    self.again_by[sid] = by

    def release(self) -> None:
        """Let its steps and rows go (it finished: every step ended in it, none runs for
        it). What remains is what `fleet status` lists of it (its step count, how many
        ended unstarted) and its counts by state, those not at 0 (a step the scheduler
        moves yet, still listed as its in the fleet's table, is counted as before)."""
        self._size = len(self.steps)
        self.steps, self.finished = [], []
        self.again, self.again_by, self._has = set(), {}, set()
        self.counts = Counter(self.counts_now())


def to_release(kept, now: float) -> list[int]:
    """Of the submissions that keep their steps and rows (`kept`: Submission objects in
    the order made), the finished ones to let go now: all but the latest KEEP_FINISHED
    finished, and beyond the latest one those past KEEP_STEPS steps in all; of those, one
    whose end no client has been told is kept UNTOLD_S after it was first found finished
    here. A submission with a step still to end in it is always kept: the scheduler and
    the records still count its steps there. O(kept)."""
    out: list[int] = []
    n = steps = 0
    for sub in reversed(kept):
        if sub.remaining > 0:
            continue
        sub.seen_done = sub.seen_done or now
        size = len(sub.steps)
        if n < KEEP_FINISHED and (n == 0 or steps + size <= KEEP_STEPS):
            n, steps = n + 1, steps + size
        elif sub.told or now - sub.seen_done >= UNTOLD_S:
            out.append(sub.id)
    return out
