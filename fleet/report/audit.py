"""`fleet audit RUN_DIR`: what the shared filesystem says about every step, whatever
fleets ran it — and whether anything is missing or ran successfully more than once.

Which steps: every step of every submission recorded in the run directory
(fleet.wire.manifest: the whole suite, all shards, so a shard that never started
shows its steps as missing; those no submission asked for, every one that named them
a `fleet run --only` that did not select them, are `not selected`), every step a
fleet declared in events.jsonl, every step a journal names (`fleet step --record`
writes nothing else), and those of `--suite`.

What the run directory says comes from per-step files (markers, claims, attempt and
final records) and from the fleets' journals (.fleet/journal/*.jsonl: a fleet holding
the run directory's lease records attempts there, and a success whose marker a killed
fleet never wrote; fleet.wire.records.read_journals). The newest of them says what the
step is: a start after an outcome runs (fresh while its fleet may be alive:
fleet.wire.livefleets; stale once it is gone; but waits, while its fleet may be alive,
if it was only handed to a node's window and events.jsonl says it has not started since:
the journal's start is written at the handing), an outcome after a start ended it. A step
no record says started is waiting in the fleet that declared it, if that fleet may be
alive, or was not run, the fleet having gone down first (or drained, or closed early, first: then its
`not_started` record's reason, e.g. that it needs a longer allocation; before 2026-12-06
that record gave none, and every such step "went down before it ran"); with no fleet's
declaration at all (a shard that never started), it is missing. With --suite, a step
whose newest record is a success of another definition than the suite's is `changed`.

A step that succeeded again is a rerun when that was asked for or its definition
changed: its attempt record says why it ran again (`rerun`), names a submission
recorded as forced, or carries another definition's hash than the success before it;
or the first attempt after that success, a failure, was such a rerun.
Two successes of one definition, neither forced nor a rerun for a changed input, are
a DUPLICATE: exactly-once was broken.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from fleet.core import states as S
from fleet.report import fleetends, unsure
from fleet.report.ingest import blocks
from fleet.report.model import NOT_RUN, UNFINISHED
from fleet.wire import livefleets, manifest, records
from fleet.wire.events import Drained, Exit, FleetDown, FleetGone, NotStarted, Queued, Start, StepDeclared, Unqueued

CHANGED = "changed"  # with --suite: the step succeeded, but under another definition than the suite's
# Never run, and no submission asked for it: each that named it was a `fleet run --only`
# that did not select it (before 2026-12-07 such a step was missing, and audit exited 1).
NOT_SELECTED = "not selected"


@dataclass(frozen=True)
class StepAudit:
    step: str
    # succeeded | failed | terminated | lost | stopped | blocked | unrunnable | cancelled | interrupted
    # | running | waiting | not run | unfinished | changed | not selected | missing
    status: str
    reason: str = ""
    holder: str = ""         # for running: the fleet holding the claim; waiting, not run: the one it was submitted to
    fresh: bool | None = None  # for running: refreshed within stale_after (a journal's: its fleet may be alive)
    successes: int = 0
    reruns: int = 0          # successes after the first that were asked for (forced, changed)
    duplicates: int = 0      # successes after the first that were not
    attempts: int = 0        # attempts recorded (an interrupted one is none), and those that may have run
    may_have_run: tuple = ()  # the attempts that may have run unheard (their node lost, or zygote dead, first)


@dataclass(frozen=True)
class Audit:
    steps: dict[str, StepAudit] = field(hash=False)

    @property
    def missing(self) -> list[str]:
        return [s for s, a in self.steps.items() if a.status == "missing"]

    @property
    def duplicates(self) -> list[str]:
        return [s for s, a in self.steps.items() if a.duplicates]

    @property
    def reruns(self) -> list[str]:
        return [s for s, a in self.steps.items() if a.reruns]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.duplicates

    @property
    def counts(self) -> dict[str, int]:
        """How many steps have each status."""
        counts: dict[str, int] = {}
        for a in self.steps.values():
            counts[a.status] = counts.get(a.status, 0) + 1
        return counts

    def to_json(self) -> dict:
        return {"ok": self.ok, "counts": self.counts, "missing": self.missing, "duplicates": self.duplicates,
                "reruns": self.reruns, "steps": {s: asdict(a) for s, a in self.steps.items()}}

    def text(self) -> str:
        """`fleet audit`'s lines: a step each, then the counts (one string: a million
        steps' lines echoed one at a time took a write and an ioctl each)."""
        lines = []
        for sid, s in self.steps.items():
            extra = f"  ({s.reason})" if s.reason else ""
            rerun = f"  rerun {s.reruns} time(s)" if s.reruns else ""
            dup = (f"  DUPLICATE: {s.successes} successful attempts, {s.duplicates} with nothing changed"
                   if s.duplicates else "")
            lines.append(f"{s.status:<11} {sid}{extra}{rerun}{dup}")
        lines.append((", ".join(f"{v} {k}" for k, v in sorted(self.counts.items())) or "no steps")
                     + (f"; {len(self.reruns)} rerun" if self.reruns else "")
                     + (f"; {len(self.duplicates)} DUPLICATE" if self.duplicates else ""))
        return "\n".join(lines)


