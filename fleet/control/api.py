"""The Python API for a running fleet: everything a client does, as `fleet run`,
`fleet status` and `fleet down` do it.

    import fleet
    f = fleet.connect("/scratch/run")          # a fleet `fleet up` started there
    sub = f.submit("suite.toml")               # or a list of step tables
    outcomes = f.wait(sub)                     # {"step id": "succeeded", ...}
    print(f.status()["counts"])
    f.down()

See docs/python-api.md.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

from fleet.control import cancelrequests
from fleet.control import client as C
from fleet.control import gone, jobfleets
from fleet.control import rundir
from fleet.control.client import FleetError
from fleet.control.seconds_option import YEAR
from fleet.core.units import lone_surrogate
from fleet.wire import connection, logtag, owndirs
from fleet.wire import messages as P

SUBMIT_WAIT_S = 60.0   # how long a submission's answer is waited for at first
SUBMIT_AGAIN_S = 30.0  # and then again, while the fleet says one is on its way in
HOLD_LOOK_S = 2.0  # an answer this late: is the submission held for its preload? (on_hold)

POLL_S = 0.2
FINAL_SKIP = ("retry",)  # progress rows that are not a step's end
# A coordinator answers progress within a second even under a million-step submission
# (benchmarks/README.md), and its agents stop their steps after 3/4 of the heartbeat
# timeout without word from it: one that has not answered a waiting client for this long
# is gone (killed, crashed, frozen) or its host is unreachable. Only silence can say so
# of a coordinator on another host; on this one its pid says it at once.
SILENCE_ENV = "FLEET_RUN_SILENCE"
SILENCE_S = 120.0


def silence_s() -> float:
    """How long a wait hears nothing before it gives up (FLEET_RUN_SILENCE, else SILENCE_S);
    FleetError naming the variable for a value that is no finite number of seconds above 0
    (before 2026-12-07 a traceback once the suite had started, "2m"; "nan" never gave up)."""
    text = os.environ.get(SILENCE_ENV) or ""
    if not text:
        return SILENCE_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= YEAR):
        raise FleetError(f"{SILENCE_ENV}={text!r}: give a number of seconds above 0 (at most a year), "
                         f"how long `fleet run` waits for a silent coordinator (default {SILENCE_S:g})")
    return seconds


class SubmitError(FleetError):
    """The fleet refused a submission; ``problems`` names each file, step and field."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems) or "the submission was refused")


class SubmitFault(FleetError):
    """The fleet could not take a submission for an error of its own (its coordinator
    could not read the suite file: no descriptor left, say), not the suite's: nothing of
    it was judged or started. Not a SubmitError: the suite may be valid (fleet run exits 1)."""


@dataclass(frozen=True)
class Submission:
    """A suite the fleet accepted: its number in this fleet, its step count and how
    many of them were already done (skipped), and which fleet accepted it (`fleet`: its
    id; the number means something to that fleet alone)."""

    id: int
    steps: int
    skipped: int
    suite: str
    notes: tuple = ()  # the fleet's warnings about it (a step's grace the drain would cut)
    fleet: str = ""    # the fleet that accepted it (Fleet.fleet_id); "": not said (made by hand: not checked)


@dataclass(frozen=True)
class Update:
    """What :meth:`Fleet.wait` passes to ``on_progress`` after each answer: the rows
    that finished since the last one (``[step, outcome, attempt, reason, ...]``; an
    outcome "retry" is an attempt that runs again, not an end), the submission's steps
    counted by state, and the final outcomes so far (step id -> outcome: a read-only
    view that goes on growing with the next answers; ``dict(u.outcomes)`` keeps one
    moment's); ``full``: why the fleet drained if its run directory's file system is
    full or read-only (cannot be written: fleet.control.drain.UNWRITABLE), in every answer
    from the drain on (before 2026-12-06 only in the last one); ``early``: why the fleet
    closed the submission early, not drained ("nothing left can end before the drain
    point at 17:55:00"), if it did."""

    finished: tuple
    counts: dict
    outcomes: Mapping
    full: str = ""
    early: str = ""


