"""The `fleet` command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from fleet.cli_simulate import simulate_options
from fleet.cli_up import coordinator_args_of, coordinator_options, start, stop_all, with_job
from fleet.control.checks import checked_suite, preload_hint
from fleet.core.problems import SuiteError
from fleet.core.units import counted
from fleet import cli_streams
from fleet.cli_status import gone_there, said_down, status_connection, status_fleet, via_endpoint
from fleet.cli_options import (CORES, GPUS, INTERVAL, MEMORY, NODES, allocation, assumed, drain_margin,
                              simulate_end)
from fleet.control.seconds_option import Seconds

EXIT_INVALID = 2


def _session_index(ctx, param, value: int) -> int:
    if value == 0:  # counted from 1, or from the end with -1: 0 is never a session
        raise click.BadParameter("sessions count from 1 (the first) or from -1 (the last); 0 is none")
    return value


def _invalid(problems: list, as_json: bool = False) -> None:
    """Every problem (a Problem, or a line naming file, step and field), exit 2; with
    `as_json` also one JSON object on stdout, {"error": ..., "problems": [...]}, as a
    --json command's other errors (_JsonErrors)."""
    n = len(problems)
    said = f"{n} problem{'s' if n != 1 else ''} found; nothing was started"
    if as_json:
        click.echo(json.dumps({"error": "\n".join([*(str(p) for p in problems), said]),
                               "problems": [str(p) for p in problems]}))
    for p in problems:
        click.echo(f"error: {p}", err=True)
    click.echo(said, err=True)
    sys.exit(EXIT_INVALID)


class _JsonErrors(click.Command):
    """With --json, an error is also one JSON object on stdout ({"error": ...}), for the
    script that reads it; the usual message still goes to stderr. Exit nonzero."""

    def make_context(self, info_name, args, parent=None, **extra):
        as_json = "--json" in args  # before parsing: a bad option value fails the parse itself
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as e:
            if not as_json:
                raise
            _json_error(e)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.ClickException as e:
            if not ctx.params.get("as_json"):
                raise
            _json_error(e)


def _json_error(e: click.ClickException) -> None:
    click.echo(json.dumps({"error": e.format_message()}))
    e.show()
    sys.exit(e.exit_code)


# Every option of every command shows its default in --help (inherited by the commands).
@click.group(context_settings={"show_default": True})
@click.version_option(package_name="fleet")
def main() -> None:
    """Run a suite of steps inside one batch allocation, forked from resident,
    pre-imported fork servers on every node."""
    cli_streams.tolerant()


def allocation_options(f):
    f = click.option("--gpus-per-node", type=GPUS, default=None, show_default="0",
                     help="GPUs on each node of the allocation")(f)
    f = click.option("--memory-per-node", type=MEMORY, default=None, show_default="4GiB per core",
                     help="memory of each node, e.g. 256GiB")(f)
    f = click.option("--cores-per-node", type=CORES, default=None, show_default="no allocation",
                     help="cores of each node (with --nodes: check that every step fits)")(f)
    f = click.option("--nodes", type=NODES, default=None, show_default="no allocation",
                     help="nodes of the allocation (with --cores-per-node)")(f)
    return f


@main.command()
@click.argument("suite", type=click.Path(dir_okay=False))
@allocation_options
@click.option("--imports", is_flag=True,
              help="also import the preload modules (as a zygote: one that starts a thread is refused) and "
                   "each call step's module (in one child process, with this Python and environment, in the "
                   "directory the agents of the fleet `fleet run` would use started in) and report a missing "
                   "module or function, and args a call step's function does not take or lacks")
def validate(suite, nodes, cores_per_node, memory_per_node, gpus_per_node, imports):
    """Check SUITE (and, given an allocation, that every step can fit it)."""
    alloc = allocation(nodes, cores_per_node, memory_per_node, gpus_per_node)
    where = None
    if imports:
        from fleet.control.checks import suite_head
        from fleet.control.importdir import for_validate
        try:
            head = suite_head(suite).run_dir
        except SuiteError:
            head = None  # (its problems are said below)
        where = for_validate(head)
        click.echo(where.line())  # (before the problems: which directory a module was not found from)
    try:
        s, graph = checked_suite(suite, alloc, imports=imports, own_run_dir=True,
                                 imports_from=where.path if where else None,
                                 fit_notes=assumed(cores_per_node, memory_per_node, gpus_per_node))
    except SuiteError as e:
        _invalid(e.problems)
    click.echo(f"{suite}: suite '{s.name}' is valid: {counted(len(s.steps), 'step')}, run dir {s.run_dir}")
    hint = preload_hint(s)
    if hint:  # advice, on stderr; the suite is valid either way
        click.echo(hint, err=True)


