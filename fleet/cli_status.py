"""`fleet status`'s dealings with the fleet it shows: which connection to ask, and how a
watch says that the fleet went down."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


def status_connection(run_dir: Path, conn_file, login, ssh_option, as_json):
    """(The connection to ask, the file it is kept in here or None): a given file, one
    fetched over ssh, or a live fleet of run_dir (whose file goes when the fleet does),
    inside a batch job this job's if one is up."""
    from fleet.wire import connection as _conn
    from fleet.control.client import FleetError, live
    from fleet.control.tunnel import TunnelError, fetch_connection
    try:
        if conn_file:
            return _given(Path(conn_file)), None
        here = run_dir.resolve()
        if login and not (_conn.path_in(here).exists() or any(here.glob("fleet-*.json"))):
            return fetch_connection(login, str(run_dir), list(ssh_option)), None
        fleets = live(run_dir.resolve())
    except (_conn.ConnectionError_, TunnelError, FleetError) as e:
        raise click.ClickException(str(e))
    if not fleets:
        _none_up(run_dir.resolve(), as_json)
    # Inside a batch job, this job's fleet first (the one its fleet run and cancel act on:
    # fleet.control.jobfleets); before 2026-12-07 another job's could be shown instead.
    from fleet.control import jobfleets
    mine, theirs = jobfleets.split(fleets, False)
    fleets = mine + theirs
    if len(fleets) > 1 and not as_json:
        others = ", ".join(str(c.pid) for _, c in fleets[1:])
        whose = ", this job's" if mine and theirs else ""
        click.echo(f"fleet: {len(fleets)} fleets are up in {run_dir.resolve()}; showing coordinator pid "
                   f"{fleets[0][1].pid}{whose} (the others: pid {others})", err=True)
    return fleets[0][1], fleets[0][0]


def via_endpoint(via: str | None, login: str | None) -> str | None:
    """--via HOST:PORT as the endpoint to ask (None without it); a usage error (exit 2)
    for one that is not HOST:PORT with a port of 1 to 65535, or given with --ssh (which
    builds a tunnel of its own: before 2026-12-06 --ssh was then ignored, unsaid, and a
    port out of range was asked for 10 s)."""
    if not via:
        return None
    if login:
        raise click.UsageError("--ssh and --via: give one. --ssh LOGIN builds the tunnel itself (and reads the "
                               "connection file there if it is not here); --via HOST:PORT uses one already built "
                               "(with --connection FILE for a fleet whose file is not here)")
    host, _, port = via.rpartition(":")
    if not host or not port.isdigit() or any(c.isspace() for c in host):
        raise click.BadParameter(f"{via!r}: give HOST:PORT", param_hint="--via")
    if not 1 <= int(port) <= 65535:
        raise click.BadParameter(f"{via!r}: the port must be 1 to 65535", param_hint="--via")
    return f"tcp://{host}:{int(port)}"


def _none_up(run_dir: Path, as_json: bool) -> None:
    """No fleet that answers is up in run_dir: say so (exit 1), or, if a coordinator of
    this host has no connection file yet, what it is doing (before 2026-12-06: "no fleet
    is up" while one came up). With --json one object: {"error": ..., "coming_up": ...}."""
    from fleet.control import starting
    early = starting.coordinators(run_dir)
    if not early:
        from fleet.control.below import where  # (a `fleet run` of a suite here embeds its fleet in runs/<name>)
        raise click.ClickException(f"no fleet is up in {run_dir}{where(run_dir, 'status')[0]}")
    s = early[0]
    if starting.recorded_up(run_dir, s.pid):
        state, said = "up", (f"the fleet up in {run_dir} (coordinator pid {s.pid}) has no connection file fleet "
                             f"status can use (removed?); fleet down --run-dir {run_dir} stops it")
    elif s.holds or s.lease.get("shared"):
        state, said = "coming up", (f"a fleet is coming up in {run_dir} (coordinator pid {s.pid}; waiting for its "
                                    f"agents): fleet status answers once it is up")
    else:
        state, said = "waiting", (f"a fleet is waiting for the lease on {run_dir} (coordinator pid {s.pid}; held "
                                  f"by pid {s.lease.get('pid')} on host {s.lease.get('host')})")
    if as_json:
        click.echo(json.dumps({"error": said, "coming_up": {"pid": s.pid, "state": state}}))
    click.echo(f"Error: {said}", err=True)
    sys.exit(1)


