"""`fleet simulate`'s output, and the command line's reservation options
(fleet.core.reservations): `--reserve-after` and `--no-reservations` for `fleet up`,
`fleet run` and `fleet simulate`, and `fleet simulate --compare-reservations`; the
order of ready steps of equal priority (fleet.core.ranks): `fleet simulate --order`
and `--compare-orders`. `fleet simulate --window N` is `fleet up`'s
(fleet.control.window_option), with the same default (each node's cores): the
simulation makes the live fleet's commitments. `fleet simulate --machine NAME` (default:
the detected machine, as `fleet up`'s) gives the placement rule of that machine's MPI
launcher, as its live coordinator's scheduler has it (PALS: fleet.core.ppnblocks).

The options keep their values in the click context (expose_value=False), so the
commands' own signatures do not change: `coordinator_args()` turns them into the
coordinator's arguments, `reserve_after()` into the scheduler's setting.
"""

from __future__ import annotations

import gc
import json
import math
import os

import click

from fleet.cli_options import DURATION, simulate_end_lines
from fleet.control import window_option
from fleet.core.ranks import DEFAULT as DEFAULT_ORDER, MODES as ORDERS
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.core.units import counted, format_memory

_KEY = "fleet.reservations"


def _keep(name: str):
    def callback(ctx, param, value):
        ctx.meta.setdefault(_KEY, {})[name] = value
        return value
    return callback


def reservation_options(f):
    """--reserve-after, --no-reservations, --reserve-ahead and --order (values read
    back with reserve_after(), reserve_ahead() and order())."""
    f = click.option("--order", type=click.Choice(ORDERS), default=DEFAULT_ORDER, expose_value=False,
                     callback=_keep("order"), show_default=True,
                     help="the order of ready steps of equal priority: setup order, the longest chain of "
                          "estimates after the step first, steps on the longest chains first and then "
                          "the smallest (cores x estimate) first, or that and the few biggest wide steps "
                          "off the longest chains held back for a while (defer-widest; docs/user-guide.md in fleet's source)")(f)
    f = click.option("--reserve-ahead", type=click.IntRange(min=0), default=0, expose_value=False,
                     callback=_keep("ahead"), metavar="N", show_default=True,
                     help="plan up to N reservations ahead, for wide steps whose last dependencies run: "
                          "their cores are drained as those end, and they start when ready (0: none)")(f)
    f = click.option("--no-reservations", is_flag=True, expose_value=False, callback=_keep("off"),
                     help="no reservations: every step that fits starts (greedy backfill; wide steps may wait long)")(f)
    f = click.option("--reserve-after", type=DURATION, default=RESERVE_AFTER_S, expose_value=False,
                     callback=_keep("after"), metavar="DURATION",
                     help="how long a ready step waits (seconds, or 10m, 1h) before the resources that free "
                          "soonest are reserved for it once other steps take what it cannot use (steps of "
                          "higher priority get theirs once a lower one would start instead); others "
                          "backfill around it")(f)
    return f


def simulate_options(f):
    """The reservation options (with --order), --window (a live fleet's),
    --compare-reservations, --compare-orders and --machine."""
    f = click.option("--machine", default=None, expose_value=False, callback=_machine,
                     show_default="detected from the environment, as for fleet up",
                     help="machine profile from agents/ whose placement rule MPI steps keep, as its live fleet's "
                          "(mpi = \"pals\": ranks in blocks of one count per node)")(f)
    f = window_option.option(f)
    f = click.option("--compare-orders", is_flag=True, expose_value=False, callback=_keep("orders"),
                     help="run the suite once in each --order and show each (same reservations)")(f)
    f = click.option("--compare-reservations", is_flag=True, expose_value=False, callback=_keep("compare"),
                     help="run the suite twice, without and with reservations, and show both")(f)
    return reservation_options(f)


def _machine(ctx, param, value):
    """--machine: the profile, looked up as `fleet up --machine` looks it up (default:
    the detected machine, as `fleet up`'s), kept with what chose it."""
    from fleet.site.profiles import ProfileError, detect, load
    try:
        profile = load(value or detect())
    except ProfileError as e:
        from fleet.site.profiles import detected_by
        raise click.BadParameter(str(e), param_hint="--machine" if value else detected_by())
    by = "--machine" if value else "$FLEET_MACHINE" if os.environ.get("FLEET_MACHINE") else "detected"
    ctx.meta.setdefault(_KEY, {})["machine"] = (profile, by)
    return value


