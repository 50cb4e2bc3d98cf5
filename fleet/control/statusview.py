"""`fleet status` as text: the coordinator's status answer, laid out for a terminal."""

from __future__ import annotations

import time

from fleet.core.units import format_memory
from fleet.core.oneline import one_line

BEHIND_S = 2.0  # reports read this late are shown (clocks of different nodes differ by ms)

# (held_back: ready, but held back by the allocation's end: fleet.core.deadline.as_counted)
STATES = ("waiting", "ready", "held_back", "queued", "running", "suspended", "succeeded", "skipped", "failed",
          "timed_out", "terminated", "out_of_memory", "lost", "cancelled", "stopped", "elsewhere", "blocked",
          "unrunnable", "broken", "interrupted", "not_started")


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _suites(submissions: list[dict], total: int | None = None, drained: bool = False) -> list[str]:
    """One line per suite, in the order first submitted: repeated submissions of the same
    suite (reruns, --force) are counted together, not listed one by one; of the latest
    submissions only, when the answer lists only those (`total`: all of them). The steps
    the drain's close ended unstarted are not finished: said apart (`drained`: the fleet
    drained; else the allocation's end held them back)."""
    by: dict[str, list[int]] = {}
    for sub in submissions:
        t = by.setdefault(sub["suite"], [0, 0, 0, 0])
        t[0] += 1
        t[1] += sub["steps"]
        t[2] += sub["finished"]
        t[3] += sub.get("not_started", 0)
    out = []
    for suite, (times, steps, finished, unstarted) in by.items():
        # Rounded down: "100%" only once every step has finished (2980 of 2986 is 99%).
        pct = 100 * finished // steps if steps else 100
        again = f" ({_n(times, 'submission')})" if times > 1 else ""
        left = (f", {unstarted} not started: " + ("drained" if drained else "held back by the allocation's end")
                if unstarted else "")
        out.append(f"  suite {suite}{again}: {finished}/{steps} finished ({pct}%){left}")
    if total is not None and total > len(submissions):
        out.append(f"  ... and {_n(total - len(submissions), 'earlier submission')} (the latest "
                   f"{len(submissions)} are shown)")
    return out


def preloading_line(p: dict | None, limit: int = 10) -> str:
    """What a submission held for its suite's preload waits for (fleet.control.preloads),
    or "" if none is held: also what a waiting `fleet run` says."""
    if not p:
        return ""
    nodes = p.get("nodes") or []
    who = ", ".join(nodes[:limit]) + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")
    return (f"waiting for {who or 'the nodes'} to import {', '.join(p['modules'])} (the suite's preload) "
            f"before its steps are submitted")


def _preloading(p: dict | None) -> list[str]:
    if not p:
        return []
    return [f"  suite {p['suite']}: held {_dur(p.get('held_s', 0))}, {preloading_line(p)}"]


def _allocation(a: dict | None, now: float, limit: int = 5) -> list[str]:
    """The allocation's end, its drain point, and what they hold back (fleet.core.deadline)."""
    if not a:
        return []
    at = lambda t: time.strftime("%H:%M:%S", time.localtime(t))  # noqa: E731
    out = []
    if a.get("end") is not None:
        # The time left by the coordinator's monotonic deadline (`left_s`, since 2026-12-07;
        # before, end - now: a wall clock stepped forward showed the end passed while the
        # fleet ran on); the times as read, and the wall clock's step since, if any.
        shift = a.get("shift") or 0.0
        left = a["left_s"] if a.get("left_s") is not None else a["end"] + shift - now
        stepped = f", as read before the wall clock stepped {'+' if shift > 0 else '-'}{_dur(round(abs(shift)))}" \
            if abs(shift) >= 1 else ""
        out.append(f"allocation ends {at(a['end'])} ({'in ' + _dur(left) if left > 0 else 'passed'}; "
                   f"{a.get('source') or 'given'}), drain point {at(a['drain_at'])}{stepped}")
    if a.get("drained"):
        # (Before 2026-12-06 it said "the next run goes on" of steps that no job like this one can run.)
        then = ("every step left needs a longer allocation than this one" if a.get("longer_only")
                else "the next run goes on")
        if str(a.get("reason", "")).startswith("the run directory"):  # (fleet.control.drain's FULL, READ_ONLY, FAILING)
            # A fleet up so drained stays drained: a next run to it drains at once (as fleet run says).
            then = ("the fleet stays drained: once the run directory can be written, bring it down and up again "
                    "(fleet down; fleet up) and run the suite again")
        out.append(f"  DRAINED ({one_line(a.get('reason', ''))}): nothing more starts; {then}")
    if a.get("held"):
        out.append(f"  {_n(a['held'], 'step')} held back, not started: expected to end after the drain point")
        named = a.get("held_steps") or []
        out.extend(f"    {h['step']}: {one_line(h['reason'])}" for h in named[:limit])
        if a["held"] > min(len(named), limit):
            out.append(f"    ... and {a['held'] - min(len(named), limit)} more")
    return out


