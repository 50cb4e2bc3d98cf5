"""Collecting the steps a running step submitted (its children), on the coordinator.

A step writes its children into its submit directory (steps/<id>/.fleet/submit: JSON
files from ``ctx.submit``, TOML files of [[steps]] tables from a command's
$FLEET_SUBMIT_DIR; names starting with "." or "ht.tmp" are never read, so a file
written aside and renamed is read whole or not at all). No socket from the step: when
its attempt ends (however it ends) and its exit says it submitted something, the
directory is read on the worker thread (fleet.control.worker) and the children are checked as the suite's steps are
(fleet.core.childsteps). Back on the loop they are entered as a submission of their
own (fleet.control.intake: in parts, like a big suite), counted in the parent's
submission, and only then is the parent's exit handed to the scheduler: a parent that
waits always finds its children there. Children submitted by a step that keeps running
start when it waits or ends.

A child already known to this fleet with the same definition adds nothing if it is
still to run, or succeeded and its marker still says so against its deps' markers now
(a retried parent that submits the same children again); one that ended without
success, a changed one, or one a dep of which ran again since, follows the rules of a
resubmitted step (fleet.core.generations): it runs again. A child whose marker says it already
succeeded with this definition is skipped (a rerun after a crash runs only the rest),
but not when its parent runs for a `fleet run --force`: then it runs again too, once
for that submission (Children._forced).
Children that cannot be taken (a problem in a table, a dep on an unknown step or on
another family's child, an id the suite already uses, an output another step produces,
an input no step produces that is not on disk: fleet.core.childfiles) fail the parent's attempt, with
the problems as its reason and in its log. A child that ended without success submitted again past the limit
(fleet.core.phases.MAX_RESUBMITS: the parent is in a loop) fails the parent's attempt
too, not retried, and is not entered.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from fleet.control import journalmarks, leftovers, markwriter
from fleet.control.checks import inside_run_dir
from fleet.control.markerscan import read_markers
from fleet.control.submissions import Accepted, why_again
from fleet.core import states as S
from fleet.core.attempts import GOES_ON
from fleet.core.childdeps import not_a_childs_dep
from fleet.core.childfiles import file_deps, inside_outputs, sibling_outputs
from fleet.core.childsteps import expand
from fleet.core.madebefore import Upstream, not_made
from fleet.core.problems import Problem
from fleet.core.scheduler import StepExited, Submitted
from fleet.core.steppaths import path_clashes
from fleet.core.suite import toml_table
from fleet.wire import events, ownfiles, records

_new, _set = object.__new__, object.__setattr__
_ON_NODE = (S.RUNNING, S.QUEUED)  # a child's states in which it already works on its deps' output

IDLE_WAIT = ("it asked to wait for its children twice in a row with none submitted since and none left to end "
             "(fleet.WaitForChildren, or exit 3, whatever its phase: a loop)")
CHUNK = 2000  # children per part handed to the scheduler (as fleet.control.intake.CHUNK)
# Test hook: milliseconds the worker thread sleeps after reading a parent's children and
# their markers, before the loop looks at them (tests/control/test_children.py).
COLLECT_SLEEP_ENV = "FLEET_TEST_COLLECT_SLEEP_MS"
_COLLECT_SLEEP = float(os.environ.get(COLLECT_SLEEP_ENV) or 0) / 1000

@dataclass(frozen=True)
class Tag:
    """A worker job's tag: the parent's exit, handed on once its children are in."""

    parent: str
    exit: StepExited


@dataclass(frozen=True)
class Collected:
    """What the worker read from a submit directory."""

    names: tuple = ()
    steps: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    markers: dict = field(default_factory=dict)
    left: dict = field(default_factory=dict)  # child id -> what older fleets left (leftovers; no entry: not looked)
    keys: dict = field(default_factory=dict)  # an absolute input -> the path it is matched by (checks.inside_run_dir)
    absent: frozenset = frozenset()  # inputs no sibling produces that are not on disk


@dataclass
class Batch:
    """Children on their way into the scheduler (an intake entry)."""

    acc: Accepted
    event: Submitted
    then: StepExited


class Children:
    """Submit directories read and their children entered; the intake's part."""

    def __init__(self, coord, intake):
        self.coord = coord
        self.intake = intake
        self.given: dict[str, set] = {}  # parent -> given ids of its children (deps name siblings first)
        self.idle: dict[str, int] = {}  # a step whose last wait had nothing to wait for -> its children then

    def exited(self, msg, rec, now: float) -> None:
        """An attempt ended (the agent's Exited): to the scheduler now, or after its children."""
        ev = _new(StepExited)  # StepExited(step, attempt, outcome, reason, stage) without the frozen __init__
        _set(ev, "__dict__", {"step": msg.step, "attempt": msg.attempt, "outcome": msg.outcome, "reason": rec.reason,
                              "stage": str(msg.control.get("stage", ""))})
        # A cancelled parent's children are not taken, whatever it managed to write.
        if not msg.control.get("submitted") or msg.outcome == S.CANCELLED or self.intake.worker is None:
            self._go_on(ev, now)
            return
        c = self.coord
        spec = c.specs.get(msg.step)
        self.intake.worker.put(Tag(msg.step, ev), collect, msg.step, c.claims.run_dir_of(msg.step),
                               frozenset(self.given.get(msg.step, ())),
                               spec.priority if spec is not None else None,
                               any(sub.force for sub in self._subs_of(msg.step)))

    def collected(self, done, now: float) -> None:
        """The worker read a submit directory: enter the children, then the parent's exit."""
        tag, got = done.tag, done.value
        if done.error is not None:
            got = Collected(problems=[Problem(tag.parent, None, None, f"reading its children failed: {done.error!r}")])
        problems, deps = list(got.problems), {}
        if not problems:
            problems, deps = self._check(tag.parent, got)
            if problems:  # (the worker logged those it found; these, off the loop too)
                self.coord.submissions.offload(_to_log, self.coord.claims.run_dir_of(tag.parent), tag.parent,
                                               problems)
        if problems:
            self._fail(tag, "its submitted steps were refused: " + "; ".join(str(p) for p in problems[:5]), now)
            return
        # A child that ended without success, submitted again past the limit: a loop (the
        # child is not entered; its last end stays as it was recorded). Not retried.
        loop = self.coord.sched.resubmit_loop(tag.parent, (s.id for s in got.steps))
        if loop:
            self._fail(tag, loop, now, final=True)
            return
        self.coord.submissions.producers.take(got.steps)  # (the next submission sees their outputs)
        cut = len(tag.parent) + 1  # (a given id may hold a "/": an array's c/{i})
        self.given.setdefault(tag.parent, set()).update(s.id[cut:] for s in got.steps)
        new = self._new(tag.parent, got.steps, got.markers)
        # Every child it named, kept ones too: its ctx.children in this run (fleet.core.phases).
        named = tuple(s.id for s in got.steps) if len(new) < len(got.steps) else ()
        if named:  # kept ones: listed in the parent's submission as done before
            fresh = {s.id for s in new}
            self._kept(tag.parent, [s.id for s in got.steps if s.id not in fresh])
        if not new:
            self.coord._feed(Submitted((), {}, parent=tag.parent, named=named), now)
            self._go_on(tag.exit, now)
            return
        self.intake.waiting.append((None, None, self._batch(tag, new, got.markers, got.left, deps, named)))

    def _fail(self, tag: Tag, why: str, now: float, final: bool = False) -> None:
        """Fail the parent's attempt, its children not entered (`final`: not retried)."""
        # The agent's exit record said it went on: how it really ended is ours to record.
        self.coord.events.write(events.Exit(t=now, step=tag.parent, attempt=tag.exit.attempt,
                                            outcome=S.FAILED, reason=why))
        if tag.exit.outcome in GOES_ON:  # (a success's record waits for its Finished anyway: recording)
            self.coord.recorder.overrule(tag.parent, tag.exit.attempt)
        self.coord._feed(StepExited(tag.parent, tag.exit.attempt, S.FAILED, why, final=final,
                                    went_on=tag.exit.outcome in S.AT_ONCE), now)

    def _go_on(self, ev: StepExited, now: float) -> None:
        """Hand the scheduler an exit that brings no new children. A wait with nothing to
        wait for goes on at once (fleet.core.phases); a second one in a row, with no new
        child since, is a loop (a step that waits whatever its phase): the attempt fails."""
        if ev.outcome != S.WAIT:
            if self.idle:
                self.idle.pop(ev.step, None)
            self.coord._feed(ev, now)
            return
        _, _, _, pending, kids = self.coord.sched.family(ev.step)
        if pending:
            self.idle.pop(ev.step, None)
        elif self.idle.get(ev.step) == kids:
            why = IDLE_WAIT
            self.coord.events.write(events.Exit(t=now, step=ev.step, attempt=ev.attempt, outcome=S.FAILED,
                                                reason=why))
            self.coord.recorder.overrule(ev.step, ev.attempt)  # its attempt record said "wait": failed too
            ev = StepExited(ev.step, ev.attempt, S.FAILED, why, went_on=True)  # (its node saw a wait)
        else:
            self.idle[ev.step] = kids
        self.coord._feed(ev, now)

    def _kept(self, parent: str, ids: list) -> None:
        """Children kept from before that succeeded: in the parent's submission (one that
        reran it on a live fleet) as skipped, as a new fleet lists them, if not in it yet."""
        subs = self.coord.submissions
        sub = subs.subs.get((subs.step_subs.get(parent) or [None])[-1])
        if sub is not None:
            state_of = self.coord.sched.state_of
            sub.done_before([k for k in ids if state_of(k) in S.GOOD], state_of)

    def _new(self, parent: str, steps: list, markers: dict) -> list:
        """The children that submitting adds something to (deps first among siblings). One
        known with this definition adds nothing if it is still to run, or if it succeeded
        and its marker still says so against the markers its deps have now (a dep run
        again since, a suite step or a sibling, or its directory removed: it runs again,
        make's rule, as a suite's step would), unless its parent runs for a --force and it
        has not run since (_forced). One that ended without success runs again. One
        running (or queued on a node) while a dep of it among its siblings runs again now
        is submitted too: it ran on what that dep made before, so the scheduler runs it
        again after its attempt (fleet.core.generations: queued after). Before 2026-12-07
        it was kept, and its end stood for a dep's output that was replaced meanwhile."""
        kept: set = set()
        out = []
        state_of, specs, mine = self.coord.sched.state_of, self.coord.specs, {s.id for s in steps}
        forced = self._forced(parent, steps)
        markers = self._now(steps, markers, state_of)
        again: set = set()  # ids in `out`
        for s in steps:
            old = specs.get(s.id)
            if old is not None and old.same_as(s):
                state = state_of(s.id)
                if (state in S.GOOD and s.id not in forced and _done(s, markers, kept, mine)) or (
                        state not in S.FINAL and not (state in _ON_NODE and again.intersection(s.deps))):
                    kept.add(s.id)
                    continue
            out.append(s)
            again.add(s.id)
        return out

    def _now(self, steps: list, markers: dict, state_of) -> dict:
        """`markers` (read on the worker thread, a moment ago) with those of the children
        and their deps that succeeded since taken as they are now: a child that ended
        between that read and this look had no marker then, and ran again (a retried
        parent's children, seen once in a loaded CI run). In memory where the journals
        know them (fleet.control.journalmarks), else a read each: only such steps."""
        # (An id with no entry had no directory then: removed by hand, it runs again, as it did.)
        late = {i for s in steps for i in (s.id, *s.deps)
                if i in markers and markers[i] is None and state_of(i) in S.GOOD}
        if not late:
            return markers
        run_dir = self.coord.run_dir
        known = journalmarks.of(run_dir)
        now = dict(markers)
        for i in sorted(late):
            rec = known.get(i) if known is not None else None
            now[i] = rec if rec is not None else markwriter.read_done(run_dir, i)
        return now

    def _forced(self, parent: str, steps: list) -> set:
        """The children asked for again: the parent runs for a `fleet run --force` (one of
        its submissions was forced) and they have not been submitted since that began.
        So a forced parent's children run again, as the user guide's "every selected step
        runs again" says (before 2026-12-06 those that had succeeded were skipped), while
        a retried parent's attempt that submits them again keeps those that succeeded
        for it. Nested children follow: a child's submission is its parent's."""
        mine = self._subs_of(parent)
        if not any(sub.force for sub in mine):
            return set()
        return {s.id for s in steps if not any(sub.holds(s.id) for sub in mine)}

    def _subs_of(self, parent: str) -> list:
        """The submissions the parent runs for."""
        subs = self.coord.submissions
        return [subs.subs[i] for i in subs.step_subs.get(parent, ()) if i in subs.subs]

    def _check(self, parent: str, got: Collected) -> tuple[list, dict]:
        """Problems only the loop can see, and the children's deps with their inputs'
        producers (fleet.core.childfiles): deps on unknown steps or on another family's
        children (fleet.core.childdeps: the graph and the order its ancestors entered
        their children decide, not whether that parent had submitted it yet), ids the
        suite uses, a directory on the log file of a step of the fleet
        (fleet.core.steppaths), deps on steps that end only after this family (the
        parent, an ancestor, a step that waits for one of them): the child would wait
        for ever, and they for it; an output another step of the fleet produces (or an
        output or workdir inside one of its outputs), an input no step produces that is not on disk, and an input another step produces
        that it could not depend on, as a dep. An input the parent or an ancestor
        produces makes no dependency: they end only after their children; nor one
        another family's child produces that has succeeded, or whose family the parent
        or an ancestor waits for (through deps: that family ended before this one ran;
        one that ended without success must have left the file on disk)."""
        c, steps = self.coord, got.steps
        mine = {s.id for s in steps}
        owner_of = lambda sid: c.sched.family(sid)[0]  # noqa: E731  (the step that submitted it)
        out = path_clashes(steps, mine, c.specs)
        deps, read, more = file_deps(steps, c.submissions.producers.of,
                                     lambda i: got.keys.get(i) or os.path.normpath(i), got.absent.__contains__,
                                     str(c.run_dir))
        out += more + inside_outputs(steps, c.submissions.producers.of, mine)
        above = _ancestors(parent, owner_of) if read else ()
        read = {sid: [(i, p) for i, p in pairs if p not in above] for sid, pairs in read.items()}
        upstream = Upstream(above, c.sched.state_of, c.sched.deps_of, owner_of)
        outside = {d for s in steps for d in s.deps if d not in mine and d in c.specs}
        outside.update(p for pairs in read.values() for _, p in pairs if p in c.specs)
        stuck = c.sched.ends_after(parent, sorted(outside)) if outside else {}
        why_not = lambda d: (_stuck(d, stuck[d], parent) if d in stuck  # noqa: E731
                             else not_a_childs_dep(d, parent, c.specs, owner_of, c.sched.entered_at))
        for s in steps:
            if s.id in c.specs and c.sched.family(s.id)[0] != parent:
                out.append(Problem(s.source, s.id, "id", "already a step of the fleet, not a child of this step"))
            out += [Problem(s.source, s.id, "deps", why) for d in s.deps if d not in mine and (why := why_not(d))]
            for inp, p in read.get(s.id, ()):
                why = why_not(p)
                if why and (c.sched.state_of(p) in S.GOOD or upstream.reaches(p)):
                    why = not_made(inp, p, c.sched.state_of(p), got.absent)
                    if why is None:  # (made before this family ran: no dependency, as an ancestor's output)
                        continue
                elif why:
                    why = f"{inp!r} is an output of {p!r}: {why}"
                if why:
                    out.append(Problem(s.source, s.id, "inputs", why))
                elif p not in deps[s.id]:
                    deps[s.id] = (*deps[s.id], p)
        return out, deps

    def _batch(self, tag: Tag, steps: list, markers: dict, left: dict, files: dict, named: tuple) -> Batch:
        """The children as an accepted submission, counted in the parent's own. Those
        that run again with their directory on disk take the path of fresh steps where
        collect looked at what older fleets left in it (fleet.control.leftovers); one it
        did not look at (None) is claimed per step, its records in its own files."""
        subs = self.coord.submissions
        sid = (subs.step_subs.get(tag.parent) or [None])[-1]
        sub = subs.subs.get(sid)
        forced = frozenset(self._forced(tag.parent, steps))  # (before they are counted in it)
        if sub is not None:
            sub.add((s.id for s in steps), self.coord.sched.state_of,
                    f"submitted again by {tag.parent}, attempt {tag.exit.attempt}")
        deps = {s.id: s.deps for s in steps}
        done: set = set()
        for s in steps:  # setup order is deps first among siblings
            if s.id not in forced and _done(s, markers, done, deps):
                done.add(s.id)
            else:  # why one that succeeded before runs again, for its attempt records (fleet audit)
                _rerun(subs.rerun, s, markers.get(s.id), s.id in forced)
        # The scheduler waits for their inputs' producers too (`files`: _check), and their
        # declared records say so (fleet report's waits and floor); a marker names what
        # its deps alone had made, as before 2026-12-07 (done-ness unchanged).
        waits = {s.id: files.get(s.id, s.deps) for s in steps} if any(s.inputs for s in steps) else deps
        acc = Accepted(sub, tag.parent, steps, deps, done, set(), (), (), markers, forced=forced,
                       leftovers={s.id: left.get(s.id) for s in steps if s.id in markers}, waits=waits,
                       parent=tag.parent)
        # Children of a --serial run are serial too: one step at a time, theirs included.
        event = Submitted(tuple(steps), waits, frozenset(done), chunk=CHUNK, parent=tag.parent,
                          serial=sub is not None and sub.serial, named=named)
        return Batch(acc, event, tag.exit)


