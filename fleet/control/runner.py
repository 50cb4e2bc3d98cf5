"""`fleet run`: submit a suite to a fleet, follow it, and say how it ended.

Exit codes: 0 every selected step succeeded (or was done already); 1 some did not, or
the fleet was stopped (`fleet down`, a signal), or stopped itself having lost every node,
before the suite finished; 2 the suite or the run directory is
invalid (nothing started); 3 the allocation ended before the suite did (the fleet
drained: steps interrupted or never started; run it again in the next allocation to
finish it: jobscripts/), or the fleet closed it early (nothing left could end before
the drain point: said so, not that the allocation ended); 4 the run directory's file system is full (a step's set-up
found no space or no quota left: nothing more was started, the steps that did not run
are interrupted or not started, with no attempt used; free space and run it again), or
read-only (the same; make it writable and run it again), or its writes fail (EIO);
5 the fleet was lost before the suite finished (its coordinator killed, crashed, or
silent for FLEET_RUN_SILENCE s): bring a fleet up again and run it again, in this
allocation too; 130 interrupted (Ctrl-C, SIGTERM); 129 interrupted by SIGHUP (the terminal
closed, the ssh connection dropped: the same stopping and summary; fleet.control.stopsignals).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable

from fleet.core import states as S
from fleet.control import gone, interrupts, jobfleets, loopback, shellenv, stopsignals, warnsignal
from fleet.control.api import Fleet, Submission, SubmitError
from fleet.control.drain import FULL, NODES_LOST, READ_ONLY
from fleet.control.stuck import TOO_LONG
from fleet.control.followlines import DRAINED, Lines
from fleet.control.othershards import OtherShards
from fleet.control.client import (CoordinatorKilled, FleetError, PreloadRefused, RunDirError, RunDirFull, down,
                                  embedded_name, fleet_run_dir, up)
from fleet.wire import connection
from fleet.core.problems import Problem
from fleet.core.suite import Suite
from fleet.core.units import counted

EXIT_DRAINED = 3
EXIT_FULL = 4
EXIT_LOST = 5  # the fleet was lost (its coordinator killed, crashed or silent), not stopped


def _said(line: str) -> None:
    """A word of the fleet's to the user of `fleet run`, on stderr."""
    print(f"fleet: {line}", file=sys.stderr, flush=True)


def run_suite(path: Path, suite: Suite, run_dir: Path, *, force: bool = False, serial: bool = False,
              nodes: int = 1, out=None, shard: str = "", new_generation: bool = False,
              wait_foreign: bool = True, fleet_options: list[str] | None = None, join_timeout: float = 120.0,
              only: tuple[str, ...] = (), with_deps: bool = False, others: OtherShards | Callable[[], OtherShards] | None = None,
              any_job: bool = False) -> int:
    """Run one suite to the end; the exit status of `fleet run` (0, 1, 2 or 3: above).

    Uses the fleet `fleet up` started in run_dir; without one, brings up an embedded local
    fleet (`fleet_options` for its coordinator, `join_timeout` for its agents to join: fleet
    run --timeout) for the duration of the run; inside a batch job, also when the fleet
    up is another job's, unless any_job (fleet.control.jobfleets). `only` (with
    `with_deps`) selects steps; `others` are counted apart (or read by a call)."""
    out = stopsignals.quiet(out or sys.stdout)  # (a terminal gone answers EIO: saying must not end it)
    old_int = signal.getsignal(signal.SIGINT)
    old = stopsignals.catch()  # SIGTERM and SIGHUP as Ctrl-C (before 2026-12-07 SIGHUP killed it at once)
    old_usr1 = signal.getsignal(signal.SIGUSR1)
    warnsignal.catch()  # (fleet run's command caught it first: a warning before the fleet is up is kept)
    embedded, f = None, None  # (the embedded fleet's connection name, the client: stopped in the finally)
    followed: list[Lines] = []  # what _follow printed and kept, for a Ctrl-C's summary
    interrupted = False
    try:
        conn, theirs = jobfleets.to_use(run_dir, any_job)
        if conn is None:
            machine = _embedding(run_dir, nodes, theirs, fleet_options or [])
            embedded = embedded_name()
            conn = up(run_dir, nodes=nodes, machine=machine, preload=suite.preload, timeout=join_timeout,
                      extra=fleet_options, name=embedded)
        f = Fleet(run_dir, conn, run_dir / (embedded or connection.NAME))
        if embedded is None:
            _attached(f, conn)
        warnsignal.pass_to(conn)  # a warning that came meanwhile drains it now: nothing of the suite starts
        try:
            sub = f.submit(path, force=force, serial=serial, shard=shard, new_generation=new_generation,
                           wait_foreign=wait_foreign, only=only, with_deps=with_deps, on_hold=_said)
        except SubmitError as e:
            return _refused(e.problems)
        for note in sub.notes:
            print(f"fleet: warning: {note}", file=sys.stderr, flush=True)
        return _follow(f, sub, suite, run_dir, out, shard, followed, others)
    except PreloadRefused as e:  # an embedded fleet's zygotes: said as a fleet that is up says it (preloads)
        return _refused([Problem(str(path), None, "suite.preload", f"node {n}: {why}") for n, why in e.nodes])
    except RunDirError as e:
        print(f"fleet: {e}", file=sys.stderr)
        return EXIT_FULL if isinstance(e, RunDirFull) else 2
    except FleetError as e:
        print(f"fleet: {e}", file=sys.stderr)
        return EXIT_LOST if isinstance(e, CoordinatorKilled) else 1
    except KeyboardInterrupt as e:
        interrupted = True
        _on_interrupt(suite, followed, f, run_dir, embedded, out)
        f = embedded = None  # (stopped there: the finally has nothing left to stop)
        return stopsignals.status(e)
    finally:
        _stop(f, run_dir, embedded)
        warnsignal.release()
        if not interrupted:  # (else it only exits: a Ctrl-C then would end it killed by SIGINT, not 130)
            signal.signal(signal.SIGINT, old_int)
            for sig, handler in old.items():
                signal.signal(sig, handler)
        signal.signal(signal.SIGUSR1, old_usr1)