@dataclass
class _Seen:
    """What the run directory's event stream and submission records say, read once."""

    ids: dict = field(default_factory=dict)         # step id -> StepSpec (from --suite) or None
    interrupted: dict = field(default_factory=dict)  # step id -> its last `exit` record, if an interruption
    forced: set = field(default_factory=set)        # (fleet, submission) of forced submissions
    declared_by: dict = field(default_factory=dict)  # step id -> the fleet that declared it to run it, if not started since
    not_started: dict = field(default_factory=dict)  # step id -> its own not_started reason, if not declared since
    drained: dict = field(default_factory=dict)  # fleet -> the reason its drain's not_started record gave the rest
    # step id -> [(attempt, node, why)] of its attempts that may have run unheard (fleet.report.unsure)
    unsure: dict = field(default_factory=dict)
    unselected: set = field(default_factory=set)  # steps only --only submissions named, none selecting them
    # step id -> (fleet, node) of a step handed to its node's window and not started since
    # (node None: taken back); its fleet's journal says it runs from the handing (_one).
    # Only the windows' steps, not every step.
    queued: dict = field(default_factory=dict)
    found_by: dict = field(default_factory=dict)  # fleet found gone -> the fleet that found it so (fleet_gone)
    down_why: dict = field(default_factory=dict)  # fleet -> its fleet_down's reason, if it gave one


def _seen(run_dir: Path, suite_steps) -> _Seen:
    seen = _Seen()
    manifests = manifest.read_all(run_dir)
    for sid in manifest.all_steps(manifests):
        seen.ids.setdefault(sid, None)
    seen.forced = {m.key for m in manifests if m.force}
    seen.unselected = manifest.unselected(manifests)
    if (run_dir / "events.jsonl").exists():
        ids, interrupted, by = seen.ids, seen.interrupted, seen.declared_by
        fleets: dict[str, str] = {}  # (one string per fleet, not one per step)
        queued = seen.queued
        for block in blocks(run_dir):  # (a MiB of lines at a time: a million steps' stream is a GB)
            for rec in block:
                kind = type(rec)
                if kind is StepDeclared and rec.step:
                    ids.setdefault(rec.step, None)
                    if not rec.foreign:  # (another shard's step: that shard runs it, or it is missing)
                        by[rec.step] = fleets.setdefault(rec.fleet, rec.fleet)
                    seen.not_started.pop(rec.step, None)  # (declared again: what that fleet does counts)
                elif kind is Start:  # it started since: whatever it is, it is not unstarted (nor queued)
                    if by:
                        by.pop(rec.step, None)
                    if queued:
                        queued.pop(rec.step, None)
                elif kind is Queued or kind is Unqueued:
                    _queued(seen, rec, queued)
                elif kind is NotStarted or kind is Drained:
                    _drain_said(seen, rec)
                elif kind is Exit and rec.step:  # only the last exit counts, and only an interruption
                    if rec.outcome == S.INTERRUPTED:
                        interrupted[rec.step] = rec
                    else:
                        interrupted.pop(rec.step, None)
                elif kind is FleetGone and rec.gone:  # (the first finder's)
                    seen.found_by.setdefault(rec.gone, rec.fleet)
                elif kind is FleetDown and rec.reason and rec.fleet:
                    seen.down_why[rec.fleet] = rec.reason
    for s in suite_steps:
        seen.ids[s.id] = s
    return seen


