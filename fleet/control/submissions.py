"""Submissions: suites clients sent, checked and split for a shard, and how far each got.

A step may belong to several submissions (suites sharing steps); it is defined
once per fleet and counted in each. Progress answers are bounded, and cost no walk of
the submission's steps: each submission's counts by state are kept up to date as the
scheduler changes a step's state (it tells Submissions.moved of each change), so an
answer costs O(states), not O(steps), at a million steps as at ten.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from fleet.control import declaring, fitscope, journalmarks, legacymarks, leftovers, selection, shard, store, tally
from fleet.control.markerscan import read_markers
from fleet.control.producers import Producers
from fleet.control.checks import checked_suite, fit_problems, inside_run_dir
from fleet.control.submission import Submission, to_release
from fleet.core import states as S
from fleet.core.durations import recorded
from fleet.core.graph import dependency_on, topological_order
from fleet.core.problems import SuiteError
from fleet.core.scheduler import Scheduler, Submitted
from fleet.wire import events, manifest, messages as P, records
from fleet.wire.events import EventLog

PROGRESS_ROWS = 5000  # finished steps in one progress answer
FAILURES_KEPT = 50  # recent failures kept for status answers


@dataclass(frozen=True)
class Checked:
    """A suite read and checked off the coordinator's loop (fleet.control.worker), with
    its done markers read: all the loop needs to register it. Built by check()."""

    name: str
    suite_ids: list       # every step of the suite, in setup order (the manifest)
    steps: list           # StepSpec, this shard's and the foreign ones it waits for
    deps: dict
    order: tuple          # the steps' ids, deps first
    done: frozenset       # ids already done on disk
    foreign: frozenset    # ids another shard runs
    markers: dict         # step id -> its done marker as read (None: none)
    again: dict           # step id -> why a step with a success on record runs again
    cleared: frozenset    # steps that run with no success on record (no reason to keep)
    ids: list             # the ids of `steps`
    preload: tuple = ()
    leftovers: dict = field(default_factory=dict)  # step id -> older fleets' files (fleet.control.leftovers)
    notes: tuple = ()     # warnings for its submitter (fleet.control.intake.checked)
    ended: dict = field(default_factory=dict)  # foreign step -> why it ended there unsuccessfully (shard.ended_before)
    legacy: dict = field(default_factory=dict)  # done step -> its StepSpec, its marker of the old hash (legacymarks)


@dataclass(frozen=True)
class Accepted:
    """A submission checked and registered, not yet handed to the scheduler."""

    sub: Submission
    name: str
    steps: list           # StepSpec, this shard's and the foreign ones it waits for
    deps: dict
    done: set             # ids already done on disk
    foreign: set          # ids another shard runs
    preload: tuple = ()   # the suite's [suite] preload (fleet.control.preloads holds it for them)
    order: tuple = ()     # the steps' ids, deps first
    markers: dict = field(default_factory=dict, hash=False)  # step id -> done marker read (store.submitted)
    leftovers: dict | None = field(default=None, hash=False)  # fleet.control.leftovers (None: not looked)
    force: bool = False   # --force: every step of it that runs here was asked for again
    notes: tuple = ()     # warnings for its submitter, found as it was checked (Checked.notes)
    ended: dict = field(default_factory=dict, hash=False)  # Checked.ended
    forced: frozenset = frozenset()  # children asked for again: their parent runs for a --force (children)
    legacy: dict = field(default_factory=dict, hash=False)  # Checked.legacy
    waits: dict | None = field(default=None, hash=False)  # deps and more, declared (children: fleet.control.children)
    parent: str | None = None  # children: the step that submitted them (their `step` records say so)


class Problems(ValueError):
    """Several problems, each already naming its file, step and field; `fault`: not the
    suite's but the fleet's own (its suite file unread: checks.SuiteUnread), if so."""

    def __init__(self, problems: list, fault: str = ""):
        super().__init__(problems)
        self.fault = fault


class Submissions:
    """Every submission to this fleet, the step definitions they brought, and recent failures."""

    def __init__(self, run_dir: Path, sched: Scheduler, specs: dict, log_: EventLog):
        self.run_dir = run_dir
        self.sched = sched
        self.specs = specs  # step id -> StepSpec, shared with the coordinator
        self.producers = Producers(specs)  # path -> the step producing it (children's files: fleet.control.children)
        self.events = log_
        self.subs: dict[int, Submission] = {}
        self.step_subs: dict[str, list[int]] = {}  # step id -> its submissions (lists shared: see _only)
        self._lists: dict[int, list[int]] = {}
        self.failures: list[dict] = []
        self.awaited: set[str] = set()  # steps some declared step depends on (see hold)
        self.node_hold = 0.0  # seconds a node may hold a step's reports (the coordinator's, with chains)
        # Why a step that succeeded before runs again ("forced", "changed", "dependency
        # changed"): its attempt records say so, and `fleet audit` counts it as a rerun.
        self.rerun: dict[str, str] = {}
        # Runs file writes nothing waits for (a submission's manifest, and its removal),
        # in order: the coordinator's worker thread (fleet.control.intake), else at once.
        self.offload = lambda fn, *args: fn(*args)
        # Makes every outcome recorded so far durable (fleet.control.recording): asked
        # before a client hears that its submission finished (True: its files are written).
        self.durable = lambda sub: True
        # Says the steps the user asked for again (fleet.control.recording: a journal line each).
        self.reset = lambda steps: None
        self.full = lambda: ""  # the drain's reason, if the run directory cannot be written (control.drain)
        self.early = lambda sid: ""  # why submission sid was closed early, not drained, if it was (control.closing)
        self.closing: dict[int, set[str]] = {}  # submissions a drain's close walks: their steps counted so far
        sched.moved = self.moved  # each change of a step's state, for the counts by state
        self._open: dict[int, float] = {}  # submission -> when it began, until it is found finished
        # Submissions that keep their steps and rows (fleet.control.submission.to_release), in the order made.
        self._kept: dict[int, Submission] = {}

    def busy_since(self) -> float | None:
        """When the earliest unfinished submission began (None: none): fleet.control.claims."""
        subs, open_ = self.subs, self._open
        for sid in [i for i in open_ if i not in subs or subs[i].remaining <= 0]:  # O(unfinished ones)
            del open_[sid]  # (a finished submission is not counted in again: its steps all ended)
        return min(open_.values(), default=None)

    def hold(self, step: str) -> float:
        """How long the step's node may hold its reports while it has steps queued, to
        send several together (fleet.node.outbox): with chains in the window
        (fleet.core.windowchain), a step no declared step depends on; else none. (A
        step that waits for its children is not held back by it: their ends reach it
        up to the hold later.)"""
        return self.node_hold if self.node_hold and step not in self.awaited else 0.0

    # -- submitting -----------------------------------------------------------------------------
    def accept(self, msg: P.Submit) -> Accepted | P.SubmitReply:
        """check() and register() in one go, on the caller's thread."""
        checked = check(msg, self.sched.pool.nodes(), self.run_dir)
        return checked if isinstance(checked, P.SubmitReply) else self.register(checked, msg)

    def register(self, c: Checked, msg: P.Submit) -> Accepted:
        """Register a checked submission (its steps are counted in it as they are
        declared: see declare). Finished ones no longer among those kept let their steps
        and rows go first (fleet.control.submission.to_release: a long-lived fleet sent
        the same suite again and again kept every one's for good before 2026-12-07)."""
        now = time.time()
        for old in to_release(self._kept.values(), now) if not self.closing else ():  # (a close walks them)
            self._kept.pop(old).release()
            self._lists.pop(old, None)
        sid = next(reversed(self.subs), 0) + 1  # (ids in the order made)
        self.subs[sid] = self._kept[sid] = Submission(sid, str(msg.suite), c.ids, len(c.ids), serial=msg.serial,
                                                      force=msg.force, t=now)
        self._open[sid] = now
        for step in [k for k in self.rerun if k in c.cleared]:  # not a walk of every step cleared
            del self.rerun[step]
        self.rerun.update(c.again)
        self.offload(manifest.write, self.run_dir, self.events.fleet, sid, msg.suite, c.name, msg.shard, msg.force,
                     c.suite_ids, c.ids if msg.only else None)  # (what --only selected: not missing, the rest)
        return Accepted(self.subs[sid], c.name, c.steps, c.deps, set(c.done), set(c.foreign), c.preload, c.order,
                        c.markers, c.leftovers, msg.force, c.notes, c.ended, legacy=c.legacy)

    def withdraw(self, acc: Accepted) -> None:
        """Undo accepting a submission that is refused after all (its preload failed): it
        was never handed to the scheduler, so no step of it, nor the submission or its
        record on disk, may stay. Only the held one is withdrawn, and it is the last
        accepted: later ones wait behind it."""
        sid = acc.sub.id
        self.subs.pop(sid, None)
        self._kept.pop(sid, None)
        for s in acc.steps:
            ids = [i for i in self.step_subs.get(s.id, ()) if i != sid]  # never changed in place: shared
            if ids:
                self.step_subs[s.id] = ids
            else:
                self.step_subs.pop(s.id, None)
                if self.specs.get(s.id) is s:  # defined by this submission alone
                    del self.specs[s.id]
        self.offload(manifest.path(self.run_dir, self.events.fleet, sid).unlink, True)  # after its write

    def _take(self, spec, sid: int, takes=()) -> None:
        """Count a step in submission sid, under the definition it brings. One that ended
        before is counted by this submission alone (the earlier ones counted its end); one
        still to run counts in each that waits for it. The newest definition is the one
        to launch (a running older one's marker still names what ran: fleet.control.store),
        except for a step another fleet runs, which is waited for as it is (but one this
        submission takes from another shard of this fleet: `takes`, Submitted.takes).
        A step still to run that this submission holds already (a child its retried parent
        submitted again, changed, while it waited or ran: Submission.add) stays listed once:
        before 2026-12-07 it was listed twice, its end counted twice, and the submission,
        one end short of none left, never finished (`fleet run` did not return)."""
        state = self.sched.state_of(spec.id)
        ids = self.step_subs.get(spec.id)
        if state is not None:  # counted waiting so far, as the scheduler has it now
            self.moved(spec.id, S.WAITING, state, (sid,))
        if state in S.FINAL or not ids:
            self.step_subs[spec.id] = self._only(sid)
        elif sid not in ids:  # (a child its retried parent submitted again while it ran: counted in it once)
            self.step_subs[spec.id] = [*ids, sid]
        if state != S.ELSEWHERE or spec.id in takes:
            self.specs[spec.id] = spec

    def _only(self, sid: int) -> list[int]:
        """[sid], one list for every step of submission sid alone (a million steps need
        not carry a list each): step_subs' lists are replaced, never changed in place."""
        only = self._lists.get(sid)
        if only is None:
            only = self._lists[sid] = [sid]
        return only

    def enter(self, acc: Accepted, msg: P.Submit, now: float, chunk: int = 0) -> Submitted:
        """Record an accepted submission and declare all its steps; the event that hands
        it to the scheduler (entered in parts of `chunk` steps; 0: at once)."""
        self.announce(acc, msg, now)
        self.declare(acc, acc.steps, now)
        return self.submitted(acc, msg, chunk)

    def announce(self, acc: Accepted, msg: P.Submit, now: float) -> None:
        """The submission's record (its steps' follow: declare)."""
        self.events.write(events.Submitted(t=now, submission=acc.sub.id, suite=str(msg.suite), name=acc.name,
                                           steps=len(acc.sub.steps), skipped=len(acc.done), serial=msg.serial,
                                           force=msg.force, shard=msg.shard, foreign=len(acc.foreign)))

    def declare(self, acc: Accepted, steps, now: float, takes=()) -> None:
        """Some of an accepted submission's steps: counted in it, recorded, and their
        markers as read noted for claims (a big submission is declared over several turns)."""
        sid = acc.sub.id
        store.declared(self.run_dir, steps, acc.deps, acc.markers, acc.leftovers)
        if tally.anything():
            self._resets(acc, steps, now)
        awaited, deps = self.awaited, acc.deps if acc.waits is None else acc.waits
        for s in steps:
            self._take(s, sid, takes)
            d = deps.get(s.id)
            if d:
                awaited.update(d)
        self.producers.declared(steps)
        self.events.write_encoded(declaring.lines(self.events.fleet, now, sid, steps, deps, acc.foreign, acc.parent))

    def _resets(self, acc: Accepted, steps, now: float) -> None:
        """Steps the user asked for again, forced or with their directory removed (none
        of their records on disk: `rm -rf steps/<id>`): --max-attempts counts their
        attempts from now on (fleet.core.attempts), here and in later fleets. Only a
        step with something counted has anything to reset."""
        out = []
        for s in steps:
            if s.id in acc.foreign or (s.id in acc.markers and not acc.force and s.id not in acc.forced):
                continue
            d = store.key(self.run_dir, s.id)
            if tally.counted(d):
                tally.reset(d, now)
                out.append(s.id)
        if out:
            self.reset(out)

    @staticmethod
    def submitted(acc: Accepted, msg: P.Submit, chunk: int = 0, takes: frozenset = frozenset()) -> Submitted:
        """The scheduler event of a declared submission."""
        return Submitted(tuple(acc.steps), acc.deps, frozenset(acc.done), serial=msg.serial, takes=takes,
                         foreign=frozenset(acc.foreign - acc.done), chunk=chunk, order=acc.order,
                         durations=recorded(acc.markers, acc.done))  # expected durations (drain)

    # -- progress -------------------------------------------------------------------------------
    def progress(self, msg: P.Progress):
        """A client's progress answer: counts by state and finished steps after `since`;
        an error for a submission unknown here, or one that let its rows go (register)."""
        sub = self.subs.get(msg.submission)
        if sub is None:
            return P.Error(f"no submission {msg.submission}")
        if sub.released:  # (fleet.control.submission: the latest finished ones keep them)
            return P.Error(f"submission {sub.id} ended and is no longer kept: its outcomes are in "
                           f"{self.run_dir / 'events.jsonl'} (fleet report {self.run_dir})")
        since, done = max(0, msg.since), sub.remaining == 0 and self.durable(sub)
        end = min(len(sub.finished), since + PROGRESS_ROWS)
        # Told once a client asks past its last rows (done, none left: what ends Fleet.wait), not when
        # they are sent: a release in between failed the client's last ask ("no longer kept").
        sub.told = sub.told or (done and since >= len(sub.finished))
        return P.ProgressReply(sub.id, done, sub.counts_now(), sub.finished[since:end], end, full=self.full(),
                               early=self.early(sub.id))

    def kept(self) -> dict:
        """What they keep of their steps (`fleet status --json`'s `submissions_kept`): the
        submissions that keep their steps and rows, those steps and those rows. O(those)."""
        kept = self._kept.values()
        return {"submissions": len(kept), "steps": sum(len(s.steps) for s in kept),
                "rows": sum(len(s.finished) for s in kept)}

    def moved(self, step: str, old: str, new: str, sids=None) -> None:
        """A step went from state `old` to `new` (the scheduler's observer): counted so in
        each submission that follows it (sids; default: step_subs'). A submission in which
        the step had ended before a later one took it keeps the step's end: step_subs
        lists it no more (see _take). O(the step's submissions), never O(steps)."""
        for sid in self.step_subs.get(step, ()) if sids is None else sids:
            counts = self.subs[sid].counts
            counts[old] -= 1
            counts[new] += 1

    def ended(self, step: str, outcome: str, attempt: int, reason: str, final: bool) -> None:
        """An attempt of step ended (final: the step will not run again): count it in
        each submission it belongs to, and keep it among recent failures if it failed.
        An attempt that will be retried is listed by its retry (see retrying), so that a
        client counts each step once, when it is final."""
        if outcome in S.FAILURES:  # (timed out, broken and stopped too: before 2026-12-06 they were left out)
            self.failures.append({"step": step, "outcome": outcome, "reason": reason, "t": time.time(),
                                  "attempt": attempt, "retried": not final})  # (fleet status says both)
            del self.failures[:-FAILURES_KEPT]
        if not final:
            return
        for sid in self.step_subs.get(step, ()):
            if self.closing and sid in self.closing:  # a drain's close is walking it
                if step in self.closing[sid]:
                    continue  # counted by the close already
                self.closing[sid].add(step)
            sub = self.subs[sid]
            sub.remaining -= 1
            if sub.again and step in sub.again:  # its second end in it: the row says why (fleet run's line)
                sub.again.discard(step)
                by = sub.again_by.pop(step, "")
                sub.finished.append([step, outcome, attempt, reason, by] if by else [step, outcome, attempt, reason])
                continue
            sub.finished.append([step, outcome, attempt, reason])

    def retrying(self, step: str, attempt: int, limit: int, reason: str) -> None:
        """The step runs again as `attempt` of `limit` because of `reason` (how the attempt
        before ended): listed as [step, "retry", attempt, reason, limit]."""
        for sid in self.step_subs.get(step, ()):
            self.subs[sid].finished.append([step, "retry", attempt, reason, limit])