def _attached(f: Fleet, conn: connection.Connection) -> None:
    """Before submitting to a fleet that is up: a fleet that does not answer is said in
    10 s, not after a submission's 60; and the variables of this shell that differ from
    the fleet's, once (its steps get fleet up's PATH, modules ...: fleet.control.shellenv)."""
    f.status(timeout=10.0)
    if differs := shellenv.warning(conn.env_digests, start=conn.cwd):
        _said(f"warning: {differs}")


def _on_interrupt(suite: Suite, followed: list, f: Fleet | None, run_dir: Path, embedded: str | None, out) -> None:
    """Ctrl-C, SIGTERM or SIGHUP: say so, stop the embedded fleet (if any) and, once it
    is down, what the interrupt left (_summary, if the submission was followed). Another
    of them from here on must not escape as click's "Aborted!" (exit 1), nor end it by
    the signal: while the fleet stops it says to wait (_stop); then it cuts the summary's
    reading short; `fleet run` only exits after that (run_suite leaves them ignored)."""
    stopsignals.ignore()
    _say_interrupted(run_dir, embedded)
    _stop(f, run_dir, embedded)  # (once the embedded fleet is down: what it stopped is stopped)
    if followed and f is not None:
        _summary(suite, followed[0], run_dir, f.conn, embedded is None, out)


def _embedding(run_dir: Path, nodes: int, theirs: connection.Connection | None, options: list[str]) -> str:
    """The machine of the embedded fleet `fleet run` starts (theirs: another job's fleet
    up, passed over; `options`: its coordinator's), once it is said on stderr, with the
    loopback address it would tell the agents of other nodes (fleet.control.loopback)."""
    from fleet.site.profiles import detect
    fleet_run_dir(run_dir)  # before a word about starting: nothing starts where nothing can be written
    machine = detect()  # inside a batch job: the whole allocation, not just this node
    where = counted(nodes, "pretend node") if machine == "local" else f"machine {machine}"
    why = jobfleets.passed_over(run_dir, theirs) if theirs else f"no fleet is up in {run_dir}"
    print(f"fleet: {why}; starting an embedded fleet ({where})", file=sys.stderr, flush=True)
    given = options[options.index("--advertise") + 1] if "--advertise" in options else os.environ.get("FLEET_ADVERTISE")
    if warn := loopback.embedded(given):
        print(f"fleet run: warning: {warn}", file=sys.stderr, flush=True)
    return machine


