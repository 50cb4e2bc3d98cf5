"""The report in the terminal (`fleet report`), and the formats of its figures that the
HTML page shares."""

from __future__ import annotations

from fleet.core import states as S
from fleet.report import families
from fleet.report.figures import floor_above
from fleet.core.units import format_memory
from fleet.core.oneline import one_line
from fleet.report.model import CATEGORY_TEXT, HELD_BACK, Report


def seconds(x: float | None) -> str:
    """A duration in the unit that reads best (ms, s, h); "-" for none."""
    if x is None:
        return "-"
    if x >= 3600:
        return f"{x / 3600:.2f} h"
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    return f"{x * 1000:.1f} ms"


def percent(x: float | None) -> str:
    """A fraction as a whole percentage; "-" for none."""
    return "-" if x is None else f"{100 * x:.0f}%"


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


def _words(cause: str) -> str:
    return CATEGORY_TEXT.get(cause, cause)


def format_text(r: Report, stretches: int = 5, problems: int = 20) -> str:
    """The summary `fleet report` prints."""
    state = "in progress" if r.in_progress else "finished"
    lines = [f"fleet report: {r.run_dir or 'events'} (session {r.session} of {r.sessions}, {state})"]
    lines += _time_lines(r)
    lines += _utilization_lines(r)
    lines.append(f"  steps         {len(r.steps)}: "
                 + (", ".join(f"{v} {k}" for k, v in sorted(r.counts.items())) or "none"))
    lines += _allocation_lines(r)
    lines += families.lines(r.families)
    lines += _problem_lines(r, problems)
    lines += _wait_lines(r, stretches)
    lines += [f"  note: {note}" for note in r.notes]
    return "\n".join(lines)


def _allocation_lines(r: Report) -> list[str]:
    return [f"  {label:<13} {when}{words}" for label, when, words in allocation_rows(r)]


def allocation_rows(r: Report) -> list[tuple[str, str, str]]:
    """(label, when, the words that follow it) of when the allocation ends, its drain or
    a close before it, and what they left to the next run (the text's lines, the page's
    summary rows)."""
    a = r.allocation
    if not a:
        return []
    out = []
    if a.get("end") is not None:
        out.append(("allocation", f"ends at {seconds(r.rel(a['end']))}", f" ({a.get('source') or 'given'}), "
                    f"drain point at {seconds(r.rel(a['drain_at']))} (from the first submission)"))
    drained = a.get("drained") is not None
    if a.get("closed") is not None:
        # Nothing left could end before the drain point: the fleet closed what was left
        # then, without a drain (before 2026-12-06 no line said so).
        before = (f", {seconds(a['drain_at'] - a['closed'])} before the drain point"
                  if a.get("drain_at") and a["drain_at"] > a["closed"] else "")
        out.append(("closed early", f"at {seconds(r.rel(a['closed']))}", f"{before}: nothing left could end "
                    "before the drain point" + ("" if drained else "; " + _left(a))))
    if drained:
        out.append(("drained", f"at {seconds(r.rel(a['drained']))}", f": {one_line(a.get('reason', ''))}; "
                    f"{_n(a.get('interrupted', 0), 'step')} interrupted, " + _left(a)))
    return out


def _left(a: dict) -> str:
    """What a drain (or a close) left undone, and whether the next run goes on."""
    return (f"{_n(a.get('not_started', 0), 'step')} not started "
            f"({a.get('held', 0)} would not have ended before the drain point): "
            # (Before 2026-12-06 it said the next run goes on of steps no job like this one runs.)
            + ("each needs a longer allocation than this one: give the job more time, or the steps "
               "shorter estimates" if a.get("longer_only") else "the next run goes on"))


def _time_lines(r: Report) -> list[str]:
    """Wall, work, speedup, startup, the floors and the fleet's start."""
    s = seconds
    finished = sum(1 for a in r.attempts if a.work_s is not None)
    now = r.in_progress and any(st.outcome in (S.RUNNING, S.WAITING, HELD_BACK) for st in r.steps.values())
    su = r.startup
    out = [f"  wall          {s(r.wall_s):>10}   from the first submission to the end of the last step"
           + (" (now)" if now else ""),
           f"  work          {s(r.work_s):>10}   sum of the steps' own work over {finished} finished attempt(s);"
           " startup excluded",
           f"  speedup       {(f'{r.speedup:.2f} x' if r.speedup is not None else '-'):>10}   work / wall:"
           " against running the steps back to back",
           f"  startup       {s(su['total_s']):>10}   total over {su['count']} start(s); median {s(su['median_s'])},"
           f" p95 {s(su['p95_s'])}, max {s(su['max_s'])} (decision to the step's own first instruction)"]
    path = r.floor_path
    shown = " -> ".join(path if len(path) <= 6 else path[:3] + ["..."] + path[-2:])
    out.append(f"  floor         {s(r.floor_s):>10}   longest dependency chain of the steps' own work"
               + (f" ({_n(len(set(path)), 'step')}: {shown})" if path else ""))  # (a parent: before and after its children)
    if floor_above(r.wall_s, r.floor_s):  # (never for a run: the floor's defect, not a negative "more")
        out.append(f"                {'':>10}   above the wall: a defect of fleet's report, please report it (the"
                   f" note below); with startup the chain is {s(r.floor_with_startup_s)}")
    elif r.floor_s > 0:
        out.append(f"                {'':>10}   the run took {s(r.wall_s - r.floor_s)} more"
                   f" ({r.wall_s / r.floor_s:.2f} x the floor); with startup the chain is {s(r.floor_with_startup_s)}")
    if r.capacity_floor_s > 0:
        out.append(f"  capacity      {s(r.capacity_floor_s):>10}   the work's core-seconds spread over every core"
                   f" (wall is {r.wall_s / r.capacity_floor_s:.2f} x this)")
    if r.fleet_up_s is not None:
        out.append(f"  fleet start   {s(r.fleet_up_s):>10}   fleet_starting to fleet_up (not in wall)")
    return out