def _queued(st: dict, limit: int) -> list[str]:
    """The steps handed to a node ahead of time (fleet.core.window), each with the
    running step whose end starts it there."""
    queued = st.get("queued") or []
    if not queued:
        return []
    total = st.get("counts", {}).get("queued", len(queued))
    out = [f"queued on their nodes ({total}), each to start there when the step it is behind ends:"]
    out.extend(f"  {q['step']:<30} on {q['node']:<10} after {q['after']}" for q in queued[:limit])
    if total > limit:
        out.append(f"  ... and {total - limit} more")
    return out


def _ready(st: dict, now: float, limit: int) -> list[str]:
    """Why ready steps have not started: the first of each kind (class of demand), in
    the order the scheduler tries them (fleet.core.queueview), and the reservations."""
    heads = st.get("ready") or []
    out = []
    if heads:
        # Once drained, counted not_started with the waiting ones (before 2026-12-07 "ready",
        # with the reason they waited for before the drain: memory, on idle nodes).
        out.append("left unstarted by the drain, the first of each kind of step:"
                   if (st.get("allocation") or {}).get("drained") else
                   f"ready, not started ({st.get('counts', {}).get('ready', len(heads))}), "
                   "the first of each kind of step:")
        for h in heads[:limit]:
            more = f"  (+{h['behind']} more like it)" if h["behind"] else ""
            ready = f"ready {_dur(h['ready_s'])}" if h.get("ready_s") is not None else ""
            out.append(f"  {h['step']:<30} {ready:>12}  {one_line(h['reason'] or 'next in line')}{more}")
        if len(heads) > limit:
            out.append(f"  ... and {len(heads) - limit} more kinds")
    for r in st.get("reservations") or []:
        when = r.get("expected_start")
        start = (f"expected to start {time.strftime('%H:%M:%S', time.localtime(when))}"
                 f" (in {_dur(max(0.0, when - now))})" if when is not None
                 else "start not known (a step it waits for has no estimate)")
        out.append(f"reservation for {r['step']}: {r['held_cores']} of {_n(r['cores'], 'core')} held, {start}")
    return out


def _tree(r: dict) -> str:
    """A child indented under its parent (ids are <parent>/<given>: one step per level)."""
    return "  " * r["step"].count("/") + r["step"] if r.get("parent") else r["step"]


def _stage(r: dict, then: str = "") -> str:
    """Its stage and phase; `then`: a waiting step's phase is the one it runs next."""
    return (f"  stage {r['stage']}" if r.get("stage") else "") + (f"  {then}phase {r['phase']}" if r.get("phase") else "")


def _waiting_children(rows: list[dict], limit: int = 20) -> list[str]:
    """Steps waiting for their children, holding nothing."""
    if not rows:
        return []
    out = [f"waiting for children ({len(rows)}):"]
    for r in rows[:limit]:
        out.append(f"  {_tree(r):<30} waiting for {r['waiting_for']} of {_n(r['children'], 'child')}"
                   .replace("childs", "children") + _stage(r, then="then "))
    if len(rows) > limit:
        out.append(f"  ... and {len(rows) - limit} more")
    return out


def _used(n: dict) -> str:
    """", used 3.1GiB; limits: cgroup v1 ...": what its agent last said, and how it holds
    steps to their memory (nothing from a coordinator of before these were sent)."""
    used = n.get("memory_used", -1)
    text = f", used {format_memory(used)}" if used is not None and used >= 0 else ""
    return text + (f"; limits: {n['memlimit'].split(' (')[0]}" if n.get("memlimit") else "")  # not its cgroup's path


def _node(n: dict) -> str:
    if not n.get("alive"):
        return f"  {n['node']:<14} LOST"
    return (f"  {n['node']:<14} cores {n['cores_busy']:>4}/{n['cores']:<4} gpus {n['gpus_busy']}/{n['gpus']}"
            f"  memory held {format_memory(n['memory_held'])} of {format_memory(n['memory'])}" + _used(n)
            + (f"  ({n['attention']})" if n.get("attention") else ""))


