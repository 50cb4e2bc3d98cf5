"""What to do about a coordinator of another host that this host does not reach: the
advice fits the command that asked (only `fleet status` can go through ssh itself)."""

from __future__ import annotations

from fleet.wire import connection


def command_name() -> str:
    """The `fleet` subcommand running (status, run, cancel, ...), "" outside the CLI."""
    try:
        import click
    except ImportError:
        return ""
    ctx = click.get_current_context(silent=True)
    return (ctx.info_name or "") if ctx is not None and ctx.parent is not None else ""


def unreachable(conn: connection.Connection) -> str:
    """" (it runs on HOST, pid N, which this host may not reach: ...)": for `fleet status`
    its --ssh and --via; for any other command (run, cancel, ...) running it there, as
    `fleet down` says (before 2026-12-06 every command named status's options)."""
    cmd = command_name()
    there = ("`fleet status --ssh LOGIN` or `--via HOST:PORT` go through ssh" if cmd == "status" else
             f"run it there: ssh {conn.host} fleet {cmd or 'COMMAND'} --run-dir {conn.run_dir}")
    return f" (it runs on {conn.host}, pid {conn.pid}, which this host may not reach: {there})"
