"""The run directory's per-step records, as every fleet and every reader sees them:
where a step's log and .fleet/ records live, and how to read its completion marker,
claim, attempt records and final outcome. The coordinator writes them
(fleet.control.store); `fleet audit` and other fleets read them through here.

A fleet holding the run directory's lease (fleet.control.lease) records attempts and
outcomes in its journal, .fleet/journal/<fleet>.jsonl, instead of per-step attempt
files (fleet.control.journal); readers take both (read_journals, attempts, read_final).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

from fleet.core.suite import StepSpec
from fleet.wire import gcpause, owndirs, ownfiles, sightings, spechash
from fleet.wire.sightings import SEEN

CLAIM = "claim"
ATTEMPT = "attempt."
DONE = "done.json"
FINAL = "final.json"
JOURNALS = Path(".fleet") / "journal"  # under the run directory: <fleet>.jsonl each


def step_dir(run_dir: Path, step_id: str) -> Path:
    """steps/<id>/ under the run directory: the step's log and its .fleet/ records."""
    return run_dir / "steps" / step_id


# How the reason of a step whose own directory could not be made begins (fleet.node.stepdirs):
# its log was never opened, so no line names it.
NO_LOG = "cannot make the step's records directory"
# ... and of one whose log could not be opened (fleet.node.stepdirs.open_log): no log is pointed
# to, lest an earlier attempt's be read as this one's (before 2026-12-07 "PermissionError: ...").
NO_LOG_OPEN = "cannot open the step's log"


def no_log(reason: str | None) -> bool:
    """Whether a step that ended with `reason` failed before its log was opened."""
    return bool(reason) and reason.startswith((NO_LOG, NO_LOG_OPEN))


# A final record's field (true) saying its outcome is its fleet's allocation's, not the
# step's: unrunnable after that fleet lost the nodes it needed, or blocked by such a step
# (fleet.control.claims.Claims.verdict). Other fleets run the step; before 2026-12-07 they
# took it as the step's failure (their `fleet run` failed steps that never ran anywhere).
OF_ALLOCATION = "allocation"


def of_allocation(final: dict | None) -> bool:
    """Whether a final record says only that its fleet's allocation could not run the step."""
    return bool(final) and final.get(OF_ALLOCATION) is True


def ended_in_fleet(final: dict) -> str:
    """How another fleet's final record of a step reads as the step's end here."""
    return f"{final.get('outcome')} in fleet {final.get('fleet')}: {final.get('reason', '')}"


def log_path(run_dir: Path, step_id: str) -> Path:
    return step_dir(run_dir, step_id) / "log"


def workdir(run_dir: Path, spec: StepSpec) -> Path:
    return Path(spec.workdir) if os.path.isabs(spec.workdir) else run_dir / spec.workdir


@functools.lru_cache(maxsize=1 << 16)
def fleet_dir(run_dir: Path, step_id: str) -> Path:
    """steps/<id>/.fleet/ (asked for several times per step by the coordinator: built once,
    from one string: the Path three joins make, equal and with the same hash, at half the cost)."""
    base = str(run_dir)
    if base.endswith("/") or not isinstance(run_dir, Path):
        return step_dir(Path(run_dir), step_id) / ".fleet"
    return type(run_dir)(f"{base}/steps/{step_id}/.fleet")


# Step id -> the definition last hashed under it and its hash: one entry a step id, so a
# definition submitted again replaces the one before, which then dies with its submission.
# (Keyed by id(spec) before 2026-12-07, it kept every definition ever hashed for good: a
# long-lived fleet grew by each resubmission of a suite, ~100 bytes a step for the entry
# and the definition it held, ~500 more.)
_hashes: dict[str, tuple[StepSpec, str]] = {}


def put(path: str, data: bytes, makedirs=None) -> None:
    """Write a per-step record file (a done marker, a final.json) in place: one open, no
    temporary file and no rename; the journal line written and fsync'd before it is its
    authority (a torn one is rewritten on replay). makedirs(its directory) first when
    that is missing (default: fleet.wire.owndirs.makedirs)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ownfiles.MODE)
    except FileNotFoundError:
        (makedirs or owndirs.makedirs)(os.path.dirname(path))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ownfiles.MODE)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def unlink(path: str) -> None:
    """Remove a per-step record file (a marker, a final.json), if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def spec_hash(spec: StepSpec) -> str:
    """A digest of what the step does: a changed step is not skipped on rerun."""
    hit = _hashes.get(spec.id)
    if hit is not None and hit[0] is spec:  # computed once per step, not per marker
        return hit[1]
    h = spechash.spec_hash(spec)  # sha256 of repr(spec.identity()), made faster
    _hashes[spec.id] = (spec, h)  # (another definition of the step, hashed after it, takes its place)
    return h