@main.command(cls=_JsonErrors)
@click.argument("suite", type=click.Path(dir_okay=False))
@click.option("--nodes", type=NODES, required=True, help="nodes of the pretend allocation")
@click.option("--cores-per-node", type=CORES, required=True, help="cores of each node")
@click.option("--memory-per-node", type=MEMORY, default=None, show_default="4GiB per core",
              help="memory of each node, e.g. 256GiB")
@click.option("--gpus-per-node", type=GPUS, default=None, show_default="0", help="GPUs on each node")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (an error too: {\"error\": ...})")
@simulate_end
@simulate_options
def simulate(suite, nodes, cores_per_node, memory_per_node, gpus_per_node, as_json, walltime, drain_before):
    """Run the real scheduler on a pretend allocation, each step taking its estimate."""
    from fleet.cli_simulate import refuse_contradictions, show
    refuse_contradictions()
    margin = drain_margin(walltime, drain_before)
    alloc = allocation(nodes, cores_per_node, memory_per_node, gpus_per_node)
    try:
        s, graph = checked_suite(suite, alloc, check_inputs=False,
                                 fit_notes=assumed(cores_per_node, memory_per_node, gpus_per_node))
    except SuiteError as e:
        _invalid(e.problems, as_json)
    show(s, graph, alloc, nodes, cores_per_node, as_json, end_s=walltime, drain_before_s=margin)


@main.command(cls=_JsonErrors)
@click.argument("run_dir", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (an error too: {\"error\": ...})")
@click.option("--trace", type=click.Path(dir_okay=False), default=None, show_default="none",
              help="write a Chrome trace-event JSON (Perfetto, chrome://tracing)")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), default=None, show_default="none",
              help="write one self-contained HTML page: timeline, utilization, summary")
@click.option("--session", type=int, default=-1, show_default=True, callback=_session_index,
              help="which fleet session of the stream (1 = the first, -1 = the last; not 0)")
def report(run_dir, as_json, trace, html_file, session):
    """What the run in RUN_DIR did, from its event stream (a run in progress too):
    wall time, the steps' own work and startup, the dependency floor, utilization,
    failures and what waiting steps waited for. See docs/report.md in fleet's source
    (its repository or sdist)."""
    from fleet.report.command import run
    code, out, msgs = run(run_dir, as_json, trace, html_file, session)
    if code and as_json and not out:  # (as `fleet status --json` and `fleet audit --json` say theirs)
        out = json.dumps({"error": "; ".join(msgs)})
    for m in msgs:
        click.echo(m, err=True)
    if out:
        click.echo(out)
    sys.exit(code)


# --- a running fleet ---------------------------------------------------------------------
#
# Where a fleet lives, the same for up, run, status and down: --run-dir, else
# $FLEET_RUN_DIR, else the current directory. `fleet run` alone goes on: without either,
# it uses a fleet that is up in the current directory, and only failing that the suite's
# own run_dir (where it also finds a fleet that is up there, or embeds one).

RUN_DIR_DEFAULT = "$FLEET_RUN_DIR, else the current directory"


def _run_dir(given: str | None) -> Path:
    from fleet.control import rundir
    from fleet.control.dirlimits import run_dir_too_long, shown
    run_dir = Path(given).resolve() if given else rundir.default()
    why = run_dir_too_long(run_dir)
    if why:
        raise click.ClickException(f"run directory {shown(run_dir)} cannot be used: {why}")
    return run_dir


def _run_dir_for_suite(given: str | None, suite) -> tuple[Path, bool]:
    from fleet.control import rundir
    from fleet.control.client import FleetError
    try:
        return rundir.for_suite(given, suite.run_dir)
    except FleetError as e:
        raise click.ClickException(str(e))


@main.command()
@click.option("--run-dir", type=click.Path(file_okay=False), default=None, show_default=RUN_DIR_DEFAULT,
              help="where the fleet keeps fleet.json, events.jsonl and step directories")
@click.option("--local", is_flag=True, help="a local fleet on this machine, even inside a batch job")
@click.option("--machine", default=None, show_default="detected from the environment",
              help="machine profile from agents/")
@click.option("--nodes", type=click.IntRange(1), default=None, show_default="1; in a batch job, the job's nodes",
              help="with --local: split this machine's cores and GPUs into K pretend nodes (in a batch job the fleet "
                   "runs on every node of the job: K other than their number is refused)")
@click.option("--preload", default="", show_default="none", help="modules every zygote imports once, comma-separated")
@click.option("--timeout", type=Seconds(0, above=True), default=120.0,
              help="seconds to wait for every agent to join (more than 0)")
@coordinator_options
def up(run_dir, local, machine, nodes, preload, timeout, stale_after, max_attempts, heartbeat, heartbeat_timeout,
       **end):
    """Start a coordinator and one agent per node; return when all have joined.
    Interrupted before that (Ctrl-C, SIGTERM, SIGHUP), it stops what it started and
    exits 128 + the signal's number (130 for Ctrl-C). The batch system's warning signal
    (SIGUSR1) meanwhile is kept and passed to the coordinator once it is up (fleet.cli_up.start)."""
    from fleet.control import warnsignal
    warnsignal.catch()  # from the start: its default action ended `fleet up` (138), its coordinator left up
    from fleet.site.profiles import ProfileError, detect, detected_by, load
    run_dir = _run_dir(run_dir)
    if local and machine not in (None, "local"):
        raise click.UsageError(f"--local runs the fleet on this machine, --machine {machine} on that machine's "
                               "batch job: give one of them")
    name = "local" if local else (machine or detect())
    try:
        profile = load(name)
    except ProfileError as e:
        raise click.BadParameter(str(e), param_hint="--machine" if machine else detected_by())
    start(run_dir, profile, nodes, preload, timeout,
          coordinator_args_of(heartbeat, heartbeat_timeout, stale_after, max_attempts, **end))


@main.command()
@click.option("--run-dir", type=click.Path(file_okay=False), default=None, show_default=RUN_DIR_DEFAULT,
              help="the fleet's run directory")
@click.option("--any-job", is_flag=True, help="inside a batch job, also stop other jobs' fleets of the run directory")
def down(run_dir, any_job):
    """Stop the fleet in the run directory (the one `fleet up` started, and any a
    `fleet run` embedded there, those still coming up too): the coordinator, every
    agent and every step they started. Inside a batch job, only this job's fleets
    (another job's is left alone, saying so) unless --any-job."""
    stop_all(_run_dir(run_dir), any_job)


@main.command()
@click.argument("steps", nargs=-1)
@click.option("--run-dir", type=click.Path(file_okay=False), default=None, show_default=RUN_DIR_DEFAULT,
              help="the fleet's run directory")
@click.option("--waiting", is_flag=True, help="cancel every step not yet started")
@click.option("--all", "every", is_flag=True, help="cancel every step not yet ended")
@click.option("--any-job", is_flag=True, help="inside a batch job, also in other jobs' fleets of the run directory")
def cancel(steps, run_dir, waiting, every, any_job):
    """Cancel steps of the fleet in the run directory: running ones are stopped (SIGTERM,
    SIGKILL after their grace), waiting ones never start. Cancelled steps are not retried
    and block their dependents; the fleet keeps running."""
    from fleet.control.cancelrequests import FleetError, cancel as cancel_steps
    if not (steps or waiting or every):
        raise click.UsageError("name steps to cancel, or give --waiting or --all")
    run_dir = _run_dir(run_dir)
    try:
        r = cancel_steps(run_dir, list(steps), waiting, every, any_job)
    except FleetError as e:
        raise click.ClickException(str(e))
    if r.unknown:
        click.echo(f"error: no step {', '.join(r.unknown)} in the fleet in {run_dir}; nothing was cancelled", err=True)
        sys.exit(EXIT_INVALID)
    n = len(r.running) + len(r.waiting)
    click.echo(f"cancelled {counted(n, 'step')}: {len(r.running)} running, {len(r.waiting)} waiting")
    if r.ended:
        click.echo(f"already ended, left alone: {', '.join(r.ended)}")


@main.command()
@click.argument("suite", type=click.Path(dir_okay=False))
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              show_default="$FLEET_RUN_DIR, else a fleet up in the current directory, else the suite's run_dir",
              help="the fleet's run directory")
