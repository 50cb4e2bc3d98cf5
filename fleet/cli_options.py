"""Option types and option groups of the `fleet` command line, beside fleet/cli.py:
sizes of memory, durations and times, and the allocation-end options of `fleet up`,
`fleet run` (its embedded fleet) and `fleet simulate`: when the allocation ends and
when to drain before it (fleet.core.deadline)."""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, timedelta

import click

from fleet.control.seconds_option import Seconds
from fleet.core.units import parse_memory

DRAIN_BEFORE_DEFAULT = "5m"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """"90" (seconds), "20s", "90m", "1h30m", "2d", "[[D-]HH:]MM:SS" (as Slurm writes a
    time limit) or "D-HH" and "D-HH:MM" (as Slurm's --time takes them) as seconds;
    ValueError if it is none of them."""
    try:
        seconds = _seconds(str(text).strip().lower())
    except OverflowError:  # (an int of hundreds of digits made a float)
        seconds = math.inf
    if seconds is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 20s, 90m, 1h30m, 01:30:00)")
    if not math.isfinite(seconds):  # 1e400 overflows to inf: no schedule or end means anything then
        raise ValueError(f"{text!r} is too long a duration to compute with")
    return seconds


def _seconds(t: str) -> float | None:
    """parse_duration's forms, as seconds (None: none of them)."""
    if re.fullmatch(r"\d*\.?\d+(e[+-]?\d+)?", t):  # seconds: 90, 1.5, .5, 1e3 (never negative)
        return float(t)
    if re.fullmatch(r"(\d+(\.\d+)?[smhd])+", t):
        return sum(float(n) * _UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhd])", t))
    m = re.fullmatch(r"(\d+)-(\d+)", t)  # D-HH, as Slurm's --time takes it
    if m:
        return int(m.group(1)) * 86400 + int(m.group(2)) * 3600.0
    m = re.fullmatch(r"(?:(\d+)-)?(\d+(?::\d+){1,2})", t)
    if m:
        total = 0.0
        for part in m.group(2).split(":"):
            total = total * 60 + int(part)
        if m.group(2).count(":") == 1 and m.group(1):  # D-HH:MM
            total *= 60
        return total + int(m.group(1) or 0) * 86400
    return None


def parse_end(text: str, now: float | None = None) -> float:
    """An end time as epoch seconds: epoch seconds, an ISO date and time, or a time of
    day (HH:MM[:SS], the next one to come), in this machine's time zone."""
    now = time.time() if now is None else now
    t = str(text).strip()
    if re.fullmatch(r"\d{9,}(\.\d+)?", t):
        return float(t)
    try:
        return datetime.fromisoformat(t).timestamp()
    except ValueError:
        pass
    for fmt in ("%H:%M", "%H:%M:%S"):
        try:
            clock = datetime.strptime(t, fmt).time()
        except ValueError:
            continue
        today = datetime.fromtimestamp(now)
        at = datetime.combine(today.date(), clock)
        return (at if at.timestamp() > now else at + timedelta(days=1)).timestamp()
    raise ValueError(f"{text!r} is not a time (epoch seconds, nine digits or more; 2026-05-01T18:00; or 18:00)")


