"""`fleet run`'s own reading of a suite, made when no fleet is up: the whole suite checked
before an embedded fleet starts. (With a fleet up, the fleet reads and checks it, and
the client reads only the [suite] table: fleet.cli `run`.)"""

from __future__ import annotations

import click

from fleet.control.checks import checked_suite
from fleet.core.problems import Problem, SuiteError
from fleet.core.suite import Suite


def shard_spec(shard: str) -> tuple[int, int]:
    """--shard's I and N; a usage error otherwise."""
    from fleet.control.shard import ShardError, parse
    try:
        return parse(shard)
    except ShardError as e:
        raise click.UsageError(str(e))


def steps_to_run(path: str, shard: str, only: tuple[str, ...]) -> tuple[Suite, str]:
    """The suite checked whole (SuiteError with every problem, an unknown --only id
    among them), and why nothing would run if no step of it (or of the shard) is left
    ("" otherwise)."""
    s, _ = checked_suite(path, check_inputs=False)
    steps, where = s.steps, ""
    if shard:
        from fleet.control.shard import owner
        i, n = shard_spec(shard)
        steps, where = [x for x in s.steps if owner(x.task, n) == i], f" in shard {shard}"
    ids = {x.id for x in s.steps}
    unknown = [i for i in only if i not in ids]
    if unknown:
        raise SuiteError([Problem(str(path), None, None, f"--only: suite '{s.name}' has no step "
                                  + ", ".join(f"'{i}'" for i in unknown))])
    return s, "" if steps else f"suite '{s.name}' has no steps{where}; nothing was started"