def _rerun(reasons: dict, spec, marker: dict | None, forced: bool) -> None:
    """Note why a child that has a success on record runs again ("forced", "changed",
    "dependency changed"), as a suite step's is noted; forget an earlier reason if it has none."""
    why = why_again(spec, marker, forced)
    if why:
        reasons[spec.id] = why
    elif reasons:
        reasons.pop(spec.id, None)


def _ancestors(parent: str, owner_of) -> set:
    """The parent and the steps that submitted it, up to the suite's."""
    out, up = set(), parent
    while up is not None:
        out.add(up)
        up = owner_of(up)
    return out


def _stuck(dep: str, held: str, parent: str) -> str:
    """Why a child cannot depend on `dep`, which waits for `held` of its family."""
    who = "its parent" if held == parent else f"an ancestor of its parent {parent!r}"
    what = f"{dep!r} is {who}" if dep == held else f"{dep!r} waits for {held!r}, {who}"
    return f"{what}, which ends only after its children: this child would wait for ever"


def _done(spec, markers: dict, done: set, batch=()) -> bool:
    """A child's marker says this definition succeeded against the markers its deps have
    now (a suite step's or a sibling's), and each dep among `batch` (siblings submitted
    with it that may run) is in `done`."""
    ids = {d: records.marker_id(markers[d]) if markers.get(d) is not None else None for d in spec.deps}
    return (records.done_against(markers.get(spec.id), spec, ids)
            and all(d in done for d in spec.deps if d in batch))