def _queued(seen: _Seen, rec, queued: dict) -> None:
    """A step queued on its node (`queued` keeps its fleet and node), or taken back (kept,
    its node None, until it starts): if it may have started there, an attempt that may
    have run (fleet.report.unsure; not said before 2026-12-07, and nothing is then)."""
    if type(rec) is Queued:
        queued[rec.step] = (rec.fleet, rec.node)
        return
    node = queued.get(rec.step, (None, None))[1]
    queued[rec.step] = (rec.fleet, None)
    if rec.may_have_started:
        seen.unsure.setdefault(rec.step, []).append((rec.attempt, node, unsure.why(rec.reason, rec.attempt)))


def _drain_said(seen: _Seen, rec) -> None:
    """A fleet drained (`Drained`), and its close said why its steps did not start
    (`NotStarted`, fleet.control.closing: its steps that need a longer allocation, by
    reason; without a drain, its reason is that of every step it left)."""
    if type(rec) is Drained:
        seen.drained.setdefault(rec.fleet, "")
        return
    if rec.reason and isinstance(rec.reason, str) and rec.fleet in seen.drained:
        seen.drained[rec.fleet] = rec.reason
    elif rec.reason and isinstance(rec.reason, str):
        # Closed early, not drained (nothing left could end before the drain point): the
        # steps it left are those it declared that have not started (a later submission's
        # are not: the fleet stays up). Before 2026-12-06 they "went down before" they ran.
        named = seen.not_started
        for sid, fleet in seen.declared_by.items():
            if fleet == rec.fleet:
                named.setdefault(sid, rec.reason)
    seen.not_started.update(rec.named())


def known_steps(run_dir: Path, suite_steps=()) -> dict[str, object]:
    """Step ids of every recorded submission, the event stream and a suite."""
    return _seen(Path(run_dir), suite_steps).ids


def count_successes(tries: list[dict], forced: set) -> tuple[int, int, int]:
    """(successes, reruns, duplicates) among a step's attempt records. A success after
    another is a rerun when its record says why (`rerun`), when it ran for a forced
    submission other than the one before, or when its definition's hash differs; or
    when the first attempt after that success, one that did not succeed (a forced rerun
    that failed, whose final record replaced the marker), was a rerun so: the success
    that follows it has no reason of its own, the step being undone by then."""
    ordered = sorted(tries, key=lambda t: (t.get("ended_at") or 0.0))
    wins = reruns = dups = 0
    prev = first_after = None  # the last success; the first attempt after it, if no success
    for cur in ordered:
        if cur.get("outcome") != S.SUCCEEDED:
            if prev is not None and first_after is None:
                first_after = cur
            continue
        wins += 1
        if prev is not None:
            if _asked_for(cur, prev, forced) or (first_after is not None and _asked_for(first_after, prev, forced)):
                reruns += 1
            else:
                dups += 1
        prev, first_after = cur, None
    return wins, reruns, dups


def _asked_for(cur: dict, prev: dict, forced: set) -> bool:
    """Whether attempt `cur`, after the success `prev`, ran again because it was asked
    to: its reason (`rerun`), a forced submission other than prev's, another definition."""
    key = (cur.get("fleet"), cur.get("submission"))
    return bool(cur.get("rerun")
                or (key in forced and key != (prev.get("fleet"), prev.get("submission")))
                or (cur.get("spec") and prev.get("spec") and cur.get("spec") != prev.get("spec")))