def machine() -> dict:
    """The machine whose placement rule the simulation keeps: its name, what chose it,
    its MPI launcher and whether MPI ranks go in blocks (PALS, fleet.core.ppnblocks: the
    live coordinator's Scheduler(mpi_blocks=profile.mpi == "pals"))."""
    profile, by = _values().get("machine") or (None, "")
    if profile is None:  # (no --machine option parsed: the built-in local machine)
        from fleet.site.profiles import Profile
        profile, by = Profile("local", "built in"), "default"
    return {"name": profile.name, "chosen_by": by, "mpi": profile.mpi, "mpi_blocks": profile.mpi == "pals"}


def machine_line(m: dict) -> str:
    """The text's line naming the machine and its placement rule for MPI steps."""
    rule = ("MPI ranks in blocks of one count per node, as PALS mpiexec launches them" if m["mpi_blocks"] else
            f"MPI ranks on the free cores of any nodes (mpi = \"{m['mpi']}\")")
    return f"  machine       {m['name']} ({m['chosen_by']}): {rule}"


def _values() -> dict:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_KEY, {}) if ctx is not None else {}


def reserve_after() -> float | None:
    """The scheduler's setting from the options: seconds, or None for no reservations."""
    v = _values()
    return None if v.get("off") else v.get("after", RESERVE_AFTER_S)


def reserve_ahead() -> int:
    """--reserve-ahead (fleet.core.lookahead): how many reservations may be planned ahead."""
    return int(_values().get("ahead") or 0)


def _given(name: str) -> bool:
    """Whether option `name` (its parameter's name) was given on the command line."""
    from click.core import ParameterSource
    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


def refuse_contradictions() -> None:
    """A usage error for options that undo each other: a reservation setting (or
    --compare-reservations) with --no-reservations; both comparisons of `fleet
    simulate` (one table each)."""
    v = _values()
    if v.get("off"):
        for name, flag in (("reserve_after", "--reserve-after"), ("reserve_ahead", "--reserve-ahead")):
            if _given(name):
                raise click.UsageError(f"{flag} sets reservations, --no-reservations turns them off: give one")
    if v.get("orders") and v.get("compare"):
        raise click.UsageError("--compare-orders and --compare-reservations each make their own table: give one")
    if v.get("off") and v.get("compare"):
        raise click.UsageError("--compare-reservations runs the suite without and with reservations, "
                               "--no-reservations turns them off: give one")


def coordinator_args() -> list[str]:
    """The options as the coordinator's command line takes them."""
    refuse_contradictions()
    after = reserve_after()
    out = ["--no-reservations"] if after is None else ["--reserve-after", repr(float(after))]
    out += ["--reserve-ahead", str(reserve_ahead())] if reserve_ahead() else []
    return out + ([] if order() == DEFAULT_ORDER else ["--order", order()])


def compare() -> bool:
    return bool(_values().get("compare"))


def order() -> str:
    """--order (fleet.core.ranks)."""
    return _values().get("order") or DEFAULT_ORDER