# -- off the loop (fleet.control.worker): reading and checking a suite -----------------------------
def check(msg: P.Submit, nodes: list, run_dir: Path, notes: dict | None = None,
          blocks: bool = False) -> Checked | P.SubmitReply:
    """Read and check a submitted suite against these nodes, split it for its shard and
    read its steps' done markers; the refusal to send back otherwise. Reads files only
    (and records the shard count of one it accepts, as a submission always did): nothing of the
    coordinator's, so that it runs on the worker thread."""
    try:
        suite, graph, steps, deps, foreign = chosen(msg, nodes, run_dir, notes=notes, blocks=blocks)
    except Problems as e:  # (the fleet's own error: no problem of the suite's, a fault)
        return P.SubmitReply(False, fault=e.fault) if e.fault else P.SubmitReply(False, problems=e.args[0])
    by_id = {s.id: s for s in steps}
    order = tuple(sid for sid in topological_order(graph) if sid in by_id)
    markers = read_markers(run_dir, order)
    done, again = _done(by_id, order, deps, foreign, markers, msg.force)
    _removed(run_dir, markers, again)
    left = leftovers.scan(run_dir, leftovers.to_scan(markers, done, foreign))  # one listing per step to rerun
    ended = shard.ended_before(run_dir, foreign - done, markers) if foreign else {}
    for s in steps:  # each definition's hash (its markers name it) taken here, not per step on the loop
        records.spec_hash(s)
    return Checked(suite.name, [s.id for s in suite.steps], steps, deps, order, frozenset(done),
                   frozenset(foreign), markers, {k: v for k, v in again.items() if v is not None},
                   frozenset(k for k, v in again.items() if v is None), [s.id for s in steps], suite.preload, left,
                   ended=ended, legacy=legacymarks.legacy(done, foreign, by_id, markers) if done else {})