# What a submit file may hold besides its [[steps]]: nothing, and each other table is
# refused rather than ignored (its fields would silently not apply to the children).
_NOT_TAKEN = {"defaults": "children take no [defaults]: put the fields in each step's table",
              "suite": "children take no [suite]: they run in the suite of the step that submits them",
              None: "a submit file holds [[steps]] tables only, not {key!r}"}


# -- off the loop (fleet.control.worker) ----------------------------------------------------------
def collect(parent: str, run_dir: Path, given: frozenset, priority, forced: bool = False) -> Collected:
    """Read the parent's submit files, in name order, and check them. They are the run's
    that just ended: a step's first submission in a run removes those of its earlier runs
    (fleet.node.protocol.clear_submitted), each taken in when its run ended. Of the
    children that will run again with a directory on disk (all of them: `forced`, the
    parent runs for a --force), what older fleets left there is looked at, as a suite's
    steps' is (fleet.control.leftovers): before 2026-12-06 it was not, so each was
    claimed per step and recorded in its own files, which the journals never knew of;
    the next fleet then took the success for one another fleet had made since, and
    skipped the child."""
    d = records.step_dir(run_dir, parent) / ".fleet" / "submit"
    try:
        names = sorted(n for n in os.listdir(d) if not n.startswith((".", "ht.tmp"))
                       and n.endswith((".json", ".toml")))
    except FileNotFoundError:
        return Collected()
    tables: list = []
    problems: list = []
    for n in names:
        try:
            text = (d / n).read_text(encoding="utf-8")
            # (read as a suite file is: a byte-order mark read past; before 2026-12-06 it failed the parent)
            raw = json.loads(text) if n.endswith(".json") else toml_table(text)
        except (OSError, ValueError, RecursionError) as e:
            problems.append(Problem(str(d / n), None, None, f"cannot read it: {e}"))
            continue
        # An empty file submits no step, as an empty suite holds none and ctx.submit([])
        # submits none (a loop that wrote no table): before 2026-12-06 it failed the parent.
        got = raw.get("steps", []) if isinstance(raw, dict) else None
        if not isinstance(got, list):
            problems.append(Problem(str(d / n), None, "steps", "expected [[steps]] tables"))
            continue
        problems += [Problem(str(d / n), None, key, _NOT_TAKEN.get(key, _NOT_TAKEN[None]).format(key=key))
                     for key in raw if key != "steps"]  # (before 2026-12-06 ignored without a word)
        tables += got
    steps, more = expand(parent, tables, str(d), given, priority)
    problems += more
    if problems:
        _to_log(run_dir, parent, problems)
        return Collected(tuple(names), [], problems)
    ids = [s.id for s in steps]
    mine = set(ids)
    outside = sorted({d for s in steps for d in s.deps if d not in mine})  # (what they ran against: _done)
    markers = read_markers(run_dir, ids + outside)
    again = _again(steps, markers, mine, forced)
    found = leftovers.scan(run_dir, again)
    keys, absent = _inputs(run_dir, steps)
    if _COLLECT_SLEEP:  # (test hook: a child may end between this read and the loop's look)
        time.sleep(_COLLECT_SLEEP)
    return Collected(tuple(names), steps, [], markers, {sid: found.get(sid, leftovers.NOTHING) for sid in again},
                     keys, absent)