def audit(run_dir: Path, suite_steps=(), stale_after: float = 600.0) -> Audit:
    """Every known step of run_dir, by what its records on disk say."""
    run_dir = Path(run_dir)
    seen = _seen(run_dir, suite_steps)
    js = records.read_journals(run_dir, lean=True)  # once: a lease holder's attempts and outcomes
    live = livefleets.alive(run_dir, stale_after)
    running = _journal_running(js, live, stale_after)
    # A step only a journal names: `fleet step --record` writes no submission and no
    # event stream, only its outcome in a sealed journal of its own (and its files).
    for sid in (*js.outcome, *js.attempts, *running):
        seen.ids.setdefault(sid, None)
    out: dict[str, StepAudit] = {}
    for sid, spec in seen.ids.items():
        names = _listing(records.fleet_dir(run_dir, sid))
        tries = records.attempts(run_dir, sid, js, names)
        if seen.found_by and tries:
            tries = [_found_gone(t, seen) for t in tries]
        wins, reruns, dups = count_successes(tries, seen.forced)
        base = dict(step=sid, successes=wins, reruns=reruns, duplicates=dups, attempts=len(tries))
        a = _one(run_dir, sid, spec, names, seen.interrupted.get(sid), stale_after, base, js, running, tries, live,
                 seen.queued.get(sid))
        out[sid] = a if a is not None else _unstarted(sid, seen.declared_by.get(sid), live, base, seen)
        if sid in seen.unsure:
            out[sid] = _may_have_run(out[sid], seen.unsure[sid])
        if len(tries) > 1:
            out[sid] = _lost_before(out[sid], tries)
    return Audit(out)


def _found_gone(t: dict, seen: _Seen) -> dict:
    """A lost attempt's record, its reason saying that its fleet was found gone, and by
    whom, where events.jsonl says so (fleet.report.fleetends.lost_words); others as they are."""
    by = seen.found_by.get(t.get("fleet")) if t.get("outcome") == S.LOST else None
    return t if by is None else {**t, "reason": fleetends.lost_words(t, by, seen.down_why.get(t.get("fleet")))}


def _lost_before(a: StepAudit, tries: list[dict]) -> StepAudit:
    """The step's audit with its attempts recorded `lost` before a later one (its fleet or
    node went while it ran: nothing heard its end, and it may have run to it, so its side
    effects may be there twice), said after its reason and listed in may_have_run (before
    2026-12-07 only `--json`'s count of attempts showed them). Attempts are numbered per
    fleet: ordered by when they began."""
    def began(t: dict) -> float:
        return float(t.get("started_at") or t.get("ended_at") or 0.0)

    ordered = sorted(tries, key=began)
    lost = [t for t in ordered[:-1] if t.get("outcome") == "lost"]
    if not lost:
        return a
    words = "; ".join(f"attempt {t.get('attempt')} in fleet {t.get('fleet')} was lost and may have run to its end"
                      + (f": {t['reason']}" if t.get("reason") else "") for t in lost)
    return replace(a, may_have_run=(*a.may_have_run, *(int(t.get("attempt") or 0) for t in lost)),
                   reason=f"{a.reason}; {words}" if a.reason else words)


def _may_have_run(a: StepAudit, said: list) -> StepAudit:
    """The step's audit with its attempts that may have run: counted among its attempts,
    and said after its reason (before 2026-12-07 nothing outside events.jsonl said them)."""
    words = "; ".join(unsure.words(n, node, why) for n, node, why in said)
    return replace(a, attempts=a.attempts + len(said), may_have_run=tuple(n for n, _, _ in said),
                   reason=f"{a.reason}; {words}" if a.reason else words)


def _listing(d: Path) -> frozenset[str]:
    """The names in a step's .fleet directory, read once: which of its files there are
    to open. A step costs one directory read, not a look for each file it might have
    (on a parallel filesystem each look is a metadata operation of milliseconds)."""
    try:
        with os.scandir(d) as it:
            return frozenset(e.name for e in it)
    except OSError:  # no directory: nothing of it on disk
        return frozenset()