def _utilization_lines(r: Report, max_nodes: int = 20) -> list[str]:
    u = r.utilization["overall"]
    parts = [f"cores {percent(u['cores_held'])} held, {percent(u['cores_working'])} doing the steps' own work"]
    if u["gpus_held"] is not None:
        parts.append(f"GPUs {percent(u['gpus_held'])} held")
    if u["memory_held"] is not None:
        parts.append(f"memory {percent(u['memory_held'])} held")
    out = ["  utilization   " + "; ".join(parts)]
    names = list(r.utilization["nodes"])
    shown = _nodes_shown(r, names, max_nodes)
    for name in shown:
        nu = r.utilization["nodes"][name]
        nd = r.nodes[name]
        extra = f", GPUs {percent(nu['gpus_held'])}" if nu["gpus"] else ""
        lost = f"  LOST at {seconds(nd.lost - r.t0)}: {one_line(nd.lost_reason or '')}" if nd.lost is not None else ""
        cores = "core: " if nu['cores'] == 1 else "cores:"
        out.append(f"    {name:<14} {nu['cores']:>4} {cores} {percent(nu['cores_held']):>4} held,"
                   f" {percent(nu['cores_working']):>4} working{extra}, memory {percent(nu['memory_held'])}"
                   f"{_memory_used(nd)}{lost}" + (f"; {nd.restarts_text}" if nd.restarts else ""))
    if len(names) > len(shown):
        hidden_lost = sum(1 for n in names if r.nodes[n].lost is not None) - sum(
            1 for n in shown if r.nodes[n].lost is not None)
        lost = f", {hidden_lost} of them lost" if hidden_lost else ""
        out.append(f"    ... and {len(names) - len(shown)} more node(s){lost} (--json has them all)")
    return out


def _nodes_shown(r: Report, names: list[str], max_nodes: int) -> list[str]:
    """The first ``max_nodes`` nodes in order, the lost ones first chosen, then those whose
    zygote restarted: at 1,000 nodes a node lost past the first twenty would otherwise go unsaid."""
    lost = [n for n in names if r.nodes[n].lost is not None or r.nodes[n].restarts][:max_nodes]
    room = max_nodes - len(lost)
    taken = set(lost) | set([n for n in names if r.nodes[n].lost is None and not r.nodes[n].restarts][:room])
    return [n for n in names if n in taken]


def _memory_used(nd) -> str:
    """"; 3.1 GiB in use at most; limits: cgroup v1 ...", as far as the records say
    (nothing for a stream of before these were recorded)."""
    used = f"; {format_memory(nd.memory_used)} in use at most" if nd.memory_used is not None else ""
    return used + (f"; limits: {nd.memlimit}" if nd.memlimit else "")


def _problem_lines(r: Report, problems: int) -> list[str]:
    if not r.problems:
        return []
    out = [f"  problems      {len(r.problems)}"]
    for p in r.problems[:problems]:
        where = f" on {p['node']}" if p.get("node") else ""
        att = f" (attempt {p['attempt']}, retried)" if p.get("retried") else (
            f" (attempt {p['attempt']}, {p['again']})" if p.get("again") else
            f" (attempt {p['attempt']}, before attempt {p['next_attempt']})" if p.get("next_attempt") else "")
        log = f" (log: {p['log']})" if p.get("log") else ""
        out.append(f"    {p['outcome']:<10} {p['step']}{where}{att}: {one_line(p['reason'] or '-')}{log}")
    if len(r.problems) > problems:
        out.append(f"    ... and {len(r.problems) - problems} more (--json has them all)")
    return out


def _wait_lines(r: Report, stretches: int) -> list[str]:
    out = []
    if r.waits:
        out.append("  waiting       step-seconds by what steps waited for: "
                   + ", ".join(f"{_words(k)} {seconds(v['step_s'])} ({_n(v['steps'], 'step')})"
                               for k, v in sorted(r.waits.items(), key=lambda kv: -kv[1]["step_s"])))
    if r.stretches:
        out.append("  idle while steps waited (longest stretches)")
    for st in r.stretches[:stretches]:
        cats = ", ".join(f"{_words(k)} {v}" for k, v in sorted(st["by_category"].items(), key=lambda kv: -kv[1]))
        out.append(f"    {seconds(st['from'])} - {seconds(st['to'])} ({seconds(st['duration_s'])}):"
                   f" {st['mean_idle_cores']:.1f} core(s) idle on average ({st['min_idle']}-{st['max_idle']});"
                   f" {st['waiting']} step(s) waiting for: {cats}")
        for w in st["steps"][:5]:
            out.append(f"      {w['step']}: {_words(w['for'])} ({w['why']}), {seconds(w['waited_s'])}")
        if st["waiting"] > 5:
            out.append(f"      ... and {st['waiting'] - 5} more")
    return out