@click.option("--force", is_flag=True, help="rerun steps that already succeeded")
@click.option("--serial", is_flag=True, help="one step at a time, in setup order")
@click.option("--nodes", type=click.IntRange(1), default=None, show_default="1",
              help="pretend nodes for an embedded local fleet (when none is up; an embedded fleet in a batch job "
                   "runs on every node of the job)")
@click.option("--shard", default=None, metavar="I/N", show_default="the whole suite",
              help="run only the tasks shard I of N owns (task id mod N, or a stable hash)")
@click.option("--new-generation", is_flag=True, help="with --shard: accept a shard count other than the recorded one")
@click.option("--no-wait-foreign", is_flag=True,
              help="with --shard: refuse steps that depend on another shard's steps instead of waiting for them")
@click.option("--only", multiple=True, metavar="ID[,ID]", show_default="every step",
              help="run only these steps (a dependency not selected must have succeeded already; may be given "
                   "more than once)")
@click.option("--with-deps", is_flag=True, help="with --only: and every step they depend on")
@click.option("--fleet-of-any-job", "any_job", is_flag=True,
              help="inside a batch job, use the fleet up in the run directory even if another job's")
@click.option("--timeout", type=Seconds(0, above=True), default=120.0,
              help="for an embedded fleet: seconds to wait for every agent to join, their zygotes having imported "
                   "the suite's preload (more than 0)")
