"""`fleet run`'s own reading of a suite, made when no fleet is up: everything a fleet
would check of the submission, checked before an embedded fleet starts. (With a fleet
up, the fleet reads and checks it, and the client reads only the [suite] table:
fleet.cli `run`.)"""

from __future__ import annotations

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


def embedded_nodes(count: int) -> list | None:
    """The nodes of the embedded fleet `fleet run --nodes count` would start, when they
    are known before it starts: a local fleet's, this machine's cores split as its
    launcher splits them (a usage error if there are too few). None inside a batch job
    (each agent says what its node has when it joins), or for a machine profile that
    does not load (the embedded fleet says why)."""
    from fleet.site.launch import local_nodes
    from fleet.site.profiles import ProfileError, detect, load
    try:
        profile = load(detect())
    except ProfileError:
        return None
    if profile.launcher != "local":
        return None
    try:
        return local_nodes(count, profile.held_back_cores)
    except ValueError as e:
        raise click.UsageError(f"--nodes {count}: {e}")


def steps_to_run(msg: P.Submit, run_dir: Path, nodes: list | None) -> tuple[Suite, str]:
    """What the embedded fleet would check of this submission, checked before it
    starts: the whole suite, whether every step fits `nodes` (None: not known yet),
    inputs no step produces in run_dir, the shard (its count against the recorded one)
    and the --only selection against the markers in run_dir. Reads only: nothing is
    made or written. fleet.control.submissions.Problems with every problem; else the
    suite, and why nothing would run if no step of it (or of the shard) is left ("" otherwise)."""
    if msg.shard:
        shard_spec(msg.shard)  # a malformed one is a usage error, as before
    from fleet.control.submissions import chosen
    suite, _, steps, _, _ = chosen(msg, nodes, run_dir, record=False)
    where = f" in shard {msg.shard}" if msg.shard else ""
    return suite, "" if steps else f"suite '{suite.name}' has no steps{where}; nothing was started"
