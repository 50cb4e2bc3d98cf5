"""`fleet run`'s own checks, beside fleet/cli.py: its command line (--only, a run
directory that is a file, an embedded fleet that could not start here, options a fleet
that is up does not take) and its reading of a suite when no fleet is up: everything a
fleet would check of the submission, checked before an embedded fleet starts. (With a
fleet up, the fleet reads and checks it, and the client reads only the [suite] table:
fleet.cli `run`.)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from fleet.core.suite import Suite
from fleet.wire import messages as P


def shard_spec(shard: str) -> tuple[int, int]:
    """--shard's I and N; a usage error otherwise."""
    from fleet.control.shard import ShardError, parse
    try:
        return parse(shard)
    except ShardError as e:
        raise click.UsageError(str(e))


EXIT_INVALID = 2


def sharded(shard: str | None) -> str:
    """--shard's I/N as given ("" when not given); a usage error if it was given empty
    or malformed (`--shard "$I/$N"` with both unset is not "the whole suite")."""
    if shard is None:
        return ""
    shard_spec(shard)
    return shard


def selected(only: tuple[str, ...]) -> tuple[str, ...]:
    """--only's ids, every time it was given, in order, once each (none when not given);
    a usage error if one names none: `--only ,`, and `--only ""` (an unset variable) too,
    is not "every step". (Before 2026-12-07 only the last --only counted.)"""
    out: dict[str, None] = {}
    for given in only or ():
        ids = [i.strip() for i in given.split(",") if i.strip()]
        if not ids:
            raise click.BadParameter(f"{given!r} names no step (ids separated by commas)", param_hint="--only")
        out.update(dict.fromkeys(ids))
    return tuple(out)


def refuse_a_file(target: Path, given: str | None, suite: Suite) -> None:
    """Exit 2 if the run directory is a file, naming where it came from (the flag, the
    environment or the suite's field), or its path or the suite's is not UTF-8, before
    anything reads or makes it."""
    for what, path in (("suite", suite.path), ("run directory", target)):
        try:
            str(path).encode("utf-8")
        except UnicodeEncodeError:  # (a Latin-1 name, say: it could not be sent, nor recorded)
            click.echo(f"fleet: the {what}'s path {str(path)!r} is not valid UTF-8, which fleet's messages and "
                       f"records are: rename it; nothing was started", err=True)
            sys.exit(EXIT_INVALID)
    where = ("--run-dir" if given else "$FLEET_RUN_DIR" if os.environ.get("FLEET_RUN_DIR")
             else f"{suite.path}: field 'suite.run_dir'")
    from fleet.control.dirlimits import run_dir_too_long, shown
    why = run_dir_too_long(target)
    why = why and f"cannot be used: {why}"
    try:
        why = why or ("is a file, not a directory" if target.exists() and not target.is_dir() else None)
    except OSError as e:  # (a part of it longer than a name may be: the system's words)
        why = f"cannot be used: {e.strerror or e}"
    if why:
        click.echo(f"fleet: run directory {shown(target)} ({where}) {why}; nothing was started", err=True)
        sys.exit(EXIT_INVALID)


def refuse_to_embed(nodes: int | None) -> None:
    """Exit 2 if the fleet `fleet run` would embed (`nodes`: --nodes, None if not given)
    could not start here (fleet.control.preflight), before anything starts."""
    from fleet.cli_up import advertised, own_cores
    from fleet.control import preflight
    why = preflight.embedded(nodes, advertised(), own_cores())
    if why:
        click.echo(f"fleet: {why}; nothing was started", err=True)
        sys.exit(EXIT_INVALID)


def say_ignored(target: Path) -> None:
    """On stderr, the options given that the fleet up in `target` does not take (not an
    error: a job script may pass them whether or not a fleet is up)."""
    ignored = embedded_only()
    if ignored:
        click.echo(f"fleet: {', '.join(ignored)}: for a fleet that fleet run starts itself; the fleet up in "
                   f"{target} keeps its own settings (ignored)", err=True)