@coordinator_options
def run(suite, run_dir, force, serial, nodes, shard, new_generation, no_wait_foreign, only, with_deps, any_job,
        timeout, stale_after, max_attempts, heartbeat, heartbeat_timeout, **end):
    """Run SUITE on the fleet that is up (or an embedded local one, with the
    coordinator options); exit 0 only if every step succeeded, 1 if any did not, 2 if
    the suite is invalid, 3 if the allocation ended (drained) before the suite did:
    run it again in the next allocation, 4 if the run directory's disk is full (free
    space and run it again) or read-only (make it writable and run it again), 5 if the fleet was lost (its coordinator killed, crashed or
    silent): bring one up and run it again (docs/operations.md in fleet's source)."""
    from fleet.control import stopsignals, warnsignal
    warnsignal.catch()  # the batch system's warning, from the start: kept until the fleet is up
    with stopsignals.before_start():  # Ctrl-C, SIGTERM, SIGHUP while the suite is read and checked
        from fleet.cli_run import (embedded_nodes, refuse_a_file, refuse_bad_silence, refuse_lone_options,
                                   refuse_to_embed, say_ignored, say_not_suites, selected, shard_spec, sharded,
                                   steps_to_run)
        from fleet.control.checks import suite_head
        from fleet.control import jobfleets, othershards
        from fleet.control.client import FleetError
        from fleet.control.runner import run_suite
        from fleet.control.submissions import Problems
        from fleet.wire.messages import Submit
        try:
            s = suite_head(suite)
        except SuiteError as e:
            _invalid(e.problems)
        only, shard = selected(only), sharded(shard)
        refuse_lone_options(with_deps, only, new_generation, no_wait_foreign, shard)
        refuse_bad_silence()
        target, other = _run_dir_for_suite(run_dir, s)
        refuse_a_file(target, run_dir, s)
        try:
            up = jobfleets.to_use(target, any_job)[0] is not None  # (in a batch job, this job's: control.jobfleets)
        except FleetError:
            up = False  # (run_suite says why it cannot be used)
        # A fleet that is up reads and checks the whole suite itself (off its loop) and
        # answers with the same problems, its shard's and --only's too: reading it here as
        # well made a big suite's steps twice (a million array steps: 8 s before the
        # submission left). With none up, all of that is checked here, against the run
        # directory and the embedded fleet's nodes, before a fleet is started.
        msg = Submit(str(Path(suite).resolve()), force, serial, shard, new_generation, not no_wait_foreign,
                     list(only), with_deps)
        if not up:
            refuse_to_embed(nodes)
            try:
                s, nothing, others = steps_to_run(msg, target, *embedded_nodes(nodes or 1))
            except Problems as e:
                _invalid(e.args[0])
            if nothing:
                click.echo(nothing)
                return
        else:  # (with --shard, the suite is read here too, alongside the submission: which steps are other shards')
            others = othershards.later(msg, target) if shard and shard_spec(shard) else othershards.OtherShards()
            say_ignored(target)
        if other:
            say_not_suites(target, up, s.run_dir)
        options = [] if up else with_job(coordinator_args_of(heartbeat, heartbeat_timeout, stale_after,  # (a job's
                                                             max_attempts, **end))  # end asked: seconds, maybe)
    sys.exit(run_suite(Path(suite).resolve(), s, target, force=force, serial=serial, nodes=nodes or 1,
                       shard=shard, new_generation=new_generation, wait_foreign=not no_wait_foreign,
                       only=only, with_deps=with_deps, others=others, join_timeout=timeout, any_job=any_job,
                       fleet_options=options))