def wide_waits(result, steps, graph, wide: int) -> dict:
    """How long the steps of at least `wide` cores waited once their dependencies were
    done (p50, p90, max, in seconds) in a simulation result."""
    waits = sorted(result.steps[s.id].start_s - max([0.0] + [result.steps[d].end_s for d in graph.deps[s.id]
                                                             if d in result.steps])
                   for s in steps if s.id in result.steps and result.steps[s.id].cores >= wide)
    if not waits:
        return {"steps": 0, "p50_s": 0.0, "p90_s": 0.0, "max_s": 0.0}
    return {"steps": len(waits), "p50_s": waits[len(waits) // 2], "p90_s": waits[int(len(waits) * 0.9)],
            "max_s": waits[-1]}


def wide_cores(alloc) -> int:
    """The cores from which a step counts as wide in the comparisons: half a node or
    more (rounded up: 3 of 5), and at least 2."""
    return max(2, -(-max((len(n.cores) for n in alloc), default=1) // 2))


def _window(alloc) -> int:
    """The node window a simulation uses: --window, else each node's cores (x --window-depth)."""
    window = window_option.value()  # None: the node's cores, as `fleet up`'s default
    return max(len(n.cores) for n in alloc) * window_option.depth() if window is None else window


def _runs(run_sim, steps, graph, alloc, end: dict):
    """run_sim with what every comparison's run shares: the node window, the
    reservations planned ahead and the allocation's end (`end`: end_s, drain_before_s)."""
    return lambda **kw: run_sim(steps, graph, alloc, window=window_option.value(), depth=window_option.depth(),
                                reserve_ahead=reserve_ahead(), mpi_blocks=machine()["mpi_blocks"], **end, **kw)


def show_comparison(run_sim, steps, graph, alloc, as_json: bool, end: dict) -> None:
    """`fleet simulate --compare-reservations`: the same suite without and with them
    (each until the allocation's end, if `end` gives one)."""
    after = reserve_after()
    after = RESERVE_AFTER_S if after is None else after
    wide, run = wide_cores(alloc), _runs(run_sim, steps, graph, alloc, end)
    rs = {name: run(reserve_after=ra, order=order()) for name, ra in (("without", None), ("with", after))}
    head = {"reserve_after_s": after, "reserve_ahead": reserve_ahead(), "wide_cores": wide, "order": order()}
    named = ("" if order() == DEFAULT_ORDER else f", order {order()}") + (
        f", reserve ahead {reserve_ahead()}" if reserve_ahead() else "")
    _compared(f"reservations (reserve after {after:g} s{named}); wide steps: {wide} cores or more", head, None,
              rs, steps, graph, alloc, as_json)


def show_orders(run_sim, steps, graph, alloc, as_json: bool, end: dict) -> None:
    """`fleet simulate --compare-orders`: the same suite in each order, with the
    reservations the options say (each until the allocation's end, if `end` gives one)."""
    after = reserve_after()
    wide, run = wide_cores(alloc), _runs(run_sim, steps, graph, alloc, end)
    rs = {name: run(reserve_after=after, order=name) for name in ORDERS}
    res = ("no reservations" if after is None else f"reserve after {after:g} s") + (
        f", reserve ahead {reserve_ahead()}" if reserve_ahead() else "")
    _compared(f"orders ({res}); wide steps: {wide} cores or more",
              {"reserve_after_s": after, "reserve_ahead": reserve_ahead(), "wide_cores": wide},
              "orders", rs, steps, graph, alloc, as_json)


def _compared(title: str, head: dict, under: str | None, rs: dict, steps, graph, alloc, as_json: bool) -> None:
    """A comparison's table (or JSON: `head`, and the rows under `under` or beside it),
    with the node window and the allocation's end its runs had."""
    wide = head["wide_cores"]
    rows = {name: _row(r, steps, graph, wide) for name, r in rs.items()}
    first = next(iter(rs.values()))
    end = {} if first.end_s is None else {"end_s": first.end_s, "drain_s": first.drain_s}
    window, depth, m = _window(alloc), window_option.depth(), machine()
    if as_json:
        body = {under: rows} if under else rows
        click.echo(dumps({**head, **body, **end, "window": window, "window_depth": depth, "machine": m},
                         indent=1, sort_keys=True))
        return
    ends = f"; end {first.end_s:g} s, drain point {first.drain_s:g} s" if end else ""
    chain = f", up to {depth} behind a running step" if window and depth > 1 else ""
    click.echo(f"{title}; window {window} a node{chain}{ends}; machine {m['name']}"
               + (" (MPI ranks in blocks, as PALS)" if m["mpi_blocks"] else ""))
    _table(rows)


def dumps(obj, **kw) -> str:
    """JSON of `obj` with every number a number: a float that is not finite (no suite
    or option should give one any more) is null, never NaN or Infinity (not JSON)."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        return [clean(x) for x in v] if isinstance(v, (list, tuple)) else v
    return json.dumps(clean(obj), allow_nan=False, **kw)


def _row(r, steps, graph, wide: int) -> dict:
    """A comparison's row: makespan, utilization, the wide steps' waits and, with an
    allocation end, how many steps were interrupted at the drain point and never started."""
    ends = {} if r.end_s is None else {"interrupted": len(r.interrupted), "not_started": len(r.not_started)}
    return {"makespan_s": r.makespan_s, "utilization": r.utilization, "wide_waits": wide_waits(r, steps, graph, wide),
            **ends}


def _table(rows: dict) -> None:
    width = max(9, max(len(n) for n in rows))
    ends = "interrupted" in next(iter(rows.values()))
    click.echo(f"  {'':{width}} {'makespan s':>11} {'util %':>7} {'wide':>5} {'wait p50 s':>11} {'p90 s':>9} {'max s':>9}"
               + (f" {'interrupted':>11} {'not started':>11}" if ends else ""))
    for name, row in rows.items():
        w = row["wide_waits"]
        click.echo(f"  {name:{width}} {row['makespan_s']:11.1f} {100 * row['utilization']:7.1f} {w['steps']:5d} "
                   f"{w['p50_s']:11.1f} {w['p90_s']:9.1f} {w['max_s']:9.1f}"
                   + (f" {row['interrupted']:11d} {row['not_started']:11d}" if ends else ""))


def _uncollected(run_sim):
    """run_sim with the cyclic collector off while it runs, as `fleet report` reads a
    stream (fleet.report.command): a simulation makes millions of objects that live until
    it ends (a 1,000,000-node allocation's nodes) and no garbage cycles to speak of, and
    each full collection walked all of them again: half of the CPU time of a 3-step suite
    on 1,000,000 pretend nodes (benchmarks/README.md, "fleet simulate on a million
    pretend nodes"; the peak memory of a 100,000-step simulation measured the same)."""
    def run(*args, **kw):
        was = gc.isenabled()
        gc.disable()
        try:
            return run_sim(*args, **kw)
        finally:
            if was:
                gc.enable()
    return run


def show(suite, graph, alloc, nodes: int, cores_per_node: int, as_json: bool, end_s: float | None = None,
         drain_before_s: float = 0.0) -> None:
    """Simulate the checked suite on the pretend allocation (until `end_s`, if given,
    draining `drain_before_s` before it) and print what it did."""
    from fleet.core.simulate import simulate
    run_sim, end = _uncollected(simulate), {"end_s": end_s, "drain_before_s": drain_before_s}
    if compare() or _values().get("orders"):
        (show_comparison if compare() else show_orders)(run_sim, suite.steps, graph, alloc, as_json, end)
        return
    r = _runs(run_sim, suite.steps, graph, alloc, end)(reserve_after=reserve_after(), order=order())
    window, m, none = _window(alloc), machine(), [s.id for s in suite.steps if s.estimate is None]
    if as_json:
        click.echo(dumps({**r.to_json(), "window": window, "machine": m, "order": order(),
                          "reserve_after_s": reserve_after(), "reserve_ahead": reserve_ahead(),
                          "no_estimate": {"count": len(none), "first": none[0] if none else None}},
                         indent=1, sort_keys=True))
        return
    total = nodes * cores_per_node
    click.echo(f"suite '{suite.name}': {counted(len(suite.steps), 'step')} on {counted(nodes, 'node')} x "
               f"{counted(cores_per_node, 'core')} ({format_memory(alloc[0].memory)} each)")
    click.echo(f"  makespan      {r.makespan_s:10.1f} s")
    click.echo(f"  work          {r.work_s:10.1f} s (sum of the steps' durations; {r.core_s:.1f} core-s)")
    click.echo(f"  floor         {r.floor_s:10.1f} s (longest dependency chain)")
    click.echo(f"  utilization   {100 * r.utilization:9.1f} % of {total} cores")
    if r.makespan_s > 0:
        click.echo(f"  speedup       {r.work_s / r.makespan_s:10.2f} x against one at a time")
    for line in simulate_end_lines(r):
        click.echo(line)
    depth = window_option.depth()
    click.echo(f"  window        {window:10d} step(s) per node handed ahead" + (" (none)" if not window else "")
               + (f", up to {depth} behind a running step" if window and depth > 1 else ""))
    for line in settings_lines(m, none, len(suite.steps)):
        click.echo(line)


def settings_lines(m: dict, none: list, steps: int) -> list[str]:
    """What a plain run's text says it assumed: the order, the reservations, the machine's
    placement rule, and (when some step has none) what the steps without an estimate take."""
    after = reserve_after()
    out = [f"  order         {order()} (of ready steps of equal priority)",
           "  reservations  " + ("none" if after is None else f"after {after:g} s of waiting"
                                 + (f", up to {reserve_ahead()} planned ahead" if reserve_ahead() else "")),
           machine_line(m)]
    if none:
        out.append(f"  estimates     {len(none)} of {counted(steps, 'step')} have none: each runs 1 s here "
                   f"(first: {none[0]}); --order counts them 0 s")
    return out
