"""The `fleet` command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from fleet.control.checks import checked_suite, preload_hint
from fleet.core.problems import SuiteError
from fleet.core.units import format_memory, parse_memory

EXIT_INVALID = 2


class _Memory(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        try:
            return parse_memory(value if not str(value).isdigit() else int(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


MEMORY = _Memory()


def _session_index(ctx, param, value: int) -> int:
    if value == 0:  # counted from 1, or from the end with -1: 0 is never a session
        raise click.BadParameter("sessions count from 1 (the first) or from -1 (the last); 0 is none")
    return value


def _invalid(err: SuiteError) -> None:
    for p in err.problems:
        click.echo(f"error: {p}", err=True)
    n = len(err.problems)
    click.echo(f"{n} problem{'s' if n != 1 else ''} found; nothing was started", err=True)
    sys.exit(EXIT_INVALID)


def _allocation(nodes, cores, memory, gpus):
    from fleet.core.simulate import pretend_nodes
    if nodes is None and cores is None:
        return None
    if nodes is None or cores is None:
        raise click.UsageError("give both --nodes and --cores-per-node to describe an allocation")
    if memory is None:
        memory = cores * 2**30 * 4  # a conventional 4 GiB per core when not said
    return pretend_nodes(nodes, cores, memory, gpus or 0)


@click.group()
@click.version_option(package_name="fleet")
def main() -> None:
    """Run a suite of steps inside one batch allocation, forked from resident,
    pre-imported fork servers on every node."""


def allocation_options(f):
    f = click.option("--gpus-per-node", type=click.IntRange(0), default=None)(f)
    f = click.option("--memory-per-node", type=MEMORY, default=None,
                     help="e.g. 256GiB (default 4GiB per core)")(f)
    f = click.option("--cores-per-node", type=click.IntRange(1), default=None)(f)
    f = click.option("--nodes", type=click.IntRange(1), default=None)(f)
    return f


@main.command()
@click.argument("suite", type=click.Path(dir_okay=False))
@allocation_options
@click.option("--imports", is_flag=True,
              help="also import each call step's module (in one child process, with this Python, "
                   "environment and directory) and report a missing module or function")
def validate(suite, nodes, cores_per_node, memory_per_node, gpus_per_node, imports):
    """Check SUITE (and, given an allocation, that every step can fit it)."""
    alloc = _allocation(nodes, cores_per_node, memory_per_node, gpus_per_node)
    try:
        s, graph = checked_suite(suite, alloc, imports=imports)
    except SuiteError as e:
        _invalid(e)
    click.echo(f"{suite}: suite '{s.name}' is valid: {len(s.steps)} steps, run dir {s.run_dir}")
    hint = preload_hint(s)
    if hint:  # advice, on stderr; the suite is valid either way
        click.echo(hint, err=True)


@main.command()
@click.argument("suite", type=click.Path(dir_okay=False))
@click.option("--nodes", type=click.IntRange(1), required=True)
@click.option("--cores-per-node", type=click.IntRange(1), required=True)
@click.option("--memory-per-node", type=MEMORY, default=None, help="e.g. 256GiB (default 4GiB per core)")
@click.option("--gpus-per-node", type=click.IntRange(0), default=0)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def simulate(suite, nodes, cores_per_node, memory_per_node, gpus_per_node, as_json):
    """Run the real scheduler on a pretend allocation, each step taking its estimate."""
    from fleet.core.simulate import simulate as run_sim
    alloc = _allocation(nodes, cores_per_node, memory_per_node, gpus_per_node)
    try:
        s, graph = checked_suite(suite, alloc, check_inputs=False)
    except SuiteError as e:
        _invalid(e)
    r = run_sim(s.steps, graph, alloc)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=1, sort_keys=True))
        return
    total = nodes * cores_per_node
    click.echo(f"suite '{s.name}': {len(s.steps)} steps on {nodes} node(s) x {cores_per_node} cores"
               f" ({format_memory(alloc[0].memory)} each)")
    click.echo(f"  makespan      {r.makespan_s:10.1f} s")
    click.echo(f"  work          {r.work_s:10.1f} s (sum of the steps' durations; {r.core_s:.1f} core-s)")
    click.echo(f"  floor         {r.floor_s:10.1f} s (longest dependency chain)")
    click.echo(f"  utilization   {100 * r.utilization:9.1f} % of {total} cores")
    if r.makespan_s > 0:
        click.echo(f"  speedup       {r.work_s / r.makespan_s:10.2f} x against one at a time")


@main.command()
@click.argument("run_dir", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--trace", type=click.Path(dir_okay=False), default=None,
              help="write a Chrome trace-event JSON (Perfetto, chrome://tracing)")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), default=None,
              help="write one self-contained HTML page: timeline, utilization, summary")
@click.option("--session", type=int, default=-1, show_default=True, callback=_session_index,
              help="which fleet session of the stream (1 = the first, -1 = the last; not 0)")
def report(run_dir, as_json, trace, html_file, session):
    """What the run in RUN_DIR did, from its event stream (a run in progress too):
    wall time, the steps' own work and startup, the dependency floor, utilization,
    failures and what waiting steps waited for. See docs/report.md."""
    from fleet.report.command import run
    code, out, msgs = run(run_dir, as_json, trace, html_file, session)
    for m in msgs:
        click.echo(m, err=True)
    if out:
        click.echo(out)
    sys.exit(code)


# --- a running fleet ---------------------------------------------------------------------

def _default_run_dir() -> str:
    return os.environ.get("FLEET_RUN_DIR", ".")


@main.command()
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="where the fleet keeps fleet.json, events.jsonl and step directories "
                   "(default: $FLEET_RUN_DIR, else the current directory)")
@click.option("--local", is_flag=True, help="a local fleet on this machine, even inside a batch job")
@click.option("--machine", default=None, help="machine profile from agents/ (default: detected from the environment)")
@click.option("--nodes", type=click.IntRange(1), default=1, help="with --local: split this machine's cores into K pretend nodes")
@click.option("--preload", default="", help="modules every zygote imports once, comma-separated")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0,
              help="seconds to wait for every agent to join (more than 0)")
@click.option("--heartbeat", type=click.FloatRange(min=0.05), default=1.0, help="seconds between heartbeats")
@click.option("--heartbeat-timeout", type=click.FloatRange(min=0.5), default=10.0,
              help="seconds of silence after which an agent is lost (its steps are retried elsewhere)")
def up(run_dir, local, machine, nodes, preload, timeout, heartbeat, heartbeat_timeout):
    """Start a coordinator and one agent per node; return when all have joined."""
    from fleet.control.client import FleetError, up as start
    from fleet.site.profiles import ProfileError, detect, load
    run_dir = Path(run_dir or _default_run_dir()).resolve()
    name = "local" if local else (machine or detect())
    try:
        profile = load(name)
    except ProfileError as e:
        raise click.ClickException(str(e))
    try:
        conn = start(run_dir, nodes=nodes, machine=profile.name,
                     preload=tuple(m for m in preload.split(",") if m), timeout=timeout,
                     extra=["--heartbeat", str(heartbeat), "--timeout", str(heartbeat_timeout)])
    except FleetError as e:
        raise click.ClickException(str(e))
    click.echo(f"fleet up on {profile.name}: coordinator pid {conn.pid} on {conn.host}, run dir {run_dir}")


@main.command()
@click.option("--run-dir", type=click.Path(file_okay=False), default=None)
def down(run_dir):
    """Stop the coordinator, every agent and every step they started."""
    from fleet.control.client import down as stop
    from fleet.control.client import FleetError
    run_dir = Path(run_dir or _default_run_dir()).resolve()
    try:
        stopped = stop(run_dir)
    except FleetError as e:
        raise click.ClickException(str(e))
    if stopped:
        click.echo(f"fleet down: {run_dir}")
    else:
        click.echo(f"no fleet was up in {run_dir}")


@main.command()
@click.argument("suite", type=click.Path(dir_okay=False))
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="the fleet to use (default: $FLEET_RUN_DIR, else the suite's run_dir)")
@click.option("--force", is_flag=True, help="rerun steps that already succeeded")
@click.option("--serial", is_flag=True, help="one step at a time, in setup order")
@click.option("--nodes", type=click.IntRange(1), default=1,
              help="pretend nodes for an embedded local fleet (when none is up)")
@click.option("--shard", default="", metavar="I/N",
              help="run only the tasks shard I of N owns (task id mod N, or a stable hash)")
@click.option("--new-generation", is_flag=True, help="with --shard: accept a shard count other than the recorded one")
@click.option("--no-wait-foreign", is_flag=True,
              help="with --shard: refuse steps that depend on another shard's steps instead of waiting for them")
@click.option("--stale-after", type=click.FloatRange(min=0), default=600.0,
              help="embedded fleet: adopt another fleet's claim not refreshed for this many seconds")
@click.option("--max-attempts", type=click.IntRange(0), default=5,
              help="embedded fleet: attempts of a step across all fleets before it is stopped (0: no limit)")
@click.option("--heartbeat", type=click.FloatRange(min=0.05), default=1.0, help="embedded fleet: heartbeat interval")
@click.option("--heartbeat-timeout", type=click.FloatRange(min=0.5), default=10.0,
              help="embedded fleet: silence after which an agent is lost")
def run(suite, run_dir, force, serial, nodes, shard, new_generation, no_wait_foreign, stale_after,
        max_attempts, heartbeat, heartbeat_timeout):
    """Run SUITE on the fleet that is up (or an embedded local one); exit 0 only if
    every step succeeded, 1 if any did not, 2 if the suite is invalid."""
    from fleet.control.runner import run_suite
    try:
        s, _ = checked_suite(suite, check_inputs=False)
    except SuiteError as e:
        _invalid(e)
    target = Path(run_dir or os.environ.get("FLEET_RUN_DIR") or s.run_dir).resolve()
    if shard:
        from fleet.control.shard import ShardError, parse
        try:
            parse(shard)
        except ShardError as e:
            raise click.UsageError(str(e))
    options = ["--stale-after", str(stale_after), "--max-attempts", str(max_attempts),
               "--heartbeat", str(heartbeat), "--timeout", str(heartbeat_timeout)]
    sys.exit(run_suite(Path(suite).resolve(), s, target, force=force, serial=serial, nodes=nodes,
                       shard=shard, new_generation=new_generation, wait_foreign=not no_wait_foreign,
                       fleet_options=options))


@main.command()
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="the fleet's run directory (default: $FLEET_RUN_DIR, else the current directory)")
@click.option("--connection", "conn_file", type=click.Path(dir_okay=False), default=None,
              help="a copy of the fleet's connection file (fleet.json), mode 0600")
@click.option("--via", default=None, metavar="HOST:PORT", help="reach the coordinator through a forwarded port (ssh -L)")
@click.option("--ssh", "login", default=None, metavar="[USER@]LOGIN",
              help="build the tunnel through LOGIN with ssh (and read the connection file there if it is not here)")
@click.option("--ssh-option", multiple=True, help="extra ssh options, e.g. '-p 2222' or '-F config' (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--watch", is_flag=True, help="redraw in place until interrupted")
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), default=1.0,
              help="seconds between redraws with --watch (more than 0)")
def status(run_dir, conn_file, via, login, ssh_option, as_json, watch, interval):
    """What a fleet is doing: nodes, steps by state, running steps, recent failures."""
    import contextlib
    import time as _t
    from fleet.wire import connection as _conn
    from fleet.control.client import Client, FleetError, find
    from fleet.wire.messages import Status
    from fleet.control.statusview import render
    from fleet.control.tunnel import Tunnel, TunnelError, fetch_connection
    run_dir = Path(run_dir or _default_run_dir())
    try:
        if conn_file:
            conn = _conn.read(Path(conn_file))
        elif login and not _conn.path_in(run_dir.resolve()).exists():
            conn = fetch_connection(login, str(run_dir / _conn.NAME), list(ssh_option))
        else:
            conn = find(run_dir.resolve(), embedded=True)
            if conn is None:
                raise click.ClickException(f"no fleet is up in {run_dir.resolve()}")
    except (_conn.ConnectionError_, TunnelError, FleetError) as e:
        raise click.ClickException(str(e))
    with contextlib.ExitStack() as stack:
        endpoint = None
        if via:
            host, _, port = via.rpartition(":")
            if not host or not port.isdigit():
                raise click.UsageError("--via takes HOST:PORT")
            endpoint = f"tcp://{host}:{port}"
        elif login:
            try:
                endpoint = stack.enter_context(Tunnel(login, conn.client, list(ssh_option)))
            except TunnelError as e:
                raise click.ClickException(str(e))
        c = Client(conn, endpoint)
        stack.callback(c.close)
        try:
            while True:
                try:
                    st = c.ask(Status(), timeout=10).status
                except FleetError as e:
                    raise click.ClickException(str(e))
                if as_json:
                    click.echo(json.dumps(st, sort_keys=True))
                elif watch:
                    click.echo("\033[H\033[2J" + render(st), nl=True)
                else:
                    click.echo(render(st))
                if not watch:
                    return
                _t.sleep(interval)
        except KeyboardInterrupt:
            return


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--suite", "suite_path", type=click.Path(dir_okay=False), default=None,
              help="audit this suite's steps too (and judge success by its definitions)")
@click.option("--stale-after", type=click.FloatRange(min=0), default=600.0, help="seconds after which a claim is stale")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def audit(run_dir, suite_path, stale_after, as_json):
    """Every step of every suite submitted in RUN_DIR (all shards) as succeeded, failed,
    interrupted, stopped, running or missing; reruns (forced or changed) counted, and
    DUPLICATE for a step that succeeded twice with nothing changed. Exits 1 on missing
    or duplicated steps, else 0."""
    from fleet.report.audit import audit as do_audit
    steps = ()
    if suite_path:
        try:
            steps = checked_suite(suite_path, check_inputs=False)[0].steps
        except SuiteError as e:
            _invalid(e)
    a = do_audit(Path(run_dir), steps, stale_after)
    if as_json:
        click.echo(json.dumps(a.to_json(), indent=1, sort_keys=True))
    else:
        for sid, s in a.steps.items():
            extra = f"  ({s.reason})" if s.reason else ""
            rerun = f"  rerun {s.reruns} time(s)" if s.reruns else ""
            dup = (f"  DUPLICATE: {s.successes} successful attempts, {s.duplicates} with nothing changed"
                   if s.duplicates else "")
            click.echo(f"{s.status:<11} {sid}{extra}{rerun}{dup}")
        counts = a.to_json()["counts"]
        click.echo((", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no steps")
                   + (f"; {len(a.reruns)} rerun" if a.reruns else "")
                   + (f"; {len(a.duplicates)} DUPLICATE" if a.duplicates else ""))
    sys.exit(0 if a.ok else 1)