@main.command()
@click.argument("suite", type=click.Path(dir_okay=False))
@click.argument("step_id", metavar="ID")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              show_default="as for fleet run", help="the run directory the step's directory is in")
@click.option("--record", "keep", is_flag=True,
              help="record the attempt and, on success, its done marker, so a later fleet run skips it")
def step(suite, step_id, run_dir, keep):
    """Run step ID of SUITE alone, in the foreground, for debugging: the cores,
    environment and directory a local fleet would give it, its output on this
    terminal. Nothing is recorded unless --record. Exits with the step's status."""
    from fleet.control.onestep import StepError, step as run_one
    try:
        s, graph = checked_suite(suite, check_inputs=False)
    except SuiteError as e:
        _invalid(e.problems)
    target, _ = _run_dir_for_suite(run_dir, s)
    try:
        sys.exit(run_one(s, graph, step_id, target, keep))
    except StepError as e:
        click.echo(f"fleet step: {e}", err=True)
        sys.exit(EXIT_INVALID)


@main.command(cls=_JsonErrors)
@click.option("--run-dir", type=click.Path(file_okay=False), default=None, show_default=RUN_DIR_DEFAULT,
              help="the fleet's run directory (a fleet `fleet up` started, else one a `fleet run` embedded there)")
@click.option("--connection", "conn_file", type=click.Path(dir_okay=False), default=None, show_default="none",
              help="a copy of the fleet's connection file (fleet.json), mode 0600")
@click.option("--via", default=None, metavar="HOST:PORT", show_default="none",
              help="reach the coordinator through a forwarded port (ssh -L)")
@click.option("--ssh", "login", default=None, metavar="[USER@]LOGIN", show_default="none",
              help="build the tunnel through LOGIN with ssh (and read the connection file there if it is not here)")
@click.option("--ssh-option", multiple=True, show_default="none",
              help="extra ssh options, e.g. '-p 2222' or '-F config' (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (an error too: {\"error\": ...})")
@click.option("--nodes", "all_nodes", is_flag=True, help="list every node (else: totals, and nodes needing attention)")
@click.option("--watch", is_flag=True, help="redraw in place until interrupted")
@click.option("--interval", type=INTERVAL, default=1.0,
              help="seconds between redraws with --watch (0.1 to 86400, a day)")