def _nodes(st: dict) -> list[str]:
    """The nodes part: every node's row (a small fleet, `--nodes`, an older coordinator),
    else the totals and the nodes that need attention (fleet.control.nodestatus)."""
    t = st.get("nodes_summary")
    if t is None or st.get("nodes_shown", "all") == "all":
        return ["nodes:"] + [_node(n) for n in st["nodes"]]
    busy = t.get("busy", {})
    used = f", used {format_memory(t['memory_used'])}" if t.get("memory_reported") else ""
    out = [f"nodes: {t['nodes']} ({t['alive']} alive" + (f", {t['lost']} lost" if t["lost"] else "")
           + (f", {t['not_in_pool']} not in the pool" if t.get("not_in_pool") else "")
           + (f", {t['zygote_restarts']} zygote restart(s)" if t.get("zygote_restarts") else "") + ")",
           f"  cores {t['cores_busy']}/{t['cores']} busy, gpus {t['gpus_busy']}/{t['gpus']}, memory held "
           f"{format_memory(t['memory_held'])} of {format_memory(t['memory'])}{used}",
           f"  nodes by cores busy: idle {busy.get('idle', 0)}, under half {busy.get('under_half', 0)}, "
           f"half or more {busy.get('half_or_more', 0)}, full {busy.get('full', 0)}"]
    total = st.get("nodes_attention", len(st["nodes"]))
    if total:
        out.append(f"  need attention ({total}):")
        out.extend("  " + _node(n) for n in st["nodes"])
        if total > len(st["nodes"]):
            out.append(f"    ... and {total - len(st['nodes'])} more")
    out.append("  (every node: fleet status --nodes)")
    return out


def _memory(loop: dict) -> str:
    """", memory 1.7GiB (peak 2.9GiB)": the coordinator's own, on the first node (nothing
    from a coordinator of before these were sent)."""
    if loop.get("rss", -1) < 0:
        return ""
    return f", memory {format_memory(loop['rss'])} (peak {format_memory(loop['peak_rss'])})"


def _behind(loop: dict) -> list[str]:
    """A line when the coordinator reads its nodes' reports late (BEHIND_S or more)."""
    age = loop.get("report_age_s")
    if age is None or age < BEHIND_S:
        return []
    return [f"  BEHIND: the last step end read came {age:.1f}s after the step ended on its node "
            "(reports wait for the coordinator; status lags by as much)"]


def render(st: dict, now: float | None = None, max_running: int = 20, max_ready: int = 10) -> str:
    """The status map as lines of text for a terminal."""
    now = time.time() if now is None else now
    up = st["up_s"] if "up_s" in st else now - st["up_since"]  # (its own monotonic time; not from an older one)
    out = [f"fleet in {st['run_dir']}: up {_dur(up)} (since "
           f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(st['up_since']))}), coordinator pid {st['pid']}"
           + _memory(st.get("loop") or {})]
    out.extend(_behind(st.get("loop") or {}))
    out.extend(_allocation(st.get("allocation"), now))
    out.extend(_nodes(st))
    counts = st.get("counts", {})
    # (every state with steps in it: those not in STATES' order after them, a new one too)
    shown = [k for k in STATES if counts.get(k)] + sorted(k for k in counts if counts[k] and k not in STATES)
    out.append("steps:  " + ("  ".join(f"{k} {counts[k]}" for k in shown) or "none submitted"))
    out.extend(_suites(st.get("submissions", []), st.get("submissions_total"),
                       bool((st.get("allocation") or {}).get("drained"))))
    out.extend(_preloading(st.get("preloading")))
    out.extend(_waiting_children(st.get("waiting_children", [])))
    running = st.get("running", [])
    if running:
        total = st.get("running_total", len(running))
        out.append(f"running ({total}):")
        for r in running[:max_running]:
            out.append(f"  {_tree(r):<30} on {r['node']:<10} {_n(r['cores'], 'core'):>9}  {_dur(r['elapsed_s'] or 0):>8}"
                       + (f"  attempt {r['attempt']}" if r["attempt"] > 1 else "") + _stage(r))
        if total > max_running:
            out.append(f"  ... and {total - max_running} more")
    out.extend(_queued(st, max_ready))
    out.extend(_ready(st, now, max_ready))
    if st.get("failures"):
        out.append("recent failures:")
        for f in st["failures"]:  # (its attempt as fleet report says it; a fleet of before 2026-12-07: none)
            att = (f" (attempt {f['attempt']}, retried)" if f.get("retried") else
                   f" (attempt {f['attempt']})" if (f.get("attempt") or 0) > 1 else "")
            out.append(f"  {f['outcome']:<10} {f['step']}{att}: {one_line(f['reason'] or '')}")
    return "\n".join(out)