def read_done(run_dir: Path, step_id: str) -> dict | None:
    """The step's completion marker, or None (one read)."""
    return read_marker(fleet_dir(run_dir, step_id) / DONE)


def read_marker(path: Path | str) -> dict | None:
    """The completion marker at `path`, or None (none there, or torn)."""
    try:
        with open(path) as f:
            rec = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def succeeded_as(rec: dict | None, spec: StepSpec) -> bool:
    """True when the marker says this same definition succeeded (its hash, or, written
    before 2026-12-06, the hash that counted scheduling fields too: spechash.legacy_hash)."""
    if rec is None or rec.get("outcome") != "succeeded":
        return False
    h = rec.get("spec")
    return h == spec_hash(spec) or (h is not None and h == spechash.legacy_hash(spec))


def is_done(run_dir: Path, spec: StepSpec) -> bool:
    """True when a marker says this same step already succeeded."""
    return succeeded_as(read_done(run_dir, spec.id), spec)


def final_tag(rec: dict | None) -> str | None:
    """Which final record this is, as the claims log says a step ended with it
    (fleet.control.claimlog `ended_as`): "final@" and its `at`; None without one."""
    at = rec.get("at") if isinstance(rec, dict) else None
    return f"final@{at!r}" if isinstance(at, (int, float)) else None


def marker_id(rec: dict) -> str:
    """Which success a marker records: its `id`; for a 0.1 marker, which has none, one
    made of what it does record (the same at every read)."""
    mid = rec.get("id")
    if isinstance(mid, str):
        return mid
    return f"0.1:{rec.get('fleet')}:{rec.get('attempt')}:{rec.get('ended_at')}"


def done_against(rec: dict | None, spec: StepSpec, dep_ids: dict[str, str | None]) -> bool:
    """True when the marker says this same definition succeeded against these markers
    of its deps (dep id -> marker_id). A 0.1 marker does not say what it ran against:
    it counts when the definition matches (the caller checks its deps are done)."""
    if not succeeded_as(rec, spec):
        return False
    ran = rec.get("deps")
    return ran is None or ran == dep_ids


def has_done(run_dir: Path, step_id: str) -> bool:
    """True when a step has a completion marker of any definition."""
    return (fleet_dir(run_dir, step_id) / DONE).exists()


class ClaimLook(NamedTuple):
    """A per-step claim as read: its record, its age by its mtime (this host's clock against
    the one that set it: a hint only), and how long this process has seen it unchanged."""

    rec: dict
    age: float
    unchanged: float


def read_claim(run_dir: Path, step_id: str) -> ClaimLook | None:
    """The claim as looked at now, or None."""
    path = os.path.join(fleet_dir(run_dir, step_id), CLAIM)
    try:
        with open(path) as f:
            st = os.fstat(f.fileno())
            rec = json.loads(f.read())
    except (OSError, ValueError):
        SEEN.forget(path)
        return None
    return ClaimLook(rec, time.time() - st.st_mtime, SEEN.unchanged_for(path, st))


def claim_stale(cur: ClaimLook, stale_after: float, live: Callable[[str], bool] | None = None) -> bool:
    """The claim's fleet is not live on the run directory (`live`: whether a fleet holds
    the lease or a live registration, judged per fleet, fleet.control.claimlog), or the
    claim was seen unchanged long enough on this process's own clock (fleet.wire.sightings;
    its holder refreshes it every stale_after/4, ours assumed: before 2026-12-07 its mtime
    alone decided, and a fleet whose clock was ahead took a live fleet's claims). Without
    `live`, a long-dead fleet's claim waited 2 x stale_after/4 + 2 s (five minutes). A
    claim whose process lives on this host is judged by the watch alone, as before: a
    fleet older than the lease (2026-11-30) holds claims and neither lease nor registration."""
    fleet = cur.rec.get("fleet")
    if live is not None and isinstance(fleet, str) and fleet and not live(fleet) and not _alive_here(cur.rec):
        return True
    return sightings.stale(cur.unchanged, cur.age, stale_after, max(0.2, stale_after / 4))


