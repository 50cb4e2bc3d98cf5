"""`fleet up` and `fleet down` beside fleet/cli.py: the options that govern a coordinator
(`fleet up`'s, and `fleet run`'s embedded fleet's), starting a fleet so that an
interrupted start leaves nothing behind, and stopping every fleet of a run directory,
those still coming up too."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import sys
from pathlib import Path

import click

from fleet.cli_options import end_args, end_options
from fleet.cli_simulate import coordinator_args, reservation_options
from fleet.control import window_option
from fleet.control.seconds_option import Seconds

EXIT_INVALID = 2
_ADVERTISE = "fleet.advertise"
_OWN_CORES = "fleet.coordinator_cores"


def _keep_advertise(ctx, param, value):
    ctx.meta[_ADVERTISE] = value
    return value


def advertise_option(f):
    """--advertise ADDR (else $FLEET_ADVERTISE): what agents and clients connect to."""
    return click.option("--advertise", default=None, metavar="ADDR", envvar="FLEET_ADVERTISE",
                        expose_value=False, callback=_keep_advertise,
                        show_default="$FLEET_ADVERTISE, else the machine profile's, else this host's address; "
                                     "127.0.0.1 for a local fleet",
                        help="the address, host name or network interface (e.g. ib0) agents and clients reach "
                             "the coordinator at (a local fleet listens there only)")(f)


def advertised() -> str | None:
    """--advertise (or $FLEET_ADVERTISE) as given, or None."""
    return click.get_current_context().meta.get(_ADVERTISE)


def _keep_own_cores(ctx, param, value):
    ctx.meta[_OWN_CORES] = value
    return value


def own_cores_option(f):
    """--coordinator-cores N: cores of its node the coordinator keeps (fleet.site.owncores)."""
    return click.option("--coordinator-cores", type=click.IntRange(0), default=0, metavar="N", expose_value=False,
                        callback=_keep_own_cores, show_default=True,
                        help="in a batch job, cores of the first node the coordinator keeps for itself (pinned "
                             "there; that node's agent offers the others): for big allocations of short steps")(f)


def own_cores() -> int:
    """--coordinator-cores as given (0: none)."""
    return click.get_current_context().meta.get(_OWN_CORES) or 0


def coordinator_args_of(heartbeat, heartbeat_timeout, stale_after, max_attempts, **end) -> list[str]:
    """The coordinator's command line for the coordinator options given (a usage error
    for a heartbeat timeout that would lose agents between their heartbeats)."""
    from fleet.control.liveness import TIMEOUT_BEATS
    if heartbeat_timeout < TIMEOUT_BEATS * heartbeat:
        # (a zygote stops its steps after half the timeout without its agent's tick, one a
        # heartbeat: under three heartbeats, one late tick ends a well node's steps)
        raise click.UsageError(f"--heartbeat-timeout {heartbeat_timeout:g} is less than {TIMEOUT_BEATS} heartbeats "
                               f"(--heartbeat {heartbeat:g}): agents would be lost while they are well; give a "
                               f"timeout of at least {TIMEOUT_BEATS * heartbeat:g} s")
    advertise = advertised()
    return ["--heartbeat", str(heartbeat), "--timeout", str(heartbeat_timeout),
            "--stale-after", str(stale_after), "--max-attempts", str(max_attempts)] + end_args(**end) \
        + coordinator_args() + window_option.args() + (["--advertise", advertise] if advertise else []) \
        + (["--coordinator-cores", str(own_cores())] if own_cores() else [])


def coordinator_options(f):
    """The options that govern a coordinator: `fleet up`'s, and `fleet run`'s embedded one."""
    f = end_options(f)  # the allocation's end (fleet.cli_options)
    f = reservation_options(f)
    f = advertise_option(f)
    f = own_cores_option(f)
    f = click.option("--heartbeat-timeout", type=Seconds(0.5), default=10.0,
                     help="seconds of silence after which an agent is lost (its steps are retried elsewhere)")(f)
    f = click.option("--heartbeat", type=Seconds(0.05), default=1.0,
                     help="seconds between heartbeats")(f)
    f = click.option("--max-attempts", type=click.IntRange(0), default=5,
                     help="attempts of a step's current definition that ended without success (across "
                          "fleets, since it last succeeded or was forced) before it is stopped (0: no limit)")(f)
    f = click.option("--stale-after", type=Seconds(0), default=600.0,
                     help="seconds after which another fleet's unrefreshed claim on a step (or lease on the "
                          "run directory) is adopted")(f)
    return window_option.hold_option(window_option.option(f))


def with_job(extra: list[str]) -> list[str]:
    """The coordinator's command line `extra` (coordinator_args_of) with the batch job's
    answer, asked once here, after the other checks (fleet.control.preflight): whether
    it is live and when it ends, passed on so that the coordinator does not ask again.
    Exit 2, nothing started, for a job that has ended (its variables left in a shell) or,
    unless --end or --walltime was given, whose end is already past."""
    from fleet.control import preflight
    why, asked = preflight.asked_job("--end" in extra)
    if why:
        click.echo(f"fleet: {why}; nothing was started", err=True)
        sys.exit(EXIT_INVALID)
    if "--drain-before" in extra and "--end" not in extra + asked:  # (before 2026-12-07 said in coordinator.log only)
        click.echo("fleet: warning: --drain-before is given, but no end of the allocation is known (not in a batch "
                   "job, or the batch system gave none): nothing drains; give --end or --walltime", err=True)
    return extra + asked


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP while a fleet was starting."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def interruptible(saying: str):
    """SIGINT, SIGTERM and SIGHUP raise Interrupted, the first of them only (after
    `saying` and the signal's name on stderr, at once): later ones are ignored, so the
    clean-up the first one began (stopping what was started, with a deadline) is not
    cut short. A signal this process was started ignoring (nohup's SIGHUP) stays ignored."""
    got: list[int] = []

    def handler(signum, frame):
        if not got:
            got.append(signum)
            # (os.write: a buffered stream may be in the middle of a write of its own)
            os.write(2, f"\n{saying} ({signal.Signals(signum).name})\n".encode())
            raise Interrupted(signum)

    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:
            old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def start(run_dir: Path, profile, nodes: int | None, preload: str, timeout: float, extra: list[str]) -> None:
    """`fleet up`: start the fleet (`nodes`: --nodes, None if not given) and say where
    it is. Interrupted before it is up, it stops what it started (fleet.control.client.up)
    and exits 128 + the signal's number (130 for Ctrl-C). A warning signal (SIGUSR1,
    caught by the caller: fleet.control.warnsignal) that came while the fleet came up
    goes to its coordinator once it is up, which drains (before 2026-12-07 it ended
    `fleet up` with 138 and left the coordinator it had started running)."""
    from fleet.control import loopback, preflight
    from fleet.control.client import FleetError, RunDirError, RunDirFull, up
    modules = tuple(m.strip() for m in preload.split(",") if m.strip())
    for m in modules:
        if not all(part.isidentifier() for part in m.split(".")):
            raise click.BadParameter(f"{m!r} is not a module name (dotted identifiers, comma-separated)",
                                     param_hint="--preload")
    why = preflight.problem(profile, nodes, advertised(), own_cores=own_cores())
    if why:  # found before a coordinator starts (fleet.control.preflight)
        click.echo(f"fleet: {why}; nothing was started", err=True)
        sys.exit(EXIT_INVALID)
    extra = with_job(extra)
    if warn := loopback.here(profile, advertised()):  # (before 2026-12-07: only after --timeout, without a word)
        click.echo(f"fleet up: warning: {warn}", err=True)
    try:
        with interruptible(f"fleet up: interrupted; stopping the fleet it was starting in {run_dir}"):
            conn = up(run_dir, nodes=nodes or 1, machine=profile.name, preload=modules,
                      timeout=timeout, extra=extra)
    except RunDirError as e:
        click.echo(f"fleet: {e}", err=True)
        sys.exit(4 if isinstance(e, RunDirFull) else EXIT_INVALID)  # (4: as fleet run's full disk)
    except FleetError as e:
        raise click.ClickException(str(e))
    except KeyboardInterrupt as e:
        click.echo("fleet up: the fleet it was starting is stopped", err=True)
        sys.exit(128 + (e.signum if isinstance(e, Interrupted) else signal.SIGINT))
    click.echo(f"fleet up on {profile.name}: coordinator pid {conn.pid} on {conn.host}, run dir {run_dir}")
    _warning_to(conn)
    _say_no_cores(run_dir, conn)
    if os.environ.get("FLEET_RUN_DIR") != str(run_dir):
        click.echo(f"fleet run, status and down find it from {run_dir}; from elsewhere: "
                   f"export FLEET_RUN_DIR={shlex.quote(str(run_dir))}")


def _warning_to(conn) -> None:
    """The warning signal that came while the fleet came up, to its coordinator (said on
    stderr); from now on `fleet up` is done with it: SIGUSR1 is back to its default."""
    from fleet.control import warnsignal
    came = warnsignal.came()
    warnsignal.pass_to(conn)
    warnsignal.release()
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    if came:
        where = ("passed to its coordinator, which drains" if conn.host == socket.gethostname()
                 else f"not passed on: its coordinator runs on {conn.host} (signal it there)")
        click.echo(f"fleet up: the warning signal (SIGUSR1) came while the fleet came up; {where}", err=True)


def _say_no_cores(run_dir: Path, conn) -> None:
    """Name (stderr) the nodes that came up offering no core for steps, their cores all
    held back by the machine profile (fleet.control.nocores: the fleet is up, its other
    nodes run steps), as its coordinator says when asked; nothing if it cannot be asked
    (its log says it too). Before 2026-12-07 `fleet up` said nothing of them."""
    from fleet.control.api import Fleet
    from fleet.control.client import FleetError
    from fleet.core.units import counted
    import zmq
    try:
        with Fleet(run_dir, conn) as fleet:
            st = fleet.status(timeout=10.0)
    except (FleetError, TimeoutError, ValueError, OSError, zmq.ZMQError):
        return  # (the warning is extra: the coordinator's log and fleet status say it too)
    total = st.get("nodes_summary", {})
    if not total.get("no_cores"):
        return
    rows = [r for r in st.get("nodes", []) if str(r.get("attention", "")).startswith("no core")]
    n = total["no_cores"]
    click.echo(f"fleet up: warning: {n} of its {counted(total.get('nodes', 0), 'node')} "
               f"{'offers' if n == 1 else 'offer'} no core for steps (steps run on the others):", err=True)
    for r in rows:
        click.echo(f"  {r['node']}: {r['attention']}", err=True)
    if n > len(rows):
        click.echo(f"  and {n - len(rows)} more: fleet status --nodes lists them", err=True)


def stop_all(run_dir: Path, any_job: bool = False) -> None:
    """`fleet down` (_stop_all). Interrupted (Ctrl-C) it says so and exits 130: a fleet
    it asked to stop goes on stopping, its steps their grace (before 2026-12-07 click's
    "Aborted!" and exit 1, which said nothing of that)."""
    try:
        _stop_all(run_dir, any_job)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (what is left is one line and the exit)
        click.echo(f"\nfleet down: interrupted; a fleet it asked to stop goes on stopping (its steps get their "
                   f"grace): fleet status --run-dir {run_dir} to see it, fleet down again to wait for it", err=True)
        sys.exit(130)


def _stop_all(run_dir: Path, any_job: bool = False) -> None:
    """`fleet down`: every fleet of run_dir. Those with no connection file yet (coming
    up, or waiting for the lease: fleet.control.starting) first: a fleet up that is
    stopped gives its lease back, and one of them would take it. A fleet whose file
    others can read (chmod -R g+rX), that cannot be read (damaged) or that lost its file
    is found through its lease, and stopped, saying so (before 2026-12-06 such a fleet
    could not be stopped). Inside a batch job, another job's fleet is left alone, one
    line saying so, unless any_job (fleet.control.jobfleets; before 2026-12-07 a job's
    EXIT trap stopped another job's fleet at work on the same run directory); so is
    one whose file others can read, unwarned (before 2026-12-07 fleet down warned that
    it stopped it, left it, and failed advising itself)."""
    from fleet.control import jobfleets, starting
    from fleet.control.api import Fleet
    from fleet.control.client import FleetError, live
    from fleet.wire.connection import NAME, another_job
    exposed: list = []
    try:
        found = live(run_dir, exposed=exposed)
        mine, theirs = jobfleets.split(found, any_job)
        coming = starting.coordinators(run_dir, {conn.pid for _, conn in found})
        early = [s for s in coming if any_job or not another_job(s.job, s.cluster)]
        # An exposed file of another job's fleet, left alone, is neither warned of nor an error.
        kept = {s.name for s in coming if s not in early} - {s.name for s in early}
        exposed = [(path, why) for path, why in exposed if path.name not in kept]
        _warn_exposed(exposed, early)
        for s in early:
            what = s.describe(run_dir)
            starting.stop(s.pid)
            click.echo(f"fleet down: {run_dir} ({what})")
        for path, conn in mine:
            Fleet(run_dir, conn, path).down()
            what = "" if path.name == NAME else f" (a fleet run's embedded fleet, coordinator pid {conn.pid})"
            click.echo(f"fleet down: {run_dir}{what}")
    except FleetError as e:
        raise click.ClickException(str(e))
    for path, conn in theirs:
        click.echo(jobfleets.left_alone(conn, path, "fleet down"))
    for s in coming:
        if s not in early:
            click.echo(f"fleet down: left alone: {s.job}'s fleet ({s.describe(run_dir)}); "
                       f"`fleet down {jobfleets.ANY_JOB}` stops it too")
    if theirs or len(early) < len(coming):
        if note := jobfleets.this_job_ended("fleet down"):
            click.echo(note)
    left = [why for path, why in exposed if path.exists()]
    if left:  # (no coordinator of this host holds the lease: another host's, or none)
        raise click.ClickException(left[0])
    if not found and not coming and not exposed:  # (exit 0, with none below: a clean-up may say it twice)
        _none_up(run_dir)


def _warn_exposed(exposed: list, early: list) -> None:
    """A word on each connection file fleet down could not use, before stopping its
    fleet through the run directory's lease."""
    for path, _ in exposed:
        if _mode(path) != "?" and int(_mode(path), 8) & 0o077:
            click.echo(f"fleet down: warning: {path} was readable or writable by others (mode "
                       f"{_mode(path)}): the fleet's keys were exposed; stopping it through its lease", err=True)
        elif early:
            click.echo(f"fleet down: warning: {path} cannot be read as a connection file (damaged?); stopping "
                       f"the fleet through the run directory's lease", err=True)


def _none_up(run_dir: Path) -> None:
    """`fleet down` found no fleet in run_dir: say so (exit 0), or, when fleets run
    below it, name them (exit 1)."""
    from fleet.control import starting
    from fleet.control.below import where
    missing = "" if run_dir.is_dir() else " (no such directory)"
    said = f"no fleet was up in {run_dir}{missing}{starting.foreign_lease(run_dir)}"
    # ...but not when fleets run below it (a `fleet run`'s embedded one in runs/<name>):
    # nothing the user meant to stop was stopped. They are named, not stopped.
    below, n = where(run_dir, "down")
    if n:
        raise click.ClickException(said + below)
    click.echo(said)


def _mode(path: Path) -> str:
    try:
        return f"{path.stat().st_mode & 0o7777:04o}"
    except OSError:
        return "?"
