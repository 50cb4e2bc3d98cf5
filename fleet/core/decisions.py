"""The scheduler's vocabulary: the events it is fed and the decisions it returns.

All frozen records. A `Wait` carries a structured :class:`~fleet.core.waits.WaitReason`;
its prose (`Wait.reason`) is rendered from that structure, never stored beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Union

from fleet.core import waits as W
from fleet.core.resources import NodeSpec, Placement
from fleet.core.suite import StepSpec
from fleet.core.waits import WaitReason


# --- events ---------------------------------------------------------------------

@dataclass(frozen=True)
class NodeJoined:
    """A node's agent joined, with the node's resources."""

    node: NodeSpec


@dataclass(frozen=True)
class NodeLost:
    """A node is gone; the steps running on it are lost. `fence_s`: seconds from now
    until the node's own side must have stopped them (fleet.core.fencing): its resources
    go at once, its steps end lost only then (0: at once, its agent stopped them)."""

    node: str
    reason: str = "node lost"
    fence_s: float = 0.0


@dataclass(frozen=True)
class Submitted:
    """Steps to run, with their effective dependencies (explicit and by files), and
    the ids that completion markers say already succeeded."""

    steps: tuple[StepSpec, ...]
    deps: Mapping[str, tuple[str, ...]] = field(hash=False)
    done: frozenset[str] = frozenset()
    serial: bool = False  # one step at a time, in setup order (priorities ignored)
    foreign: frozenset[str] = frozenset()  # run by another fleet (shard): wait for its outcome
    # Steps this fleet holds as another shard's (ELSEWHERE) that this submission runs: a
    # job array's shards submitted to one fleet (`fleet up`). Renewed, to run here.
    takes: frozenset[str] = field(default=frozenset(), hash=False, compare=False)
    # Entered in parts of about this many steps each (0: all at once): the scheduler
    # pauses with an Entering decision and goes on at each EnterMore (see EnterMore).
    chunk: int = 0
    # The steps' ids deps first, if the caller has it (else the scheduler sorts them).
    order: tuple[str, ...] = field(default=(), hash=False, compare=False)
    # Work seconds of these steps' earlier runs (fleet.core.durations): their expected durations.
    durations: Mapping[str, float] = field(default_factory=dict, hash=False, compare=False)
    # Steps a running step submitted (its children, fleet.core.phases): "" for a suite.
    parent: str = ""
    # Of a parent's submission, every child it named, in its order: those known already
    # that add nothing (kept: not in `steps`) too, for its ctx.children (fleet.core.phases).
    # Empty: `steps`. A parent's submission with nothing new has no steps and only these.
    named: tuple[str, ...] = field(default=(), hash=False, compare=False)


@dataclass(frozen=True)
class EnterMore:
    """Go on entering the submission that paused with an Entering decision.

    A big submission is entered in parts so that its caller can do other work between
    them. Until the last part, every other event is held by the scheduler and handled
    afterwards, in the order it came: the decisions are those of the whole submission
    at once followed by those events, however the parts fall."""


@dataclass(frozen=True)
class StepExited:
    """An attempt of a running step ended."""

    step: str
    attempt: int
    outcome: str  # succeeded | failed | terminated | lost | stopped | timed_out | cancelled
    reason: str = ""  # (or wait | next | restart | broken: fleet.core.phases)
    stage: str = ""  # the stage a `next` asks for
    final: bool = False  # not retried, whatever its retries (it killed its node's zygote: fleet.control.jobend)
    # Its node saw it go on (wait, next, restart: states.AT_ONCE) and dropped what was queued
    # behind it, though the coordinator ends it otherwise (children refused, a wait loop).
    went_on: bool = False

    @property
    def exits(self) -> tuple:
        """This exit, as one of Exits (the scheduler handles both alike)."""
        return (self,)


@dataclass(frozen=True)
class Exits:
    """Several attempts ended (a loop turn's exits, in the order they came): each is
    applied as its StepExited would be, then one scheduling pass follows them all."""

    exits: tuple[StepExited, ...]


@dataclass(frozen=True)
class GoOn:
    """Decision: the pass stopped after PASS_STARTS starts with more to try; feed any
    event (`Exits(())`: nothing ended) to go on. One call's decisions, and the loop turn
    acting on them, stay bounded: at 10,000 nodes a first pass started 640,000 steps
    in one call of 12 s."""


PASS_STARTS = 10_000


@dataclass(frozen=True)
class Elsewhere:
    """The step just started is claimed by another live fleet: it runs there, not here."""

    step: str
    attempt: int
    reason: str


@dataclass(frozen=True)
class Settled:
    """Another fleet finished a step that is ELSEWHERE here (its marker appeared)."""

    step: str
    outcome: str  # succeeded | failed
    reason: str = ""


@dataclass(frozen=True)
class Reclaim:
    """A step ELSEWHERE is ours to run after all (the other fleet's claim went stale)."""

    step: str
    reason: str = ""


@dataclass(frozen=True)
class Cancel:
    """`fleet cancel`: these steps are not to run. One running is killed (a Kill
    decision; its exit, outcome cancelled, ends it); one not started ends cancelled now.
    A cancelled step is never retried and blocks its dependents."""

    steps: tuple[str, ...]
    reason: str = "cancelled"


Event = Union[NodeJoined, NodeLost, Submitted, EnterMore, StepExited, Exits, Elsewhere, Settled, Reclaim, Cancel]


# --- decisions ------------------------------------------------------------------

@dataclass(frozen=True)
class Resume:
    """Where a multi-stage step or a parent goes on (fleet.core.phases): how many times
    it was run again (`phase`), at which `stage`, after how many fresh starts
    (`restarts`), and its children's outcomes so far, ((id, state), ...)."""

    phase: int = 0
    stage: str = ""
    restarts: int = 0
    children: tuple = ()


@dataclass(frozen=True)
class Start:
    """Run this attempt of the step on these cores, GPUs and memory."""

    step: str
    attempt: int
    placement: Placement
    resume: Resume | None = None  # a step that ran before in this attempt goes on so

    @property
    def cores(self) -> int:
        """How many cores the placement gives, over all its nodes."""
        return sum(len(s.cores) for s in self.placement)


@dataclass(frozen=True)
class Wait:
    """The step is ready but does not start now, for the reason `why`; `behind` more
    of its kind queue after it."""

    step: str
    why: WaitReason
    behind: int = 0

    @property
    def reason(self) -> str:
        """`why` in words, as the event stream and `fleet status` have always shown it."""
        return self.why.text()


@dataclass(frozen=True)
class Retry:
    """The step failed and runs again (it is queued, not started, by this decision)."""

    step: str
    attempt: int  # the attempt that will run next
    reason: str


@dataclass(frozen=True)
class Finished:
    """An attempt ended with this outcome (the step may still be retried). `ran` is
    False for a step that ends without ever having started (cancelled while waiting),
    and for one cancelled as its attempt ended going on (next, wait, restart: its exit
    record says so): the coordinator records the cancel on its own. `overrules`: the
    node's exit record said the attempt went on, and the scheduler ends it with this
    outcome instead (a restart past MAX_RESTARTS: fleet.core.phases); the coordinator
    records this exit too, as the attempt's last word: its `exit` event and its attempt
    record (which --max-attempts counts; before 2026-12-06 only the event). `goes_on`:
    the step runs again (see the field)."""

    step: str
    attempt: int
    outcome: str
    reason: str = ""
    ran: bool = True
    overrules: bool = False
    # The step runs again after this attempt (a retry follows, or its next generation): not
    # its end. Said here because the coordinator acts on a batch's decisions after the
    # scheduler made them all: a lost attempt's retry found unrunnable in the same batch
    # left the step's state final, and its end was counted twice (before 2026-12-07).
    goes_on: bool = False


@dataclass(frozen=True)
class Blocked:
    """The step will not run because a dependency did not succeed."""

    step: str
    because: str


@dataclass(frozen=True)
class Unrunnable:
    """The step can never fit the allocation; `reason` says what is short. `after_loss`:
    it fitted until this fleet lost nodes (fleet.core.fencing, fleet.core.unfit): a
    verdict on what is left of this allocation, not on the step, which another fleet
    sharing the run directory may run (fleet.control.claims.Claims.verdict)."""

    step: str
    reason: str
    after_loss: bool = False


@dataclass(frozen=True)
class Skipped:
    """A completion marker says the step already succeeded."""

    step: str


@dataclass(frozen=True)
class Entering:
    """A chunked submission has `entered` of its `total` steps in: feed EnterMore for
    the rest (entered == total: it is all in, and what follows is its scheduling pass)."""

    entered: int
    total: int


@dataclass(frozen=True)
class Ignored:
    """An event that no longer applies (an exit report of an earlier attempt...)."""

    what: str


@dataclass(frozen=True)
class Kill:
    """Stop this running attempt (SIGTERM, SIGKILL after the step's grace): it was
    cancelled. Its exit, reported as cancelled, is what ends it."""

    step: str
    attempt: int
    reason: str = "cancelled"
    grace: float | None = None  # SIGKILL this soon, if sooner than its own grace (the drain: fleet.core.deadline)


Decision = Union[Start, Wait, Retry, Finished, Blocked, Unrunnable, Skipped, Entering, Ignored, Kill, GoOn]


# --- views ----------------------------------------------------------------------

@dataclass(frozen=True)
class JobView:
    """A read-only view of one step for status displays and reports."""

    id: str
    state: str
    attempt: int
    placement: Placement
    started_at: float | None
    wait_reason: str | None
    spec: StepSpec
    why: W.WaitReason | None = None  # the structure behind `wait_reason`
    generation: int = 1  # 2 and up: a later submission made the step run anew


def submission(steps: Iterable[StepSpec], deps: Mapping[str, tuple[str, ...]] | None = None,
               done: Iterable[str] = ()) -> Submitted:
    """A Submitted event; `deps` defaults to each step's explicit deps."""
    steps = tuple(steps)
    return Submitted(steps, dict(deps) if deps is not None else {s.id: s.deps for s in steps},
                     frozenset(done))