def _stop(f: Fleet | None, run_dir: Path, embedded: str | None) -> None:
    """Close the connection and stop the embedded fleet (if any), and return only once
    it is down: a Ctrl-C (or SIGTERM, SIGHUP) meanwhile says to wait and changes nothing (it
    escaped here once, as click's "Aborted!" and exit 1, with the fleet's coordinator,
    agents and steps still stopping). down() is bounded: its coordinator is SIGKILLed
    once its steps' grace and its own teardown are over."""
    said = []

    def wait_please(signum, frame):
        if not said:
            said.append(signum)
            print("\nfleet: stopping the embedded fleet and its steps (their grace); please wait", file=sys.stderr,
                  flush=True)
    kept = {sig: signal.signal(sig, wait_please) for sig in stopsignals.stopping()} if embedded else {}
    try:
        if f is not None:
            f.close()
        if embedded:
            down(run_dir, name=embedded)
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def _again(kind: str, run_dir: Path, embedded: bool) -> str:
    """What to do after the fleet went down (`kind`: fleet.control.gone's), as a clause.
    A fleet that stopped itself had lost every node: a `fleet up` one is up no more."""
    if kind == gone.ITSELF and not embedded:
        return (f"; bring a fleet up again (fleet up --run-dir {run_dir}; in the next allocation if this one has "
                f"ended) and run the suite again to finish it (steps that succeeded are skipped)")
    if kind == gone.ITSELF:
        return ("; run the suite again to finish it (in the next allocation if this one has ended; steps that "
                "succeeded are skipped)")
    return "; run the suite again to finish it (steps that succeeded are skipped)"


def _fix(cause: str, run_dir: Path) -> str:
    """What to do about a run directory that cannot be written (`cause`: fleet.control.drain's), as a clause."""
    if cause == FULL:
        return f"free space in {run_dir} (or raise the quota)"
    if cause == READ_ONLY:
        return (f"make {run_dir} writable again (a file system the kernel made read-only after an error: unmount "
                f"it, check it and mount it again)")
    return f"repair the file system of {run_dir} (its writes fail)"


def _refused(problems: list) -> int:
    """Every problem of a suite refused (nothing of it started) on stderr; exit 2."""
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    print(f"{counted(len(problems), 'problem')} found; nothing was started", file=sys.stderr)
    return 2


def _say_interrupted(run_dir: Path, embedded: str | None) -> None:
    if embedded:
        print("\nfleet: interrupted; stopping the embedded fleet and its steps", file=sys.stderr, flush=True)
    else:
        print(f"\nfleet: interrupted; the fleet in {run_dir} keeps running "
              f"(fleet status / fleet down --run-dir {run_dir})", file=sys.stderr)


def _summary(suite: Suite, show: Lines, run_dir: Path, conn: connection.Connection, still_up: bool, out) -> None:
    """Say what the interrupt left (_interrupted), once the embedded fleet is down. What
    it stopped is read from the stream's tail (bounded: fleet.control.interrupts); a
    second Ctrl-C (or SIGTERM, SIGHUP) meanwhile cuts that short, and what the client saw is said."""
    tail: dict[str, str] = {}
    if not still_up:
        try:
            try:
                for sig in stopsignals.stopping():
                    signal.signal(sig, stopsignals.interrupt)
                tail = interrupts.tail_exits(run_dir, conn.host, conn.pid)
            finally:  # (from here on only the summary and the exit: nothing to cut short)
                stopsignals.ignore()
        except KeyboardInterrupt:
            tail = {}
    print("\n".join(_interrupted(suite, show, still_up, run_dir, tail)), file=out, flush=True)


def _interrupted(suite: Suite, show: Lines, still_up: bool, run_dir: Path, tail: dict[str, str]) -> list[str]:
    """The summary of a run interrupted (Ctrl-C, SIGTERM, SIGHUP): what ended, what was running
    (stopped with an embedded fleet, by name; going on in a fleet that is up) and what had
    not started, as the end of a whole run says what ended; then where the report and the
    logs are and how to go on (fleet.control.interrupts). `tail`: the ends the embedded
    fleet recorded that the client did not see (the steps it stopped)."""
    outcomes = interrupts.merged(dict(show.outcomes), tail)
    stopped = interrupts.interrupted_of(outcomes)
    ended = interrupts.counts_clause(outcomes)
    left = max(0, show.total - len(outcomes))
    running = min(left, sum(show.counts.get(k, 0) for k in (S.RUNNING, S.SUSPENDED)))
    if still_up:
        rest = f"{running} running and {left - running} not started yet, which the fleet goes on with"
    else:
        unnamed = 0 if tail else running  # (the tail unread: the running ones as the client last saw them)
        rest = (f"{len(stopped) + unnamed} running, stopped (interrupted), and {left - unnamed} not run: run the "
                f"suite again to finish them (steps that succeeded are skipped)")
    head = (f"suite '{suite.name}': {ended} in {time.monotonic() - show.started:.1f} s; interrupted: {rest}"
            + show.of_others(ended=False))
    return [head, *interrupts.left_lines(run_dir, stopped, still_up)]