def _alive_here(claim: dict) -> bool:
    """The claim's process runs on this host (or its pid was taken since: the watch decides)."""
    pid = claim.get("pid")
    if claim.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_dead(claim: dict) -> bool:
    """True when the claim's fleet is provably gone: same host, no such process."""
    if claim.get("host") != socket.gethostname():
        return False
    pid = claim.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def zombie(rec: dict) -> bool:
    """True when the record's process (on this host) has exited but was not waited for:
    a coordinator killed while its parent is gone or busy stays a zombie, maybe forever
    where nothing reaps orphans."""
    pid = rec.get("pid")
    if rec.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def attempts(run_dir: Path, step_id: str, journals: "Journals | None" = None,
             names: frozenset[str] | None = None) -> list[dict]:
    """Every attempt any fleet recorded for the step: its attempt files and those in
    the run directory's journals (read here unless given: read_journals, for many steps).
    `names`: what the step's .fleet directory holds, if the caller listed it (no look here)."""
    d = fleet_dir(run_dir, step_id)
    journals = read_journals(run_dir) if journals is None else journals
    out = list(journals.attempts.get(step_id, {}).values())
    if names is None:
        files = sorted(d.glob(f"{ATTEMPT}*.json")) if d.is_dir() else []
    else:  # (the glob's pattern, attempt.*.json, on the names)
        files = [d / n for n in sorted(names) if n.startswith(ATTEMPT) and n.endswith(".json")
                 and len(n) >= len(ATTEMPT) + len(".json")]
    for p in files:
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def read_final(run_dir: Path, step_id: str, journals: "Journals | None" = None, on_disk: bool = True) -> dict | None:
    """The step's final outcome (how it last ended without success), or None; given
    the journals, a newer one recorded there (not yet written as a file) wins.
    `on_disk` False: the caller knows there is no file (it listed the directory)."""
    try:
        rec = json.loads((fleet_dir(run_dir, step_id) / FINAL).read_text()) if on_disk else None
    except (OSError, ValueError):
        rec = None
    j = journals.outcome.get(step_id) if journals is not None else None
    if j is not None and j[0] == "final" and (rec is None or float(rec.get("at") or 0) <= j[1]):
        return j[2]
    return rec


# --- journals ----------------------------------------------------------------------------
#
# One line per record, appended: {"k": "fleet", fleet, host, pid, t} first, then
# {"k": "start", step, attempt, generation, t}, {"k": "attempt", step, rec} (what an
# attempt file holds), {"k": "done", step, rec} (the step's marker), {"k": "final", step,
# rec, drop} (its final.json; drop: its marker goes), and {"k": "sealed", by, t} once
# every marker and final of the journal is on disk (written at a clean end, or by the
# fleet that replayed a dead fleet's journal). A torn last line (a crash mid-write) is
# skipped: its records were not flushed, so nothing was written from them. Since
# 2026-12-01 a fleet writes a loop turn's starts as one line, {"k": "starts", "s":
# [[step, attempt, generation], ...], t}, and a success as one line, {"k": "done",
# step, rec, att} (att: its attempt record); both read as the lines they replace. Since
# 2026-12-02, {"k": "reset", step, t}: the user asked for the step again (--force, or
# its directory removed), so --max-attempts counts its attempts from t
# (fleet.core.attempts); older readers take nothing from it. Since 2026-12-03 a `starts`
# line has "h": each start's definition hash, in order, and {"k": "lost", step, rec} is
# the attempt record a fleet writes for a dead fleet's attempt that its journal says
# began and never ended (fleet.control.recording): read as that fleet's attempt, it
# touches nothing of this journal's (it says nothing ran here); {"k": "interrupted",
# step, t}: the drain stopped the step (no attempt), so it was not running when the fleet
# died. A `done` or `final` line ends any start before it (a step handed to a node ahead
# and cancelled before it began has a start and a final, no attempt). Since 2026-12-06 a
# `done` line may say "drop": true: the step's final.json (of the failure the success
# follows) goes with its marker's write. Since 2026-12-07 a `final` line's "drop" may be
# the marker id of the success it replaces (only that marker goes: fleet.control.store),
# and lines after a seal by another fleet (written by a fleet found gone that resumed,
# fleet.control.foundgone) are not read.

@dataclass
class Journal:
    """One fleet's journal as read: who wrote it, and what it still owes the files."""

    path: Path
    fleet: dict = field(default_factory=dict)      # the header: fleet, host, pid, t
    sealed: bool = False
    last: dict = field(default_factory=dict)       # step -> its last "done"/"final" line here
    running: dict = field(default_factory=dict)    # step -> its "start" line with no end after it
    sealed_by: str = ""                            # "itself", or the fleet that replayed it
    touched: set = field(default_factory=set)      # steps it has any line of


@dataclass
class Journals:
    """Every journal of a run directory, merged for readers."""

    each: list = field(default_factory=list)        # Journal, one per file
    attempts: dict = field(default_factory=dict)    # step -> {(fleet, generation, attempt): record}
    outcome: dict = field(default_factory=dict)     # step -> ("done" | "final", t, rec): the newest
    resets: dict = field(default_factory=dict)      # step -> t of its newest reset (fleet.core.attempts)

    def done(self, step_id: str) -> dict | None:
        """The marker of the step's newest outcome in a journal, if it was a success."""
        o = self.outcome.get(step_id)
        return o[2] if o is not None and o[0] == "done" else None