def _journal_running(js: records.Journals, live: dict, stale_after: float) -> dict:
    """step -> (fleet, host, fresh, t) for steps an unsealed journal says run (a lease
    holder claims no step: its journal says what runs): fresh while its fleet may be
    alive (livefleets; or its journal was written within stale_after, and its process is
    not dead: a fleet refreshes its lease by its own --stale-after, maybe longer than
    ours), stale once it is gone (killed: nothing recorded their end; the next fleet on
    the run directory replays its journal and counts them lost). A sealed journal says
    nothing runs: its fleet ended, or the fleet that replayed it recorded what it left
    running (a `lost` attempt, in attempts)."""
    out = {}
    for j in js.each:
        if j.sealed or not j.running:
            continue
        fleet = str(j.fleet.get("fleet"))
        fresh = fleet in live or (not records.holder_dead(j.fleet) and not records.zombie(j.fleet)
                                  and _age(j.path) < stale_after)
        for step, line in j.running.items():
            t = float(line.get("t") or 0.0)
            if step not in out or out[step][3] <= t:
                out[step] = (fleet, str(j.fleet.get("host")), fresh, t)
    return out


def _age(path: Path) -> float:
    """Seconds since the file was written (infinite: it is gone)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")


def _says_success(rec: dict | None) -> bool:
    return rec is not None and rec.get("outcome") == "succeeded"


def _newest_end(final: dict | None, last_exit, tries: list[dict]) -> tuple[float, str, dict | None]:
    """(when, which, record) of the step's newest recorded end that is no success:
    its final outcome, its last exit if that was an interruption, or its newest attempt
    ((0, "", None): none). A later one wins; a final recorded with its attempt wins the tie."""
    best: tuple[float, str, dict | None] = (0.0, "", None)
    for t in tries:
        at = float(t.get("ended_at") or 0.0)
        if t.get("outcome") != S.SUCCEEDED and (best[2] is None or at > best[0]):
            best = (at, "attempt", t)
    if last_exit is not None and last_exit.outcome == S.INTERRUPTED and (best[2] is None or last_exit.t > best[0]):
        best = (float(last_exit.t), S.INTERRUPTED, None)
    if final is not None and (not best[1] or float(final.get("at") or 0.0) >= best[0]):
        best = (float(final.get("at") or 0.0), "final", final)
    return best


def _one(run_dir: Path, sid: str, spec, names: frozenset[str], last_exit, stale_after: float, base: dict,
         js: records.Journals, running: dict, tries: list[dict], live: dict, queued: tuple | None) -> StepAudit | None:
    """The step's status from its files (`names`: those in its .fleet directory), its
    journaled records, its attempts (`tries`), its last exit if that was an interruption
    (`last_exit`) and, if it was handed to a node's window and has not started since,
    its fleet and node there (`queued`, _Seen.queued); None when nothing says it ever
    started (_unstarted)."""
    jdone = js.done(sid)  # a success journaled, its marker not written (yet, or ever: a kill -9)
    # Without the suite, a marker is taken as it is when the journals say the step succeeded
    # (no file opened: a million done steps on a parallel file system); else it is read, and
    # a damaged one is no success, as a run does not take it for one.
    done = records.DONE in names and (records.is_done(run_dir, spec) if spec is not None else
                                      jdone is not None or _says_success(records.read_done(run_dir, sid)))
    final = records.read_final(run_dir, sid, js, on_disk=records.FINAL in names)
    if not done and jdone is not None and (spec is None or records.succeeded_as(jdone, spec)) \
            and (final is None or float(final.get("at") or 0.0) <= js.outcome[sid][1]):
        done = True
    if done:
        return StepAudit(status=S.SUCCEEDED, **base)
    # What ended last, unless a start since says it runs again (a later outcome wins).
    at, which, rec = _newest_end(final, last_exit, tries)
    other = _other_success(run_dir, sid, spec, names, jdone) if spec is not None else None
    if other is not None and float(other.get("ended_at") or 0.0) >= at:
        at, which, rec = float(other.get("ended_at") or 0.0), CHANGED, other
    if sid in running and running[sid][3] >= at:
        holder, host, fresh, _ = running[sid]
        if fresh and queued is not None and queued[0] == holder:
            return _handed(holder, queued[1], base)
        return StepAudit(status="running", holder=holder, fresh=fresh, **base,
                         reason=f"running in {holder} on {host} (its journal)"
                                + ("" if fresh else "; its fleet is gone (stale): the next run runs it again"))
    claim = records.read_claim(run_dir, sid) if records.CLAIM in names else None
    if claim is not None:
        rec, age = claim.rec, claim.age
        # (one look, no watch: by its mtime, as the report says; it takes nothing over)
        fresh = age < stale_after and not records.holder_dead(rec)
        return StepAudit(status="running", holder=str(rec.get("fleet")), fresh=fresh,
                         reason=f"claimed {age:.0f} s ago by {rec.get('fleet')} on {rec.get('host')}"
                                + ("" if fresh else " (stale)"), **base)
    # The fleet stopping left no final outcome (the next run runs the step); the event
    # stream says it was interrupted, unless an outcome recorded since says otherwise.
    if which == S.INTERRUPTED:
        return StepAudit(status=S.INTERRUPTED, reason=last_exit.reason or "", **base)
    if which == "final":
        return StepAudit(status=str(rec.get("outcome")), reason=str(rec.get("reason", "")), **base)
    if which == CHANGED:
        return StepAudit(status=CHANGED, **base, reason="succeeded under another definition than --suite's: "
                                                        "a run of that suite runs it again")
    if which == "attempt":
        return _last_attempt(rec, live, base)
    return None


def _handed(holder: str, node: str | None, base: dict) -> StepAudit:
    """A step its live fleet handed to a node's window, which has not started it (or
    took it back): its journal says it runs from the handing, its events.jsonl that it
    waits (before 2026-12-07 `running`, while `fleet report` said waiting)."""
    where = f"queued on {node} in {holder}" if node else f"taken back from its node in {holder}"
    return StepAudit(status=S.WAITING, holder=holder, reason=f"{where}, not started yet", **base)


def _other_success(run_dir: Path, sid: str, spec, names: frozenset[str], jdone: dict | None) -> dict | None:
    """The step's success of another definition than `spec` (--suite's), the newer of
    its marker and a journal's, if either is one; None when neither says it succeeded."""
    found = [rec for rec in (records.read_done(run_dir, sid) if records.DONE in names else None, jdone)
             if _says_success(rec) and not records.succeeded_as(rec, spec)]
    return max(found, key=lambda r: float(r.get("ended_at") or 0.0), default=None)