def say_not_suites(target: Path, up: bool, suite_run_dir: str) -> None:
    """On stderr, that fleet run runs in `target`, where a fleet is up, not in the suite's
    run_dir: on that fleet (up), or (inside a batch job, that fleet another job's) beside
    it, with this job's own, which run_suite then says."""
    where = f"on the fleet up in {target}" if up else f"in {target}, where a fleet is up"
    click.echo(f"fleet: running {where} (not the suite's run_dir {suite_run_dir})", err=True)


def embedded_only() -> list[str]:
    """The options given to `fleet run` on its command line that only a fleet it starts
    itself takes (--nodes and the coordinator options), as the user wrote them."""
    from click.core import ParameterSource
    ctx = click.get_current_context()
    mine = {"suite", "run_dir", "force", "serial", "shard", "new_generation", "no_wait_foreign", "only", "with_deps"}
    return [p.opts[0] for p in ctx.command.params
            if isinstance(p, click.Option) and p.name not in mine
            and ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]


def embedded_nodes(count: int) -> tuple[list | None, dict]:
    """The nodes of the embedded fleet `fleet run --nodes count` would start, when they
    are known before it starts: a local fleet's, this machine's cores split as its
    launcher splits them (a usage error if there are too few). None inside a batch job
    (each agent says what its node has when it joins), or for a machine profile that
    does not load (the embedded fleet says why). And what a fit problem naming GPUs adds:
    why they have none, if this machine's GPU ids could not be read."""
    from fleet.site.launch import local_nodes
    from fleet.site.profiles import ProfileError, detect, load
    try:
        profile = load(detect())
    except ProfileError:
        return None, {}
    if profile.launcher != "local":
        return None, {}
    try:
        nodes, unread = local_nodes(count, profile.held_back_cores, profile.gpu_var, profile.gpus_per_node)
    except ValueError as e:
        raise click.UsageError(f"--nodes {count}: {e}")
    return nodes, {"GPU": f"the nodes offer no GPUs: {unread}"} if unread else {}


def steps_to_run(msg: P.Submit, run_dir: Path, nodes: list | None, notes: dict | None = None) -> tuple[Suite, str, object]:
    """What the embedded fleet would check of this submission, checked before it
    starts: the whole suite, whether every step it would start fits `nodes` (None: not
    known yet; fleet.control.fitscope; `notes`: what to add to their problems),
    inputs no step produces in run_dir, the shard (its count against the recorded one)
    and the --only selection against the markers in run_dir. Reads only: nothing is
    made or written. fleet.control.submissions.Problems with every problem; else the
    suite, why nothing would run if no step of it (or of the shard) is left ("" otherwise),
    and the other shards' steps it waits for (fleet.control.othershards)."""
    if msg.shard:
        shard_spec(msg.shard)  # a malformed one is a usage error, as before
    from fleet.control import othershards
    from fleet.control.submissions import chosen
    suite, _, steps, _, foreign = chosen(msg, nodes, run_dir, record=False, notes=notes)
    where = f" in shard {msg.shard}" if msg.shard else ""
    return (suite, "" if steps else f"suite '{suite.name}' has no steps{where}; nothing was started",
            othershards.of(steps, foreign, msg.shard, run_dir))


def refuse_bad_silence() -> None:
    """Exit 2, nothing started, for a FLEET_RUN_SILENCE that is no number of seconds above
    0 (read only once the suite ran before 2026-12-07: a traceback then)."""
    from fleet.control.api import silence_s
    from fleet.control.client import FleetError
    try:
        silence_s()
    except FleetError as e:
        click.echo(f"error: {e}; nothing was started", err=True)
        sys.exit(2)


def refuse_lone_options(with_deps, only, new_generation, no_wait_foreign, shard) -> None:
    """A usage error for an option of `fleet run` given without the one it goes with
    (before 2026-12-06 taken and ignored)."""
    if with_deps and not only:
        raise click.UsageError("--with-deps selects with --only")
    for given, option in ((new_generation, "--new-generation"), (no_wait_foreign, "--no-wait-foreign")):
        if given and not shard:
            raise click.UsageError(f"{option} goes with --shard I/N: without it, it means nothing")