def _went_down(f: Fleet, show: Lines, run_dir: Path, e: FleetError) -> int:
    """The exit status of a `fleet run` whose fleet went silent or down (`e`) before its
    suite finished, said: 5 for one lost (its coordinator killed or silent, or every node
    gone: drain.NODES_LOST), 4 for a run directory that could not be written, else 1."""
    if f.alive():  # silent, not provably gone (another host's, or frozen): as the wait said
        print(f"\nfleet: {e}", file=sys.stderr)
        return EXIT_LOST
    kind, how = gone.how(run_dir, f.conn.host, f.conn.pid)
    if show.cause and kind not in (gone.STOPPED, gone.ITSELF):  # its end could not be recorded: not a crash
        print(f"\nfleet: the fleet in {run_dir} went down before the suite finished; {show.cause}, so how it "
              f"ended is not recorded there (`fleet down`, or its coordinator killed): "
              + _fix(show.cause, run_dir) + " and run the suite again to finish it", file=sys.stderr)
        return EXIT_FULL
    print(f"\nfleet: the fleet in {run_dir} went down before the suite finished" + (f": {how}" if how else "")
          + _again(kind, run_dir, embedded=f.path.name != connection.NAME), file=sys.stderr)
    lost = kind == gone.ITSELF and how.startswith(NODES_LOST)  # (a frozen coordinator's: its nodes left)
    return 1 if kind in (gone.STOPPED, gone.ITSELF) and not lost else EXIT_LOST


def _follow(f: Fleet, sub: Submission, suite: Suite, run_dir: Path, out, shard: str, followed: list,
            others: OtherShards | Callable[[], OtherShards] | None) -> int:
    others = (others() if callable(others) else others) or OtherShards()
    if not sub.steps:  # (a fleet that was up read the suite: none here, or none in the shard)
        print(f"suite '{suite.name}' has no steps" + (f" in shard {shard}" if shard else "") + "; nothing was started",
              file=out)
        return 0
    own, skipped = max(0, sub.steps - len(others)), max(0, sub.skipped - others.done)  # (others: counted apart)
    print(f"suite '{suite.name}': {counted(own, 'step')}" + (f", {skipped} already done" if skipped else "")
          + (f"; and {counted(len(others), 'step')} of other shards it waits for" if others else ""),
          file=out, flush=True)
    show = Lines(out, own, others.owner)
    followed.append(show)
    try:
        f.wait(sub, on_progress=show)
    except FleetError as e:
        return _went_down(f, show, run_dir, e)
    show.ended()
    counts: dict[str, int] = {}
    for o in show.outcomes.values():
        counts[o] = counts.get(o, 0) + 1
    print(f"suite '{suite.name}': " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
          + f" in {time.monotonic() - show.started:.1f} s" + show.of_others(), file=out, flush=True)
    for line in show.not_succeeded.lines(run_dir):  # (bounded: a few lines per kind, KINDS kinds)
        print(line, file=out, flush=True)
    outcomes, full = {**show.others_ended, **show.outcomes}, show.full  # (exit status: as before, of every step)
    bad = {s: o for s, o in outcomes.items() if o not in (S.SUCCEEDED, S.SKIPPED)}
    drained = sum(1 for o in outcomes.values() if o in DRAINED)
    if full:  # before the allocation's end: a resubmitted job would only drain again
        cause = show.cause or FULL
        # A fleet up stays drained: a later submission to it would drain at once.
        down_up = f", bring the fleet down and up again (fleet down --run-dir {run_dir}; fleet up: this one stays " \
            f"drained)" if f.path.name == connection.NAME else ""
        print(f"fleet: {cause}: {counted(drained, 'step')} interrupted or not started (no attempt used); "
              f"{_fix(cause, run_dir)}{down_up} and run the suite again to finish it (a step whose outcome could "
              f"not be recorded runs again)", file=sys.stderr, flush=True)
        return EXIT_FULL
    # Closed early (nothing left could end before the drain point), the allocation not over: said so.
    ended = f"closed early: {show.early}" if show.early else "the allocation ended before the suite did"
    if drained and len(show.too_long) == drained:  # another job like this one would not finish either
        print(f"fleet: {ended}, and no allocation as long as this one can finish it: the {counted(drained, 'step')} "
              f"left each {TOO_LONG} (first: {show.too_long[0]}); give the job more time, or the steps shorter "
              f"estimates", file=sys.stderr, flush=True)
        return 1
    if drained and show.nodes_lost:  # not the allocation's end: a fleet up again in it goes on (exit 5)
        print(f"fleet: {show.nodes_lost}: {counted(drained, 'step')} interrupted or not started (no attempt used)"
              + _again(gone.ITSELF, run_dir, embedded=f.path.name != connection.NAME), file=sys.stderr, flush=True)
        return EXIT_LOST
    if drained:
        print(f"fleet: {ended}: {counted(drained, 'step')} interrupted or not started; run the suite again (in the "
              f"next allocation) to finish it", file=sys.stderr, flush=True)
        return EXIT_DRAINED
    return 1 if bad else 0