def read_journals(run_dir: Path, only: list[str] | None = None, lean: bool = False) -> Journals:
    """Every journal under the run directory (none: empty), or only those named.
    `lean` (a reader of outcomes, such as fleet audit): each attempt's and outcome's
    record keeps only the fields in LEAN, and no journal keeps its lines (Journal.last,
    Journal.touched stay empty): what a replay needs is not read."""
    with gcpause.paused():  # (millions of plain dicts at a million steps: fleet.wire.gcpause)
        return _read_journals(run_dir, only, lean)


# What a lean read keeps of a record: an attempt's key (fleet, generation, attempt: _take),
# and what counting successes and judging outcomes read (fleet.report.audit). At a million
# steps the whole records came to gigabytes.
LEAN = ("fleet", "generation", "attempt", "outcome", "spec", "ended_at", "submission", "rerun", "at", "reason")


def _read_journals(run_dir: Path, only: list[str] | None, lean: bool = False) -> Journals:
    out = Journals()
    root = Path(run_dir) / JOURNALS
    try:
        names = sorted(n for n in os.listdir(root) if n.endswith(".jsonl")) if only is None else only
    except OSError:
        return out
    take = _take_lean if lean else _take
    for name in names:
        j = Journal(root / name)
        try:
            with open(j.path, "rb") as f:
                # (lean: a line at a time, a million steps' journal is not held whole; a
                # failed read then keeps what it read, where a replay keeps nothing)
                lines = f if lean else f.read().splitlines()
                for raw in lines:
                    try:
                        line = json.loads(raw)
                    except ValueError:
                        continue
                    if isinstance(line, dict):
                        take(out, j, line)
        except OSError:
            continue
        out.each.append(j)
    return out


def _take_lean(out: Journals, j: Journal, line: dict) -> None:
    """_take, each record cut to LEAN, and nothing kept of the lines themselves."""
    k = line.get("k")
    if k in ("attempt", "lost", "done", "final"):
        line = dict(line)
        for key in ("rec", "att"):
            rec = line.get(key)
            if isinstance(rec, dict):
                line[key] = {f: rec[f] for f in LEAN if f in rec}
    _take(out, j, line)
    if k in ("done", "final") and line.get("step") is not None:
        j.last.pop(line["step"], None)
    j.touched.clear()


def _take(out: Journals, j: Journal, line: dict) -> None:
    k, step, t = line.get("k"), line.get("step"), float(line.get("t") or 0.0)
    if k == "fleet":  # (again after a seal: the fleet rotated its journal and the fold failed)
        j.fleet, j.sealed = line, False
    elif k == "sealed":
        j.sealed, j.sealed_by = True, str(line.get("by") or "")
        return
    elif j.sealed and j.sealed_by not in ("", "itself"):
        # Written after another fleet replayed it: by its fleet found gone, resumed before it
        # knew (fleet.control.foundgone); its steps were that other fleet's by then.
        return
    if k == "reset":  # the user asked for the step again: its attempts count from t (touches nothing)
        out.resets[step] = max(t, out.resets.get(step, t))
        return
    if k == "lost":  # another fleet's attempt, recorded by the fleet that replayed its journal: no run here
        rec = line.get("rec") or {}
        out.attempts.setdefault(step, {})[(rec.get("fleet"), rec.get("generation"), rec.get("attempt"))] = rec
        return
    if k == "starts":
        starts, hashes = line.get("s") or (), line.get("h") or ()
        for i, (step, attempt, generation) in enumerate(starts):
            j.touched.add(step)
            j.running[step] = {"k": "start", "step": step, "attempt": attempt, "generation": generation, "t": t}
            if i < len(hashes) and hashes[i]:
                j.running[step]["spec"] = hashes[i]
        return
    if step is not None:
        j.touched.add(step)
    if k == "start":
        j.running[step] = line
    elif k == "interrupted":  # the drain stopped it: ended, no attempt
        j.running.pop(step, None)
    elif k == "attempt":
        rec = line.get("rec") or {}
        # One record per attempt, as its file would hold: an attempt that went on (a next
        # stage, a wait for children: fleet.core.phases) is recorded again when it ends.
        out.attempts.setdefault(step, {})[(rec.get("fleet"), rec.get("generation"), rec.get("attempt"))] = rec
        j.running.pop(step, None)
    elif k in ("done", "final"):
        if k == "done" and "att" in line:  # a success's attempt record, on its marker's line
            _take(out, j, {"k": "attempt", "step": step, "rec": line["att"], "t": t})
        j.last[step] = line
        # An outcome ends whatever start came before it: a step handed to a node ahead
        # (a `starts` line) and cancelled before it began has a `final` line and no attempt.
        j.running.pop(step, None)
        if step not in out.outcome or out.outcome[step][1] <= t:
            out.outcome[step] = (k, t, line.get("rec") or {})