def chosen(msg: P.Submit, nodes: list | None, run_dir: Path, record: bool = True, notes: dict | None = None,
           blocks: bool = False) -> tuple:
    """The submitted suite checked whole, the inputs of the steps it would start looked
    for in run_dir, those steps checked against these nodes (None: no fit check; fleet.control.fitscope;
    `notes`: what to add to their problems, `blocks`: MPI ranks in blocks, as PALS places them,
    fleet.control.checks.fit_problems), and what of it runs: its shard's steps and the
    --only selection. (suite, graph, steps, deps, foreign); Problems with every problem
    otherwise (each a line naming file, step and field). Reads files only; with
    `record`, the shard count is recorded once nothing refused the submission; without,
    it is only compared with the recorded one (fleet run's check before it starts an
    embedded fleet, which then checks again: fleet.cli_run)."""
    fit = None if nodes is None else (lambda s, g: fit_problems(s, nodes, notes=notes or {}, blocks=blocks))
    try:
        suite, graph = checked_suite(msg.suite, run_dir=run_dir, more=fit,
                                     scope=lambda s, g, found: fitscope.narrowed(s, g, msg, run_dir, found))
    except SuiteError as e:
        raise Problems([str(p) for p in e.problems], getattr(e, "fault", "")) from None
    steps, deps, foreign = suite.steps, graph.deps, set()
    if msg.shard:
        try:
            steps, deps, foreign = _shard(suite, graph, msg, run_dir)
        except Problems:
            raise
        except (shard.ShardError, ValueError) as e:
            raise Problems([str(e)]) from None
    if msg.only:  # --only [--with-deps]: fleet.control.selection
        try:
            steps, deps, foreign = selection.select(run_dir, suite, steps, deps, foreign, msg.only, msg.with_deps,
                                                    msg.shard)
        except selection.Unselectable as e:
            raise Problems(e.args[0]) from None
    if msg.shard and record:  # (after every refusal: a refused submission leaves the count as it was)
        try:
            shard.record(run_dir, shard.parse(msg.shard)[1], msg.new_generation)
        except (shard.ShardError, ValueError) as e:  # (another count recorded since the check)
            raise Problems([str(e)]) from None
    return suite, graph, steps, deps, foreign


