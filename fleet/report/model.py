"""What a report is made of: the nodes, steps and attempts of one session as the records
tell them, the figures drawn from them (:class:`Report`), and its JSON form.

Outcomes are fleet.core.states' own, plus the report's view of a step that has none
yet (RUNNING, WAITING), will not in its fleet up still (HELD_BACK: the allocation's end
held it back) or never will (UNFINISHED, NOT_RUN: the fleet went down).
Wait categories are fleet.core.waits' causes; the JSON and the words keep the names
the report has always printed (see :func:`category_name` and CATEGORY_TEXT).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from fleet.core import states as S
from fleet.core import waits as W

UNFINISHED, NOT_RUN = "unfinished", "not run"  # the fleet went down before it ended / ran
# An attempt its node may have started unheard (fleet.core.unsure): no outcome of its own,
# a problem of its own (fleet.report.unsure), never a failure.
MAY_HAVE_RUN = "may have run"
HELD_BACK = "held back"  # ready, its fleet up, but held back by the allocation's end: it will not start there
# An attempt that ended so did not end its step unsuccessfully (the last three: it goes on, fleet.core.phases).
ENDED_WELL = (S.SUCCEEDED, S.WAIT, S.NEXT, S.RESTART)
PROBLEM_OUTCOMES = (S.FAILED, S.TERMINATED, S.OUT_OF_MEMORY, S.TIMED_OUT, S.LOST, S.CANCELLED, S.BLOCKED, S.UNRUNNABLE, S.INTERRUPTED,
                    UNFINISHED, NOT_RUN, S.BROKEN, S.STOPPED)

# What a waiting step waited for, in words (text and HTML).
CATEGORY_TEXT = {
    W.DEPENDENCY: "a dependency",
    W.CORES: "cores",
    W.GPUS: "GPUs",
    W.MEMORY: "memory",
    W.WHOLE_NODE: "a node that would hold it whole",
    W.SPAN: "room across nodes",
    W.ALONE: "to run alone (serial)",
    W.QUEUED: "its turn (ready, no wait recorded)",
    W.ELSEWHERE: "another fleet (which holds its claim)",
    W.DEADLINE: "the allocation's end (would not end before the drain point)",
    W.RESERVED: "a reservation for another step",
    W.STOPPING: "its fleet, which was going down",
    W.OTHER: "something else",
}
# The JSON has always named the categories so; only this one differs from its cause.
_JSON_NAME = {W.WHOLE_NODE: "whole node"}


def category_name(cause: str) -> str:
    """A wait category as the JSON names it."""
    return _JSON_NAME.get(cause, cause)


class Piece(NamedTuple):
    """What an attempt held on one node."""

    node: str | None
    cores: list
    gpus: list
    memory: int


class MayHaveRun(NamedTuple):
    """An attempt that may have run: the step was queued on `node`, which was lost (or
    its zygote died) before its start was heard; it ran again as attempt + 1 (its
    `unqueued` record, `may_have_started`: fleet.report.unsure)."""

    attempt: int
    node: str | None
    t: float
    reason: str  # why, without what the next attempt is (said apart)
    fleet: str = ""


class Waited(NamedTuple):
    """A step's own wait record (or an `elsewhere`/`reclaim` one): when, why, in words,
    and the fleet that wrote it."""

    t: float
    why: W.WaitReason
    text: str
    fleet: str = ""


@dataclass
class Node:
    name: str
    cores: list[int]
    gpus: list[int]
    memory: int
    joined: float
    lost: float | None = None
    lost_reason: str = ""
    memlimit: str = ""  # how its steps were held to their memory (fleet.node.memlimit), in words
    memory_used: int | None = None  # the most in use on it, as its node_memory records said
    fleet: str = ""  # the fleet it served (each fleet's nodes are its own, however named)
    left: float | None = None  # its fleet went down (or was found gone) then
    restarts: list = field(default_factory=list)  # (t, how) of each zygote its agent restarted

    @property
    def restarts_text(self) -> str:
        """"its fork server (zygote) restarted 2 time(s), the last at T: killed by signal 9"
        with T relative to nothing (the caller's words follow), or "" if it never was."""
        if not self.restarts:
            return ""
        return f"its fork server (zygote) restarted {len(self.restarts)} time(s), the last {self.restarts[-1][1]}"

    @property
    def until(self) -> float | None:
        """When it stopped offering its cores: lost, or its fleet ended (None: still up)."""
        return self.lost if self.lost is not None else self.left


def _memory_json(n: Node) -> dict:
    """A node's memory limits and most in use, where its records say (not in older streams)."""
    out: dict = {}
    if n.memlimit:
        out["memlimit"] = n.memlimit
    if n.memory_used is not None:
        out["memory_used_max"] = n.memory_used
    return out


@dataclass(slots=True)
class Attempt:
    step: str
    attempt: int
    node: str | None
    placement: list[Piece]           # one per node
    start: float                     # the start decision (coordinator clock)
    cores: int = 0                   # held over every node
    gpus: int = 0
    memory: int = 0
    started: float | None = None     # the coordinator heard the process exists
    end: float | None = None         # the exit record (None: still running)
    outcome: str = S.RUNNING
    reason: str = ""
    startup_s: float | None = None   # decision -> the step's own first instruction
    work_s: float | None = None      # the step's own work
    exit_seen: bool = False          # an exit record came (its fields are read as it comes, not kept)
    fleet: str = ""                  # the fleet that ran it
    retried: bool = False            # the fleet retried it (a `retry` record): another attempt follows
    # A child's latest `step` record before this attempt's `start`, where it was declared
    # again (Step.declared); None: its first (Step.submitted).
    declared: float | None = None

    @classmethod
    def placed(cls, step: str, attempt: int, node: str | None, placement: list[Piece], start: float,
               fleet: str = "") -> "Attempt":
        if len(placement) == 1:  # nearly always: spared the sums
            p = placement[0]
            return cls(step, attempt, node, placement, start, cores=len(p.cores), gpus=len(p.gpus), memory=p.memory,
                       fleet=fleet)
        return cls(step, attempt, node, placement, start, cores=sum(len(p.cores) for p in placement),
                   gpus=sum(len(p.gpus) for p in placement), memory=sum(p.memory for p in placement), fleet=fleet)


@dataclass(slots=True)
class Step:
    id: str
    submitted: float
    deps: list[str] = field(default_factory=list)
    serial: bool = False
    # Another shard runs it; this fleet waits for its marker: that shard, "I/N", or True
    # where the stream does not say (False: not another shard's).
    foreign: bool | str = False
    fleet: str = ""                   # the fleet that declared it to run it (the first, if several)
    # When other fleets saw its success (their `skipped` record, by fleet): their steps
    # that depend on it could start only then. None for nearly every step.
    seen: dict | None = None
    attempts: list[Attempt] = field(default_factory=list)
    waits: list[Waited] = field(default_factory=list)   # own wait records
    retries: list[float] = field(default_factory=list)
    final: str | None = None          # blocked | unrunnable | cancelled | skipped (decided without an exit)
    final_t: float | None = None
    final_reason: str = ""
    outcome: str = S.WAITING
    reason: str = ""
    end: float | None = None          # when it reached its final state
    # Submitted again (a later submission, or another fleet) after its last attempt ended
    # unsuccessfully: it is to run again, not ended by that attempt.
    again: bool = False
    # Each time it was submitted again so, or after a skip: (when its wait before ended:
    # blocked, skipped, or its attempt's end; when it was submitted again). None for nearly every step.
    again_at: list | None = None
    segments: list[tuple[float, float, str, str]] = field(default_factory=list)  # waits (from, to, cause, why)
    # The kind of step, for queueing behind its kind's head: what its declaration asks for
    # (cores, min_cores, gpus, memory, step kind), or ("serial",) in a serial run; one tuple
    # a kind, shared (fleet.report.ingest); None: no declaration in the stream.
    sig: tuple | None = None
    # Attempts that may have run unheard (MayHaveRun), apart from those recorded: None
    # for nearly every step.
    unsure: list | None = None
    # The step that submitted it (a child: fleet.report.families.parent_of); None for a suite's step.
    parent: str | None = None
    # A child's latest `step` record, where its parent declared it again (to run again,
    # or while it ran); None for nearly every step. Each attempt keeps the one before it
    # (Attempt.declared): the floor anchors a child's last run there (fleet.report.floor).
    declared: float | None = None

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def waited_s(self) -> float:
        return sum(b - a for a, b, _, _ in self.segments)

    def waited_for(self) -> str | None:
        """The cause it waited for longest (a fleet.core.waits cause)."""
        by: dict[str, float] = {}
        for a, b, cat, _ in self.segments:
            by[cat] = by.get(cat, 0.0) + (b - a)
        return max(by, key=by.get) if by else None


@dataclass
class Report:
    run_dir: str
    session: int
    sessions: int
    in_progress: bool
    t0: float
    t_end: float
    wall_s: float
    work_s: float
    work_core_s: float
    startup: dict
    speedup: float | None
    floor_s: float
    floor_path: list[str]
    floor_with_startup_s: float
    utilization: dict
    nodes: dict[str, Node]
    steps: dict[str, Step]
    counts: dict[str, int]
    problems: list[dict]
    waits: dict[str, dict]            # by cause: {"steps", "step_s"}
    stretches: list[dict]             # "by_category" and each step's "for" are causes
    fleet_up_s: float | None = None
    capacity_floor_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    allocation: dict | None = None  # the end, drain point and drain (fleet.core.deadline), epoch seconds
    families: list[dict] = field(default_factory=list)  # children and stages (fleet.report.families)
    damaged_lines: int = 0  # lines of the stream that were no record, but its last (fleet.report.reading)

    @property
    def attempts(self) -> Iterable[Attempt]:
        for s in self.steps.values():
            yield from s.attempts

    def rel(self, t: float | None) -> float | None:
        return None if t is None else round(t - self.t0, 6)

    def to_json(self, stretch_steps: int = 20) -> dict:
        """The report as `fleet report --json` prints it (docs/report.md)."""
        return {
            "run_dir": self.run_dir,
            "session": self.session,
            "sessions": self.sessions,
            "in_progress": self.in_progress,
            "t0": self.t0,
            "wall_s": r6(self.wall_s),
            "work_s": r6(self.work_s),
            "work_core_s": r6(self.work_core_s),
            "startup_s": r6(self.startup["total_s"]),
            "startup": {k: r6(v) if isinstance(v, float) else v for k, v in self.startup.items()},
            "speedup": r6(self.speedup),
            "floor_s": r6(self.floor_s),
            "floor_path": self.floor_path,
            "floor_with_startup_s": r6(self.floor_with_startup_s),
            "from_floor_s": r6(self.wall_s - self.floor_s),
            "capacity_floor_s": r6(self.capacity_floor_s),
            "floor_ratio": r6(self.wall_s / self.floor_s) if self.floor_s > 0 else None,
            "fleet_up_s": r6(self.fleet_up_s),
            "utilization": self.utilization,
            "nodes": {n.name: {"cores": len(n.cores), "gpus": len(n.gpus), "memory": n.memory,
                               "joined": self.rel(n.joined), "lost": self.rel(n.lost),
                               "lost_reason": n.lost_reason, **_memory_json(n),
                               **({"zygote_restarts": [{"t": self.rel(t), "how": how} for t, how in n.restarts]}
                                  if n.restarts else {})} for n in self.nodes.values()},
            "counts": self.counts,
            "problems": self.problems,
            "waits": {category_name(k): v for k, v in self.waits.items()},
            "stretches": [_stretch_json(st, stretch_steps) for st in self.stretches],
            "notes": self.notes,
            **({"allocation": self.allocation} if self.allocation else {}),
            # Only where some step has children or stages: a 0.1 stream reports as 0.1 did.
            **({"families": self.families} if self.families else {}),
            **({"damaged_lines": self.damaged_lines} if self.damaged_lines else {}),
            "steps": {s.id: self._step_json(s) for s in self.steps.values()},
        }

    def _step_json(self, s: Step) -> dict:
        rel = self.rel
        a = s.last
        segs = s.segments
        waited = (segs[0][1] - segs[0][0]) if len(segs) == 1 else s.waited_s
        waited_for = (segs[0][2] if len(segs) == 1 else s.waited_for()) if segs else None
        e = {"node": None, "cores": 0, "gpus": 0, "memory": 0, "start": None,
             "end": rel(s.end), "outcome": s.outcome, "reason": s.reason, "work_s": None, "startup_s": None,
             "attempts": len(s.attempts), "waited_s": round(waited, 6),
             "waited_for": category_name(waited_for) if waited_for is not None else None}
        if s.unsure:  # (counted among its attempts, and named: a possible run, not a failure)
            e["attempts"] += len(s.unsure)
            e["may_have_run"] = [u.attempt for u in s.unsure]
        if a is not None:
            e["node"], e["cores"], e["gpus"], e["memory"] = a.node, a.cores, a.gpus, a.memory
            e["start"] = rel(a.start)
            if s.end is None:
                e["end"] = rel(a.end)
            if len(s.attempts) == 1:
                e["work_s"], e["startup_s"] = a.work_s, a.startup_s
            else:
                e["work_s"] = r6(sum(x.work_s for x in s.attempts if x.work_s is not None))
                e["startup_s"] = r6(sum(x.startup_s for x in s.attempts if x.startup_s is not None))
            if len(a.placement) > 1:
                e["nodes"] = [p.node for p in a.placement]
        return e


def _stretch_json(st: dict, max_steps: int) -> dict:
    out = dict(st)
    out["by_category"] = {category_name(k): v for k, v in st["by_category"].items()}
    out["steps"] = [dict(w, **{"for": category_name(w["for"])}) for w in st["steps"][:max_steps]]
    return out


def r6(x, nd: int = 6):
    """Rounded as the JSON shows figures (None stays None)."""
    return None if x is None else round(x, nd)
