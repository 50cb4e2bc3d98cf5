"""The `fleet` command line."""

from __future__ import annotations

import json
import sys

import click

from .checks import checked_suite
from .problems import SuiteError
from .units import format_memory, parse_memory

EXIT_INVALID = 2


class _Memory(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        try:
            return parse_memory(value if not str(value).isdigit() else int(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


MEMORY = _Memory()


def _invalid(err: SuiteError) -> None:
    for p in err.problems:
        click.echo(f"error: {p}", err=True)
    n = len(err.problems)
    click.echo(f"{n} problem{'s' if n != 1 else ''} found; nothing was started", err=True)
    sys.exit(EXIT_INVALID)


def _allocation(nodes, cores, memory, gpus):
    from .simulate import pretend_nodes
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
def validate(suite, nodes, cores_per_node, memory_per_node, gpus_per_node):
    """Check SUITE (and, given an allocation, that every step can fit it)."""
    alloc = _allocation(nodes, cores_per_node, memory_per_node, gpus_per_node)
    try:
        s, graph = checked_suite(suite, alloc)
    except SuiteError as e:
        _invalid(e)
    click.echo(f"{suite}: suite '{s.name}' is valid: {len(s.steps)} steps, run dir {s.run_dir}")


@main.command()
@click.argument("suite", type=click.Path(dir_okay=False))
@click.option("--nodes", type=click.IntRange(1), required=True)
@click.option("--cores-per-node", type=click.IntRange(1), required=True)
@click.option("--memory-per-node", type=MEMORY, default=None, help="e.g. 256GiB (default 4GiB per core)")
@click.option("--gpus-per-node", type=click.IntRange(0), default=0)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def simulate(suite, nodes, cores_per_node, memory_per_node, gpus_per_node, as_json):
    """Run the real scheduler on a pretend allocation, each step taking its estimate."""
    from .simulate import simulate as run_sim
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