def _last_attempt(rec: dict, live: dict, base: dict) -> StepAudit:
    """A step whose newest record is an attempt with no final outcome after it: one that
    goes on (a next stage, a restart, a wait for its children: fleet.core.phases) runs
    while its fleet may be alive; else, as it ended (its fleet died, or was to retry it)."""
    outcome, fleet = str(rec.get("outcome")), str(rec.get("fleet"))
    if outcome in (S.WAIT, S.NEXT, S.RESTART):
        if fleet in live:
            return StepAudit(status="running", holder=fleet, fresh=True, **base,
                             reason=f"going on in {fleet} (its attempt ended: {outcome})")
        return StepAudit(status=UNFINISHED, holder=fleet, **base,
                         reason=f"the fleet went down before it went on ({rec.get('reason') or outcome})")
    return StepAudit(status=outcome, **base,
                     reason=str(rec.get("reason") or "") + " (its last attempt; no final outcome recorded)")


def _unstarted(sid: str, fleet: str | None, live: dict, base: dict, seen: _Seen) -> StepAudit:
    """A step with no record of running or ending: waiting in the fleet that declared it,
    if it may be alive and has not closed it; not run, if that fleet went down first
    (drained or closed it first, even if still up: why, as its not_started record says;
    before 2026-12-06 such a step of a fleet still up was waiting); missing if no fleet
    declared it to run it (only a submission's record names it: a shard that never
    started); not selected if no submission asked for it (only --only ones named it)."""
    if fleet is None and sid in seen.unselected:
        return StepAudit(status=NOT_SELECTED, reason="no submission selected it (fleet run --only)", **base)
    if fleet is None:
        return StepAudit(status="missing", reason="no outcome and no claim", **base)
    closed = seen.not_started.get(sid) or seen.drained.get(fleet)  # (None: not closed; "": an old drain's)
    if fleet in live and closed is None:  # (a fleet that drained or closed early stays up: its steps left wait not)
        return StepAudit(status=S.WAITING, holder=fleet, reason=f"submitted to {fleet}, not started yet", **base)
    why = closed or "the fleet went down before it ran"
    return StepAudit(status=NOT_RUN, holder=fleet, reason=why, **base)