class _Memory(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        try:
            n = parse_memory(value if not str(value).isdigit() else int(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)
        if n == 0:
            self.fail(f"a node's memory must be more than 0, got {value!r}", param, ctx)
        return n


MEMORY = _Memory()


# The largest pretend allocation `fleet validate` and `fleet simulate` describe: far
# beyond any machine's, and still built in seconds (10,000,000 cores in all took 20 s and
# under 1 GB to simulate); a larger one filled memory (MemoryError) before anything was said.
MAX_NODES, MAX_CORES_PER_NODE, MAX_GPUS_PER_NODE = 1_000_000, 100_000, 4_096
MAX_IN_ALL = 10_000_000  # cores and GPUs of all nodes together
NODES = click.IntRange(1, MAX_NODES)
CORES = click.IntRange(1, MAX_CORES_PER_NODE)
GPUS = click.IntRange(0, MAX_GPUS_PER_NODE)


def allocation(nodes: int | None, cores: int | None, memory: int | None, gpus: int | None):
    """The pretend allocation --nodes, --cores-per-node, --memory-per-node and
    --gpus-per-node describe (fleet.core.simulate.pretend_nodes; None: none given), or a
    usage error, before anything is built, for one too large to build."""
    from fleet.core.simulate import pretend_nodes
    if nodes is None and cores is None:
        if memory is not None or gpus is not None:  # (before 2026-12-06 ignored: "valid", unchecked)
            given = " and ".join(o for o, v in (("--memory-per-node", memory), ("--gpus-per-node", gpus))
                                 if v is not None)
            raise click.UsageError(f"{given} describe{'s' if ' and ' not in given else ''} the nodes of an "
                                   "allocation: give --nodes and --cores-per-node too")
        return None
    if nodes is None or cores is None:
        raise click.UsageError("give both --nodes and --cores-per-node to describe an allocation")
    if nodes * (cores + (gpus or 0)) > MAX_IN_ALL:
        raise click.UsageError(f"--nodes {nodes} x (--cores-per-node {cores} + --gpus-per-node {gpus or 0}) is "
                               f"{nodes * (cores + (gpus or 0)):,} cores and GPUs in all; at most {MAX_IN_ALL:,} "
                               "can be described")
    if memory is None:
        memory = cores * MEMORY_PER_CORE  # a conventional 4 GiB per core when not said
    return pretend_nodes(nodes, cores, memory, gpus or 0)


MEMORY_PER_CORE = 4 * 2**30  # a pretend node's memory when --memory-per-node is not given


def assumed(cores: int | None, memory: int | None, gpus: int | None) -> dict[str, str]:
    """What a pretend allocation's fit problems add where they name a node's memory or
    GPUs that the command line did not give (fleet.control.checks.fit_problems's notes):
    that the figure was assumed, and the option that gives it."""
    if cores is None:
        return {}
    from fleet.core.units import format_memory
    notes = {}
    if memory is None:
        notes["memory"] = (f"assumed {format_memory(MEMORY_PER_CORE)} per core, {format_memory(cores * MEMORY_PER_CORE)}"
                           " a node: give --memory-per-node")
    if gpus is None:
        notes["GPU"] = "assumed no GPUs: give --gpus-per-node"
    return notes


class _Param(click.ParamType):
    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return self.fn(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


# Seconds between `fleet status --watch` redraws: nan, inf or 1e10 crashed the sleep
# after the first redraw; 1e-9 polled the coordinator in a tight loop.
INTERVAL = Seconds(0.1, 86400.0, most_said="a day")
DURATION = _Param("duration", parse_duration)
END = _Param("time", parse_end)


def end_options(f):
    """--end, --walltime and --drain-before (fleet up, and fleet run's embedded fleet)."""
    f = click.option("--drain-before", type=DURATION, default=None,
                     show_default="5m, at most half the time left when the fleet starts",
                     help="how long before the end running steps are stopped (interrupted: the next run "
                          "reruns them) and steps that would not end before it are not started")(f)
    f = click.option("--walltime", type=DURATION, default=None, show_default="the batch job's",
                     help="the allocation ends this long from now, e.g. 20s, 90m, 01:30:00")(f)
    f = click.option("--end", type=END, default=None, show_default="the batch job's (read once)",
                     help="when the allocation ends: 18:00, 2026-05-01T18:00 or epoch seconds")(f)
    return f


def end_args(end: float | None, walltime: float | None, drain_before: float | None) -> list[str]:
    """The coordinator's options for them (an absolute end, from now for --walltime)."""
    if end is not None and walltime is not None:
        raise click.UsageError("give --end or --walltime, not both")
    now = time.time()
    if walltime is not None:
        end = now + check_walltime(walltime)
    elif end is not None and end <= now:
        # An end already past would drain at once and start nothing: surely a typo
        # (a date, or a time zone), said before the fleet starts rather than after.
        raise click.UsageError(f"--end {_local(end)} is past (it is {_local(now)} here): "
                               "the allocation would already be over")
    if end is not None and drain_before is not None:
        warn_drain(drain_before, end - now, "--walltime" if walltime is not None else "--end")
    return ((["--end", repr(end)] if end is not None else [])
            + (["--drain-before", repr(drain_before)] if drain_before is not None else []))


def check_walltime(walltime: float) -> float:
    """--walltime as given, or a usage error if the allocation would end now (under a
    second: a batch system's time limit counts whole seconds; `fleet run` and `fleet
    simulate` alike)."""
    if not walltime >= 1:
        raise click.UsageError(f"--walltime {walltime:g}: the allocation would end now; give a time to come "
                               "(1 s or more)")
    return walltime


def warn_drain(drain_before: float, left: float, by: str) -> float:
    """The drain margin a fleet takes for --drain-before when the end that `by` (the
    flag) gives is `left` seconds away: as given, or, if that leaves no time, half the
    time left, as the coordinator takes it (fleet.control.coordinator_cli), said on
    stderr. Not refused: a job script that resubmits itself passes the same margin to
    its last, short job, which should still run something."""
    if drain_before < left:
        return drain_before
    half = round(left / 2, 1) or left / 2  # (as the coordinator takes it: a tenth of a second)
    click.echo(f"fleet: --drain-before {_span(drain_before)} is not shorter than the time {by} leaves "
               f"({_span(left)}): draining {_span(half)} before the end instead (half the time left)", err=True)
    return half


def _span(seconds: float) -> str:
    """Seconds as a message says them: to a tenth of a second, or in minutes."""
    return f"{round(seconds, 1):g} s" if seconds < 120 else f"{seconds / 60:.4g} min"


def _local(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def simulate_end(f):
    """`fleet simulate --walltime --drain-before`: the pretend allocation's end, from its start."""
    f = click.option("--drain-before", type=DURATION, default=None, show_default="5m, at most half the walltime",
                     help="with --walltime: the drain point, this long before the end")(f)
    f = click.option("--walltime", type=DURATION, default=None, show_default="no end",
                     help="the pretend allocation ends this long after the submission (e.g. 2h; a live "
                          "fleet counts from its own start, a little before its submission): model the drain "
                          "before it")(f)
    return f


def drain_margin(walltime: float | None, drain_before: float | None) -> float:
    """The drain margin a fleet would take: as given, else 5 min but at most half the
    time (`fleet simulate`: a usage error for a margin without --walltime; half the
    walltime, said, for one that leaves no time, as a fleet takes it; a walltime that
    ends now refused as `fleet run` refuses it)."""
    if walltime is not None:
        check_walltime(walltime)
    if drain_before is not None:
        if walltime is None:
            raise click.UsageError("--drain-before is the drain point before the end --walltime gives: "
                                   "give --walltime too")
        return warn_drain(drain_before, walltime, "--walltime")
    return min(parse_duration(DRAIN_BEFORE_DEFAULT), (walltime or 0.0) / 2)


def simulate_end_lines(r) -> list[str]:
    """What the allocation's end did in a simulated run (fleet.core.simulate.SimResult):
    the steps interrupted, the steps not started each with why, and the live verdict on
    them (fleet.core.notstarted): which need a longer allocation, and whether resubmitting
    a job like this one would finish the suite."""
    if r.end_s is None:
        return []
    why = r.not_started_why
    return [f"  end           {r.end_s:10.1f} s (drain point {r.drain_s:.1f} s)",
            f"  interrupted   {len(r.interrupted):10d} step(s) stopped at the drain point",
            *_named(list(r.interrupted)),
            f"  not started   {len(r.not_started):10d} step(s)" + (", each with why" if r.not_started else ""),
            *_each(r.not_started, why), *_verdict(r)]


SIMULATE_NAMED = 10  # the ids `fleet simulate` names of each (all of them: --json)


def _named(ids: list) -> list[str]:
    """The first SIMULATE_NAMED ids, one line, and how many more."""
    if not ids:
        return []
    more = f" ... and {len(ids) - SIMULATE_NAMED} more (--json lists them all)" if len(ids) > SIMULATE_NAMED else ""
    return ["                " + ", ".join(ids[:SIMULATE_NAMED]) + more]


def _each(ids, why: dict) -> list[str]:
    """The first SIMULATE_NAMED ids, a line each with its reason, and how many more."""
    out = [f"                {sid}: {why.get(sid, '')}" for sid in ids[:SIMULATE_NAMED]]
    if len(ids) > SIMULATE_NAMED:
        out.append(f"                ... and {len(ids) - SIMULATE_NAMED} more (--json gives each its reason)")
    return out


def _verdict(r) -> list[str]:
    """Whether a job like this one, resubmitted, would go on: the steps left that need a
    longer allocation (fleet.core.longer), as a live `fleet run` judges them."""
    left = len(r.interrupted) + len(r.not_started)
    if not left:
        return []
    if r.longer_only:
        return [f"  longer        {len(r.longer):10d} step(s) need a longer allocation: every step left; no job of "
                f"this length finishes the suite (a live fleet run exits 1, not 3): give the job more time, "
                f"or the steps shorter estimates"]
    if not r.longer:
        return [f"  longer        {0:10d} step(s) need a longer allocation: a job like this one, resubmitted, "
                f"goes on with the {left} left (a live fleet run exits 3)"]
    return [f"  longer        {len(r.longer):10d} step(s) need a longer allocation (a job like this one never "
            f"starts them; resubmitted, it goes on with the other {left - len(r.longer)}: a live fleet run exits 3)",
            *_named(list(r.longer))]