def _inputs(run_dir: Path, steps: list) -> tuple[dict, frozenset]:
    """The path each absolute input of the children is matched by (one inside the run
    directory: relative to it), and the inputs no sibling produces that are not on disk
    (a look each, here off the loop, as the suite's are looked for before it runs;
    whether a step of the fleet produces one, the loop says: Children._check). Children
    without inputs cost nothing."""
    if not any(s.inputs for s in steps):
        return {}, frozenset()
    made, _ = sibling_outputs(steps)
    local = inside_run_dir(run_dir)
    wanted = {i for s in steps for i in s.inputs}  # (many children read one file: looked at once)
    keys = {i: local(i) for i in wanted if os.path.isabs(i)}
    absent = {i for i in wanted if (keys.get(i) or os.path.normpath(i)) not in made and not (run_dir / i).exists()}
    return keys, frozenset(absent)


def _again(steps: list, markers: dict, mine: set, forced: bool) -> list:
    """The children with a directory on disk that will run unless the loop keeps them:
    those their markers do not say done (every one, `forced`). A child found done costs
    its marker read alone (a rerun of a parent with a million done children)."""
    done: set = set()
    out = []
    for s in steps:  # deps first among siblings
        if not forced and _done(s, markers, done, mine):
            done.add(s.id)
        elif s.id in markers:
            out.append(s.id)
    return out


def _to_log(run_dir: Path, parent: str, problems: list) -> None:
    try:
        with ownfiles.open(records.log_path(run_dir, parent), "a") as f:
            f.write("".join(f"fleet: {p}\n" for p in problems))
    except OSError:
        pass
