"""The report of one session: its records gathered (fleet.report.ingest), each step's
outcome settled, and the figures drawn (defined in docs/report.md):

- wall: from the first submission to the end of the last step (or `now` while steps
  still run or wait);
- work: the sum of the steps' own work (`work_s` of every finished attempt: from the
  step's first instruction of its own code to its last), never the cost of starting
  them, which is reported apart as startup (`startup_s`: the coordinator's decision
  to the step's own first instruction);
- speedup: work / wall, against running the same steps back to back;
- the dependency floor: the longest chain of the steps' own work over the recorded
  dependencies, and how far the run was from it;
- utilization: core-, GPU- and memory-seconds held by steps (from the start decision to
  the exit record, the scheduler's view) and core-seconds of the steps' own work, per
  node and overall, against what the live nodes offered in the wall window;
- waits: what each waiting step waited for, and the longest stretches in which cores
  sat idle while steps waited.

Pure: nothing here reads a clock or a file. A stream of a run in progress works:
running steps end `now`, waiting steps wait until `now`.
"""

from __future__ import annotations

from fleet.core import states as S
from fleet.core import waits as W
from fleet.report import clocks, figures, waits
from fleet.report.ingest import Gathered, gather_session
from fleet.report.model import HELD_BACK, NOT_RUN, UNFINISHED, Report
from fleet.report.stretches import stretches
from fleet.report.families import families


def build(records: list, now: float | None = None, *, session: int = -1, run_dir: str = "",
          top: int = 10) -> Report:
    """The report of one session of `records` (fleet.wire.events records, in the order
    written, in one list; or, from fleet.report.ingest.blocks, in blocks: an iterator of
    lists, read as they come, so that the stream's records are never held whole).

    `now` ends what is still running or waiting when the session has no `fleet_down`
    (a run in progress); without it, the last record's time is used.
    `session`: 1-based index, or negative from the end (-1: the last).
    """
    g, n, idx = gather_session([records] if isinstance(records, list) else records, session)
    nodes, steps = g.nodes, g.steps
    in_progress = bool(g.records) and (g.down_t is None or g.fleets_up > 0)
    down_t = None if in_progress else g.down_t
    if now is None or not in_progress:
        now = down_t if down_t is not None else g.last_t
    now = max(now, g.last_t)

    drained_at = g.allocation.get("drained")
    busy_now, last_end = _settle(steps, now, in_progress, g.closed_at,
                                 (g.drained, drained_at) if drained_at is not None else (set(), None))
    if g.allocation.get("drained") is not None or g.not_started:  # what a drain left undone
        _not_started(g, g.allocation.get("drained") is not None)
    finished = [x for s in steps.values() for x in s.attempts]
    work = sum(x.work_s for x in finished if x.work_s is not None)
    work_core = sum(x.work_s * x.cores for x in finished if x.work_s is not None)
    # The wall window: from the first submission to the end of the last step.
    t0 = g.submitted_t if g.submitted_t is not None else g.first_t
    t_end = max(now if busy_now else (last_end if last_end is not None else t0), t0)
    wall = t_end - t0

    floor_s, floor_path, floor_ws = figures.dependency_floor(steps, now)
    util = figures.utilization(nodes, steps, t0, t_end)
    cap = util["overall"]["capacity_core_s"] or 0.0
    waits.wait_segments(steps, t_end, waits.FreeIndex(nodes, steps, t_end), g.stopping)
    return Report(
        run_dir=run_dir, session=idx + 1, sessions=n, in_progress=in_progress, t0=t0, t_end=t_end,
        wall_s=wall, work_s=work, work_core_s=work_core,
        startup=figures.startup([x.startup_s for x in finished if x.startup_s is not None]),
        speedup=(work / wall) if wall > 0 else None,
        floor_s=floor_s, floor_path=floor_path, floor_with_startup_s=floor_ws, utilization=util,
        nodes=nodes, steps=steps, counts=figures.counts(steps), problems=figures.problems(steps, t0, run_dir),
        waits=waits.totals(steps), stretches=stretches(nodes, steps, t0, t_end, top),
        fleet_up_s=(g.fleet_up_t - g.starting_t) if g.fleet_up_t is not None and g.starting_t is not None else None,
        capacity_floor_s=work_core / (cap / wall) if cap > 0 and wall > 0 else 0.0,
        notes=_notes(g, in_progress) + _over(util, g.damaged) + figures.floor_notes(wall, floor_s), allocation=dict(g.allocation) or None,
        families=families(steps, by_cut=not g.entered), damaged_lines=g.damaged)