def _given(path: Path):
    """The connection of a --connection file; one of this host whose coordinator is gone
    is said at once, by its pid, as for a run directory's (before 2026-12-06 it was asked
    and said not to answer after 10 s). The file is the user's: it is left alone."""
    import socket
    from fleet.wire import connection as _conn
    from fleet.control import identity
    conn = _conn.read(path)
    if conn.host == socket.gethostname() and identity.gone(conn.pid, conn.run_dir, conn.started):
        raise click.ClickException(f"the fleet of {path} is down: its coordinator, pid {conn.pid} on this host, "
                                   f"is gone (a copy of {conn.run_dir}'s connection file, from before its fleet "
                                   f"went down?)")
    return conn


def status_fleet(stack, run_dir: Path, conn, via: str | None, tun):
    """The fleet `fleet status` asks, at `via` or through the tunnel `tun` (entered on
    `stack`, as the fleet's closing is), else at its own address. Through a tunnel, a
    request ends as soon as its ssh exits, saying so, not blaming the fleet after 10 s."""
    from fleet.control.api import Fleet, FleetError
    from fleet.control.tunnel import TunnelError
    try:
        endpoint = stack.enter_context(tun) if tun is not None else via
        f = Fleet(run_dir, conn, endpoint=endpoint)
    except (TunnelError, FleetError) as e:
        raise click.ClickException(str(e))
    stack.callback(f.close)
    if tun is not None:
        f.client.broken = tun.closed
    elif via:  # (a bare "did not answer" said nothing of the likely why: the forward)
        f.client.via_hint = (f" (through --via {via.removeprefix('tcp://')}: is the tunnel up there, and does it "
                             f"lead to this fleet's coordinator, {conn.client.removeprefix('tcp://')} on {conn.host}? "
                             f"Nothing listening there, or another fleet's tunnel, does not answer)")
    return f


def gone_there(login: str, run_dir: Path, ssh_option, conn) -> str:
    """Why the fleet watched through `ssh login` is down, read there once its requests
    go unanswered: its connection file is gone, or names another coordinator ("": it is
    there, or ssh cannot tell)."""
    from fleet.control.tunnel import NoFleetThere, TunnelError, fetch_connection
    try:
        now = fetch_connection(login, str(run_dir), list(ssh_option))
    except NoFleetThere:
        return f"its connection file is gone from {run_dir} on {login}"
    except TunnelError:
        return ""
    if (now.pid, now.started) != (conn.pid, conn.started):
        return f"the connection file in {run_dir} on {login} names another coordinator, pid {now.pid}"
    return ""


def said_down(why: str, as_json: bool, crashed: bool) -> None:
    """A watch's last word: the fleet is down, and why, on stderr (with --json also one
    JSON object on stdout: {"down": ...}, or {"error": ...} when it crashed). A fleet
    taken down (`fleet down`, a `fleet run` that ended) ends the watch with 0; one whose
    coordinator is gone with its connection file still there (killed, crashed) with 1,
    so that a script watching can tell the two apart."""
    said = f"the fleet is down ({why})"
    if as_json:
        click.echo(json.dumps({"error" if crashed else "down": said}))
    click.echo(f"fleet: {said}", err=True)
    if crashed:
        sys.exit(1)


def refuse_lone_options(ssh_option, login, watch) -> None:
    """A usage error for an option given without the one it goes with (before 2026-12-07
    taken and ignored): --ssh-option without --ssh, --interval without --watch."""
    import click
    from click.core import ParameterSource
    if ssh_option and not login:
        raise click.UsageError("--ssh-option goes with --ssh: without it, it means nothing")
    if not watch and click.get_current_context().get_parameter_source("interval") is ParameterSource.COMMANDLINE:
        raise click.UsageError("--interval goes with --watch: without it, it means nothing")