class Fleet:
    """A client of one running fleet (see :func:`connect`)."""

    def __init__(self, run_dir: Path, conn: connection.Connection, path: Path | None = None,
                 endpoint: str | None = None):
        self.run_dir = Path(run_dir).resolve()
        self.conn = conn
        self.path = path or connection.path_in(self.run_dir)  # its connection file
        self.client = C.Client(conn, endpoint)

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the fleet keeps running)."""
        self.client.close()

    def submit(self, suite: str | os.PathLike | Iterable[Mapping], *, name: str = "api", force: bool = False,
               serial: bool = False, only: Iterable[str] = (), with_deps: bool = False, shard: str = "",
               new_generation: bool = False, wait_foreign: bool = True, timeout: float = SUBMIT_WAIT_S,
               on_hold: Callable[[str], None] | None = None) -> Submission:
        """Submit a suite file (its path), or a list of step tables (dicts as a suite's
        ``[[steps]]``, written as suite ``name`` into the run directory's .fleet/api/).
        The options are `fleet run`'s, and as there ValueError, before anything is sent,
        for one without the option it goes with (with_deps without only; new_generation or
        wait_foreign=False without shard). SubmitError with the problems if it is refused.

        The answer comes once the whole suite is in: waited for `timeout` seconds, then
        SUBMIT_AGAIN_S at a time while the fleet's status says a submission is still on
        its way in (a big suite is read, checked and entered a part at a time, while the
        fleet answers other clients); FleetError when it does not answer and takes none in.
        ``on_hold``: told, once, what the submission waits for if it is held for its
        suite's preload (a line such as "waiting for node1 to import mylib ...").
        FleetError, nothing sent, for a FLEET_RUN_SILENCE that wait() could not use."""
        only = _ids(only)
        _companions(only, with_deps, shard, new_generation, wait_foreign)
        silence_s()  # (a bad FLEET_RUN_SILENCE said now, not at wait() with the steps running unwatched)
        self.client.usable()  # (closed, or another process's: said before a suite file is written)
        if isinstance(suite, (str, os.PathLike)):
            path = Path(suite).resolve()
        else:
            path = write_suite(self.run_dir, name, list(suite))
        reply = self._ask_submit(P.Submit(str(path), force, serial, shard, new_generation, wait_foreign,
                                          only, with_deps), timeout, on_hold)
        if not reply.ok and reply.fault:
            raise SubmitFault(reply.fault)
        if not reply.ok:
            raise SubmitError(reply.problems)
        return Submission(reply.submission, reply.steps, reply.skipped, str(path), tuple(reply.notes), self.fleet_id)

    @property
    def fleet_id(self) -> str:
        """The id of the fleet this client is connected to (its connection file's; for a fleet
        started before 2026-12-07, which does not say it, one made of its coordinator's host,
        pid and start)."""
        c = self.conn
        return c.fleet or f"{c.host}-{c.pid}@{c.started:.6f}"

    def _own(self, submission: Submission | int) -> None:
        """FleetError if `submission` is another fleet's than the one this client is connected
        to: its number names another submission here, or none (before 2026-12-07 a
        Submission of a fleet since stopped, waited for on the next fleet up in the run
        directory, returned that fleet's submission of the same number's outcomes)."""
        theirs = getattr(submission, "fleet", "")
        if theirs and theirs != self.fleet_id:
            raise FleetError(f"submission {submission.id} is fleet {theirs}'s, and this client is connected to "
                             f"fleet {self.fleet_id} in {self.run_dir}: a submission's number names one of its own "
                             f"fleet's alone. Wait for it with a client of its own fleet while that is up; its "
                             f"steps' outcomes are in {self.run_dir / 'events.jsonl'} (fleet report)")

    def _ask_submit(self, msg: P.Submit, wait: float, on_hold: Callable[[str], None] | None = None) -> P.SubmitReply:
        client = self.client
        client.usable()  # (before the lock: a forked child's copy of it may be held for ever)
        frame = C.request(msg)  # (over 1 MiB: FleetError now, not "did not answer" in 60 s)
        with client.lock:
            client.usable()
            try:
                raw = self._submit_answer(msg, frame, wait, on_hold)
            except BaseException:
                # No answer taken (none in time, the fleet gone, Ctrl-C): the one still owed
                # is not the next question's (before 2026-12-06 a Ctrl-C left it to be).
                client.reset()
                raise
        reply = P.decode(raw)
        if isinstance(reply, P.Error):
            raise FleetError(reply.reason)
        return reply

    def _submit_answer(self, msg: P.Submit, frame: bytes, wait: float,
                       on_hold: Callable[[str], None] | None) -> bytes:
        """Send the submission (encoded: `frame`) and take its answer (the client's lock held)."""
        sock = self.client.sock
        sock.send(frame)
        if on_hold is not None and wait > HOLD_LOOK_S and not self._answered(HOLD_LOOK_S):
            wait -= HOLD_LOOK_S
            self._say_hold(msg.suite, on_hold)
        while not self._answered(wait):
            asker = C.Client(self.conn)  # its own socket: this one's next answer is the Submit's
            try:
                status = asker.ask(P.Status(), timeout=10).status
            except FleetError as e:
                status, why = None, str(e)
            finally:
                asker.close()
            if status is None or not status.get("loop", {}).get("submitting"):
                raise FleetError(
                    f"the coordinator at {self.client.endpoint} did not answer the submission of {msg.suite} "
                    f"within {wait:.0f} s, and " + (f"not a status request either ({why})" if status is None
                                                    else "is taking none in")
                    + ": it may still take it in; `fleet status` shows its submissions")
            wait = SUBMIT_AGAIN_S
        return sock.recv()

    def _answered(self, seconds: float) -> bool:
        """Whether the answer came within `seconds`; CoordinatorGone at once if the
        coordinator is gone (before 2026-12-06 a submission to a fleet that had been
        stopped waited 70 s, then said it might still take it in)."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if self.client.sock.poll(int(max(0.0, min(C.SLICE_S, left)) * 1000)):
                return True
            if why := self.client.gone_why():
                if self.client.last_look():  # (it answered, then ended)
                    return True
                raise C.CoordinatorGone(why)
            if left <= 0:
                return False

    def _say_hold(self, suite: str, on_hold: Callable[[str], None]) -> None:
        """If the fleet holds the submission of ``suite`` for its preload, tell ``on_hold``."""
        from fleet.control.statusview import preloading_line
        asker = C.Client(self.conn)  # its own socket: the other's next answer is the Submit's
        try:
            held = asker.ask(P.Status(), timeout=10).status.get("preloading")
        except FleetError:
            return  # (the wait for the answer says what is wrong, if anything is)
        finally:
            asker.close()
        if held and held.get("suite") == suite:
            on_hold(preloading_line(held))

    def progress(self, submission: Submission | int, since: int = 0, timeout: float = 3.0) -> P.ProgressReply:
        """One progress answer: the rows finished after ``since`` (FleetError if none came,
        or if ``submission`` is another fleet's)."""
        self._own(submission)
        sid = submission.id if isinstance(submission, Submission) else int(submission)
        return self.client.ask(P.Progress(sid, since), timeout=timeout)

    def alive(self) -> bool:
        """Whether the coordinator may still answer (provably gone only on its own host)."""
        import socket

        from fleet.control import identity
        return self.conn.host != socket.gethostname() or not identity.gone(self.conn.pid, self.conn.run_dir,
                                                                            self.conn.started)

    def wait(self, submission: Submission | int, timeout: float | None = None,
             on_progress: Callable[[Update], None] | None = None) -> dict[str, str]:
        """Wait for every step of a submission to end; their outcomes (step id ->
        "succeeded", "skipped", "failed", ...). TimeoutError after ``timeout`` seconds,
        FleetError if the fleet went down first, or if ``submission`` is another fleet's
        (one since stopped, say), or ended too long ago to be kept."""
        self._own(submission)  # (said as it is: not "cannot wait for submission N: ...")
        deadline = None if timeout is None else time.monotonic() + timeout
        since, outcomes = 0, {}
        silent_since, silence = None, silence_s()
        while True:
            try:
                pr = self.progress(submission, since)
                silent_since = None
            except FleetError as e:
                if not self.alive():
                    how = gone.why(self.run_dir, self.conn.host, self.conn.pid)
                    raise FleetError(f"the fleet in {self.run_dir} went down before the submission finished"
                                     + (f": {how}" if how else ""))
                now = time.monotonic()
                # (Only silence counts: an answer, even an error, is not.)
                silent_since = None if not isinstance(e, C.NoAnswer) else now if silent_since is None else silent_since
                if silent_since is not None and now - silent_since >= silence:
                    raise FleetError(f"the coordinator of the fleet in {self.run_dir} (pid {self.conn.pid} on "
                                     f"{self.conn.host}) has not answered for {now - silent_since:.0f} s: it is "
                                     f"gone or frozen, or its host is unreachable; its agents stop their steps "
                                     f"when it is silent ({self._log()}; {SILENCE_ENV} sets how long to wait, "
                                     f"now {silence:g} s)")
                if not isinstance(e, C.NoAnswer):  # an answer: "no submission N" (another fleet's, say)
                    raise FleetError(f"cannot wait for submission {getattr(submission, 'id', submission)} of the "
                                     f"fleet in {self.run_dir}: {e}") from None
                pr = None  # busy, not gone: ask again
            if pr is not None:
                for row in pr.finished:
                    if row[1] not in FINAL_SKIP:
                        outcomes[row[0]] = row[1]
                since = pr.next
                if on_progress is not None:
                    # A view, not a copy: a copy per answer was quadratic (a million
                    # steps: 200 answers copying up to a million entries each).
                    on_progress(Update(tuple(pr.finished), dict(pr.counts), MappingProxyType(outcomes), pr.full,
                                       pr.early))
                if pr.done and not pr.finished:
                    return outcomes
            if deadline is not None and time.monotonic() > deadline:  # (also while rows keep coming)
                raise TimeoutError(f"submission {getattr(submission, 'id', submission)} did not finish "
                                   f"within {timeout} s")
            if pr is None or not pr.finished:
                time.sleep(POLL_S)

    def _log(self) -> str:
        """Its coordinator's log, named for this fleet (fleets may share it: fleet.wire.logtag)."""
        return logtag.pointer(self.run_dir / "coordinator.log", self.conn.host, self.conn.pid)

    def status(self, timeout: float = 10.0, nodes: bool = False) -> dict:
        """The fleet's state, as `fleet status --json` prints it: the nodes summed up and
        those that need attention listed (fleet.control.nodestatus); with `nodes`, every
        node's row too (asked for page by page, so that no one answer grows with the fleet)."""
        st = self.client.ask(P.Status(), timeout=timeout).status
        if nodes and st.get("nodes_shown", "all") != "all":  # an older coordinator listed them all
            st["nodes"], st["nodes_shown"] = self._node_table(timeout), "all"
        return st

    def _node_table(self, timeout: float) -> list[dict]:
        """Every node's row, page by page; a node that joined between two pages may
        shift the order, so a row already taken is not taken twice."""
        rows: dict[str, dict] = {}
        start = 0
        while start is not None:
            page = self.client.ask(P.Status(nodes_from=start), timeout=timeout).status
            for r in page["nodes"]:
                rows.setdefault(r["node"], r)
            start = page["nodes_next"]
        return list(rows.values())

    def cancel(self, ids: Iterable[str] = (), *, waiting: bool = False, every: bool = False) -> P.CancelReply:
        """Cancel these steps (with `waiting`, every step not yet started; with `every`,
        every step not yet ended): running ones are stopped, waiting ones will not start.
        If an id names no step of the fleet, nothing is cancelled and the answer's
        `unknown` lists it. Asks this fleet alone (`fleet cancel` asks each of the run
        directory's); an id may be given alone, as a string."""
        return cancelrequests.cancel_in([self.client], _ids(ids), waiting=waiting, every=every)

    def down(self) -> bool:
        """Stop this fleet: its coordinator, every agent and every step they started."""
        self.close()
        return C.down(self.run_dir, name=self.path.name)


def fleets(run_dir: str | os.PathLike | None = None, *, any_job: bool = False) -> list[Fleet]:
    """A client of every live fleet of run_dir: the one `fleet up` started first, then
    those `fleet run`s embedded there, newest first. Inside a batch job, this job's
    fleets only, unless any_job (as `fleet down --any-job`: fleet.control.jobfleets)."""
    run_dir = Path(run_dir).resolve() if run_dir is not None else rundir.default()
    mine, _ = jobfleets.split(C.live(run_dir), any_job)
    return [Fleet(run_dir, conn, path) for path, conn in mine]


def connect(run_dir: str | os.PathLike | None = None, *, any_job: bool = False) -> Fleet:
    """A client of the fleet in run_dir (default: $FLEET_RUN_DIR, else the current
    directory): the one `fleet up` started, else the newest a `fleet run` embedded
    there. FleetError if none is up. Inside a batch job (SLURM_JOB_ID or PBS_JOBID set),
    this job's fleet only, unless any_job (as `fleet run --fleet-of-any-job`): with only
    another job's up, FleetError naming it (before 2026-12-07 a script in one job drove
    another job's fleet: its steps ran on that job's nodes, and ended with that job)."""
    run_dir = Path(run_dir).resolve() if run_dir is not None else rundir.default()
    found, theirs = jobfleets.split(C.live(run_dir), any_job)
    if theirs and not found:
        raise FleetError(jobfleets.only_theirs(run_dir, theirs))
    if not found:
        raise FleetError(f"no fleet is up in {run_dir} (fleet up --run-dir {run_dir})")
    path, conn = found[0]
    return Fleet(run_dir, conn, path)


def _companions(only: list[str], with_deps: bool, shard: str, new_generation: bool, wait_foreign: bool) -> None:
    """ValueError for an option given without the one it qualifies, as `fleet run`
    refuses it (before 2026-12-06 the fleet took the submission and ignored the option)."""
    if with_deps and not only:
        raise ValueError("with_deps=True selects with only: name the steps (only=[...]) whose deps to add")
    for given, option in ((new_generation, "new_generation=True"), (not wait_foreign, "wait_foreign=False")):
        if given and not shard:
            raise ValueError(f"{option} goes with shard (shard=\"I/N\"): without one it means nothing")


def _ids(ids) -> list[str]:
    """Step ids given as an iterable, or one id alone (a string is not its characters)."""
    return [ids] if isinstance(ids, str) else list(ids)


# --- a suite from step tables ---------------------------------------------------------------

def write_suite(run_dir: Path, name: str, steps: list[Mapping]) -> Path:
    """Write step tables as a suite file under run_dir/.fleet/api/ (0700, files 0600);
    its path. ValueError naming the step and field for a value TOML cannot hold, before
    any file is made."""
    text = suite_text(run_dir, name, steps)
    d = Path(run_dir) / ".fleet" / "api"
    owndirs.makedirs(d.parent)  # (.fleet: as fleet makes it, whatever the umask)
    d.mkdir(mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    # (the file's name is the suite's as far as a file name can be: the suite's own is
    # checked by the coordinator, which names suite.name if it refuses it)
    safe = "".join(c if c.isalnum() or c in "_-." else "_" for c in str(name))[:64].lstrip(".") or "api"
    fd, path = tempfile.mkstemp(prefix=f"{safe}-", suffix=".toml", dir=d)  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
    except BaseException:
        os.unlink(path)  # (a full disk: no half-written suite left behind)
        raise
    return Path(path)


def suite_text(run_dir: Path, name: str, steps: list[Mapping]) -> bytes:
    """The suite file write_suite writes, as UTF-8 (TOML's encoding, whatever the
    locale); ValueError naming the step and field for a value TOML cannot hold."""
    lines = ["[suite]", f"name = {_toml(name, 'suite', 'name')}", f"run_dir = {_toml(str(run_dir), 'suite', 'run_dir')}"]
    for i, table in enumerate(steps):
        if not isinstance(table, Mapping):
            raise ValueError(f"step {i + 1}: a step is a table (dict), not {type(table).__name__}")
        where = f"step {table.get('id', i + 1)!r}"
        lines += ["", "[[steps]]"] + [f"{_key(k, where, k)} = {_toml(v, where, k)}" for k, v in table.items()]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _key(k, where: str, field) -> str:
    k = str(k)
    _unicode(k, f"{where}: field {str(field)!r}", "the key")
    return k if k and all(c.isalnum() or c in "_-" for c in k) and k.isascii() else _basic(k)


def _basic(s: str) -> str:
    """A TOML basic string: a JSON one (not ASCII-escaped, which writes a character past
    the BMP as a surrogate pair that TOML refuses), and DEL escaped, as TOML wants."""
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _unicode(s: str, where: str, what: str) -> None:
    """ValueError for text TOML cannot hold: a lone surrogate (what Python makes of
    bytes that are not UTF-8, in a file name or argv: os.fsdecode's surrogateescape).
    Before 2026-12-06 it was a UnicodeEncodeError from writing the file, and an empty
    suite file was left in .fleet/api."""
    why = lone_surrogate(s)  # (ctx.submit's children are checked with it too: fleet.core.childsteps)
    if why:
        raise ValueError(f"{where}: {what} {why}: a suite is UTF-8 text and cannot hold it")


def _toml(v, where: str, field: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) if not math.isfinite(v) else repr(v)
    if isinstance(v, (str, os.PathLike)):
        v = os.fspath(v)
        if isinstance(v, bytes):
            raise ValueError(f"{where}: field '{field}': the path {v!r} is bytes; give it as str")
        _unicode(v, f"{where}: field '{field}'", "the text")
        return _basic(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x, where, field) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(k, where, field)} = {_toml(x, where, field)}" for k, x in v.items()) + "}"
    raise ValueError(f"{where}: field '{field}': {type(v).__name__} {v!r} cannot be written to a suite")