def _done(by_id: dict, order, deps: dict, foreign: set, markers: dict, force: bool) -> tuple[set, dict]:
    """Steps this submission counts done, deps first: a step whose marker says this same
    definition succeeded against the markers its deps have now, and whose deps are all
    done (one that runs makes its dependents run). With force none is (but another
    shard's steps), and nothing is deleted: a marker stays until a new outcome replaces
    it. Also why each other step with a success on record runs again (None: it has none)."""
    if not any(markers.values()):  # no marker at all (a first run): nothing is done, none runs again
        return set(), dict.fromkeys(order)
    done: set = set()
    again: dict = {}
    ids = {sid: records.marker_id(rec) if rec is not None else None for sid, rec in markers.items()}
    for sid in order:
        s, rec = by_id[sid], markers.get(sid)
        if sid in foreign:  # another shard's: its own marker settles it
            if records.succeeded_as(rec, s):
                done.add(sid)
        elif not force and all(d in done for d in deps[sid]) \
                and records.done_against(rec, s, {d: ids.get(d) for d in deps[sid]}):
            done.add(sid)
        else:
            again[sid] = why_again(s, rec, force)
    return done, again


def _removed(run_dir: Path, markers: dict, again: dict) -> None:
    """Steps whose directory is gone (`rm -rf steps/<id>`: asked for again, the user
    guide's way) that succeeded before as this fleet's journals know: they run again
    "removed", so that `fleet audit` counts the next success as a rerun, not a
    duplicate. Only a fleet alone in its run directory knows (fleet.control.journalmarks);
    a first run (nothing known) costs nothing here."""
    known = journalmarks.of(run_dir)
    if not known:
        return
    for sid, why in again.items():
        if why is None and sid not in markers and known.get(sid) is not None:
            again[sid] = "removed"