def _not_started(g: Gathered, drained: bool) -> None:
    """The reason of each step a drain (or a close before it: nothing left could end
    before the drain point) did not start, as its not_started record says
    (fleet.control.closing: its own for a step no allocation like this one could start
    either); a record of before 2026-12-06 says none, and the reason is the drain's."""
    named = g.not_started
    why = (g.not_started_why or "not started: the fleet drained before the allocation's end") if drained else ""
    for s in g.steps.values():
        if s.outcome == NOT_RUN:
            s.reason = named.get(s.id) or why or s.reason


def _settle(steps: dict, now: float, in_progress: bool, closed: dict,
            drained: tuple[set, float | None] = (set(), None)) -> tuple[bool, float | None]:
    """Each step's outcome (its final state, what it is doing, or what a stopped fleet
    left undone: `closed`, the steps a fleet closed early, when, even while it is up;
    `drained`: the fleets that drained, and when: their steps left never start, even
    while they stay up); returns whether anything still runs or waits, and the last end."""
    busy_now = False
    last_end: float | None = None
    for s in steps.values():
        a = s.last
        if s.final is not None:
            s.outcome, s.reason, s.end = s.final, s.final_reason, s.final_t
        elif a is not None and a.end is None:
            if in_progress:
                s.outcome, s.reason = S.RUNNING, ""
                busy_now = True
            else:
                a.end, a.outcome, a.reason = now, UNFINISHED, "the fleet went down while it ran"
                s.outcome, s.reason, s.end = UNFINISHED, a.reason, now
        elif a is not None and a.outcome in (S.WAIT, S.NEXT, S.RESTART):  # to go on (fleet.core.phases)
            s.outcome = (S.SUSPENDED if a.outcome == S.WAIT else S.READY) if in_progress else UNFINISHED
            busy_now = busy_now or in_progress
            if not in_progress:
                s.reason, s.end = "the fleet went down before it went on (" + (a.reason or a.outcome) + ")", now
        elif a is not None and not (a.retried or s.again):  # (else it is to run again: retried, or submitted again)
            s.outcome, s.reason, s.end = a.outcome, a.reason, a.end
        elif s.foreign or (s.waits and s.waits[-1].why.cause == W.ELSEWHERE):
            s.outcome = S.ELSEWHERE  # another fleet runs it; no outcome of it reached this stream
            s.reason = (f"shard {s.foreign} runs it" if isinstance(s.foreign, str) else "another shard runs it"
                        ) if s.foreign else s.waits[-1].text.removeprefix("elsewhere: ")
            busy_now = busy_now or in_progress
        elif s.id in closed:  # (it waits no longer: its fleet closed it, and may stay up; _not_started says why)
            s.outcome, s.end = NOT_RUN, closed[s.id]
        elif in_progress and s.fleet in drained[0]:
            # (drained, up still: nothing starts any more. Before 2026-12-07 "waiting" here,
            # while fleet status, fleet run and the report's own drain line said not started.)
            s.outcome, s.end = NOT_RUN, drained[1]
        elif in_progress and s.waits and s.waits[-1].why.cause == W.DEADLINE:
            # (ready, held back by the allocation's end: it will not start in this allocation,
            # as fleet status counts it; before 2026-12-07 "waiting", its fleet's close to come)
            s.outcome, s.reason = HELD_BACK, s.waits[-1].text
            busy_now = True
        else:
            s.outcome = S.WAITING if in_progress else NOT_RUN
            if not in_progress:
                s.reason, s.end = "the fleet went down before it ran", now
            else:
                busy_now = True
        if s.end is not None and (last_end is None or s.end > last_end):
            last_end = s.end
        for x in s.attempts:
            if x.end is not None and (last_end is None or x.end > last_end):
                last_end = x.end
    return busy_now, last_end