def status(run_dir, conn_file, via, login, ssh_option, as_json, all_nodes, watch, interval):
    """What a fleet is doing: nodes, steps by state, running steps, recent failures."""
    from fleet.cli_status import refuse_lone_options
    refuse_lone_options(ssh_option, login, watch)
    import contextlib
    import signal
    import time as _t
    from fleet.control.api import FleetError
    from fleet.control.statusview import render
    from fleet.control.tunnel import Tunnel
    # Not resolved here: with --ssh, a relative run dir is the login node's, relative to its home.
    given = Path(run_dir or os.environ.get("FLEET_RUN_DIR") or ".")
    endpoint = via_endpoint(via, login)  # (before the file is looked for)
    conn, kept = status_connection(given, conn_file, login, ssh_option, as_json)
    with contextlib.ExitStack() as stack:
        tun = Tunnel(login, conn.client, list(ssh_option)) if login else None
        f = status_fleet(stack, given, conn, endpoint, tun)
        # SIGTERM or SIGHUP (timeout(1), a closed terminal) unwinds too: the tunnel goes.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda n, _f: sys.exit(128 + n))
        # Watching a fleet of this machine: its file goes at `fleet down`, its pid if killed:
        # the watch ends then, not after a request that nobody answers.
        down = lambda: watch and kept is not None and (not kept.exists() or not f.alive())  # noqa: E731
        try:
            while True:
                st = None
                if not down():
                    try:
                        st = f.status(timeout=10, nodes=all_nodes)
                    except FleetError as e:
                        if tun is not None and tun.closed():
                            raise click.ClickException(tun.closed())
                        gone = gone_there(login, given, ssh_option, conn) if watch and login and not conn_file else ""
                        if gone:
                            return said_down(gone, as_json, crashed=False)
                        if not down():
                            raise click.ClickException(tun.unanswered(str(e), conn) if tun else str(e))
                if st is None:
                    gone = not kept.exists()
                    return said_down(f"{kept} is gone" if gone else f"its coordinator, pid {conn.pid}, is gone",
                                     as_json, crashed=not gone)
                if as_json:
                    click.echo(json.dumps(st, sort_keys=True))
                else:
                    click.echo(("\033[H\033[2J" if watch else "") + render(st))
                if not watch:
                    return
                _t.sleep(interval)
        except KeyboardInterrupt:
            return


@main.command(cls=_JsonErrors)
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--suite", "suite_path", type=click.Path(dir_okay=False), default=None, show_default="none",
              help="audit this suite's steps too (and judge success by its definitions)")
@click.option("--stale-after", type=Seconds(0), default=600.0, help="seconds after which a claim is stale")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (an error too: {\"error\": ...})")
def audit(run_dir, suite_path, stale_after, as_json):
    """Every step of every suite submitted in RUN_DIR (all shards) as succeeded, failed, cancelled,
    interrupted, stopped, running, waiting, not run (its fleet went down first), changed (with --suite:
    succeeded under another definition) or missing; reruns
    (forced or changed) counted, and DUPLICATE for a step that succeeded twice with nothing changed.
    Exits 1 on missing or duplicated steps (0 is not "all succeeded": see --json's counts), 2 if
    RUN_DIR holds no run or its events.jsonl is no fleet event stream."""
    from fleet.report.audit import audit as do_audit
    from fleet.report.command import not_a_stream
    steps = ()
    if suite_path:
        try:
            steps = checked_suite(suite_path, check_inputs=False)[0].steps
        except SuiteError as e:
            _invalid(e.problems, as_json)
    stream = Path(run_dir) / "events.jsonl"
    try:  # (as fleet report: random bytes there are no run, not a clean audit of no steps)
        why = not_a_stream(stream, hint="") if stream.is_file() else None
        a = None if why else do_audit(Path(run_dir), steps, stale_after)
    except OSError as e:  # (a file of the run another user's, or not a file)
        raise click.ClickException(f"cannot read {e.filename or run_dir}: {e.strerror or e}")
    if a is not None and not a.steps and not (Path(run_dir) / ".fleet").exists() \
            and not (stream.is_file() and stream.stat().st_size):
        why = (f"no run in {run_dir}: no .fleet directory and " + ("an empty events.jsonl" if stream.exists()
               else "no events.jsonl") + " there")  # (not "ok": a mistyped dir)
    if why:
        if as_json:
            click.echo(json.dumps({"error": why}))
        click.echo(f"fleet audit: {why}", err=True)
        sys.exit(EXIT_INVALID)
    click.echo(json.dumps(a.to_json(), indent=1, sort_keys=True) if as_json else a.text())
    sys.exit(0 if a.ok else 1)