def why_again(spec, rec: dict | None, force: bool) -> str | None:
    """Why a step that has a success on record runs again; None if it has none."""
    if rec is None or rec.get("outcome") != "succeeded":
        return None
    if force:
        return "forced"
    return "changed" if not records.succeeded_as(rec, spec) else "dependency changed"


def _shard(suite, graph, msg: P.Submit, run_dir: Path):
    """This shard's steps, plus the other shards' steps they depend on (foreign:
    waited for through their markers, never run here). The shard count is compared
    with the recorded one (chosen records it, once nothing refused the submission)."""
    i, n = shard.parse(msg.shard)
    owned = {s.id for s in suite.steps if shard.owner(s.task, n) == i}
    foreign = {d for s in suite.steps if s.id in owned for d in graph.deps[s.id] if d not in owned}
    if foreign and not msg.wait_foreign:
        by_id = {s.id: s for s in suite.steps}
        raise Problems([f"{s.source}: step '{s.id}': field '{where}': {why}, which shard "
                        f"{shard.owner(by_id[d].task, n)}/{n} runs (--no-wait-foreign)"
                        for s in suite.steps if s.id in owned for d in graph.deps[s.id] if d in foreign
                        for where, why in [dependency_on(s, by_id[d], inside_run_dir(run_dir))]])
    shard.check(run_dir, n, msg.new_generation)
    steps = [s for s in suite.steps if s.id in owned or s.id in foreign]
    deps = {s.id: (() if s.id in foreign else graph.deps[s.id]) for s in steps}
    return steps, deps, foreign