def _over(util: dict, damaged: int) -> list[str]:
    """Why a utilization shows 100 % where the records counted more (figures.utilization)."""
    over = util.get("over_capacity")
    if not over:
        return []
    named = ", ".join(f"{name} {f:.2f} times" for name, f in list(over.items())[:5]) + (", ..." if len(over) > 5 else "")
    why = "damaged lines hid the ends of steps" if damaged else "the records overlap (a stream not as fleet writes it)"
    return [f"the core-seconds held, as the records count them, came to more than the cores offered ({named}), "
            f"shown as 100%: {why}"]


def _notes(g: Gathered, in_progress: bool) -> list[str]:
    notes = []
    if not g.records:
        notes.append("the stream is empty")
    if g.mismatches:
        notes.append(f"{g.mismatches} step(s) did not get the cores they were given (placement_mismatch records)")
    if g.oom_survived:
        notes.append(f"{len(g.oom_survived)} attempt(s) succeeded though the kernel's OOM killer took a process of "
                     f"theirs (their exit records' reason says which and where): {', '.join(g.oom_survived[:10])}"
                     + (", ..." if len(g.oom_survived) > 10 else ""))
    if g.over_memory:
        notes.append(f"{len(g.over_memory)} attempt(s) used more than their memory and were not stopped "
                     "(the watchdog's samples missed it: their exit records' memory_peak and reason say how much): "
                     f"{', '.join(g.over_memory[:10])}" + (", ..." if len(g.over_memory) > 10 else ""))
    if g.lost_exit_fields:
        notes.append(f"{g.lost_exit_fields} lost attempt(s) have no timings: their work is unknown and not counted")
    if g.skewed:
        notes.append(f"{g.skewed} attempt(s) began their work before the coordinator decided to start them "
                     "(work_start < decided_at): that node's clock is behind the coordinator's, and their "
                     "startup (clamped at 0) is not to be trusted")
    notes.extend(clocks.note(g))
    if g.damaged:
        notes.append(f"{g.damaged} damaged line(s) of the stream (not a fleet record; not its last line, which a live "
                     "run may be writing) were skipped: what they said (a start, an exit) is missing here")
    notes.extend(_gone_notes(g))
    if g.fleets_started > 1 + len(g.gone):
        if all(g.fleets):
            notes.append(f"{g.fleets_started} fleets shared the run directory at once ({', '.join(g.fleets)}), "
                         "reported together; each fleet's nodes are its own (named NODE@FLEET where two fleets "
                         "named theirs alike)")
        else:  # (a stream whose records name no fleet: a hand-made one)
            notes.append(f"{g.fleets_started} fleets wrote to this stream at once (or one ended without fleet_down); "
                         "its records carry no fleet id, so they are reported together")
    if in_progress:
        notes.append("the stream has no fleet_down: a run in progress (running steps end now)")
    return notes


def _gone_notes(g: Gathered) -> list[str]:
    """The fleets found gone: those that wrote no fleet_down (killed), and those that
    did, later, only held up (a suspended job: resumed, each stopped, saying why). Each
    ended once, at the first of the two records (before 2026-12-07 a held-up one counted
    two ends, and was said to have ended without fleet_down)."""
    held = [f for f in g.found_by if f in g.down_why]
    dead = [x for x in g.gone if x.partition(" (")[0] not in held]
    notes = []
    if dead:
        notes.append(f"its fleet ended without fleet_down (its coordinator killed or crashed), as the next fleet "
                     f"found: {', '.join(dead)}; steps it ran that never ended show as unfinished")
    for f in held:
        notes.append(f"fleet {f} was found gone by fleet {g.found_by[f]} and, going on, stopped, its fleet_down "
                     f"saying: \"{g.down_why[f]}\"; it ended once, when it was found gone, its nodes with it: its "
                     "steps there that had not ended by then show as unfinished, and the exits it wrote after that "
                     "end there")
    return notes
