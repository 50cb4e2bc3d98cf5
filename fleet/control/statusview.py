"""`fleet status` as text: the coordinator's status answer, laid out for a terminal."""

from __future__ import annotations

import time

from fleet.core.units import format_memory

STATES = ("waiting", "ready", "running", "succeeded", "skipped", "failed", "terminated", "lost",
          "blocked", "unrunnable")


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def render(st: dict, now: float | None = None, max_running: int = 20) -> str:
    now = time.time() if now is None else now
    out = [f"fleet in {st['run_dir']}: up {_dur(now - st['up_since'])} (since "
           f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(st['up_since']))}), coordinator pid {st['pid']}"]
    out.append("nodes:")
    for n in st["nodes"]:
        if not n.get("alive"):
            out.append(f"  {n['node']:<14} LOST")
            continue
        out.append(f"  {n['node']:<14} cores {n['cores_busy']:>4}/{n['cores']:<4} gpus {n['gpus_busy']}/{n['gpus']}"
                   f"  memory held {format_memory(n['memory_held'])} of {format_memory(n['memory'])}")
    counts = st.get("counts", {})
    out.append("steps:  " + ("  ".join(f"{k} {counts[k]}" for k in STATES if counts.get(k)) or "none submitted"))
    for sub in st.get("submissions", []):
        pct = 100 * sub["finished"] / sub["steps"] if sub["steps"] else 100
        out.append(f"  suite {sub['suite']}: {sub['finished']}/{sub['steps']} finished ({pct:.0f}%)")
    running = st.get("running", [])
    if running:
        total = st.get("running_total", len(running))
        out.append(f"running ({total}):")
        for r in running[:max_running]:
            out.append(f"  {r['step']:<30} on {r['node']:<10} {r['cores']:>3} cores  {_dur(r['elapsed_s'] or 0):>8}"
                       + (f"  attempt {r['attempt']}" if r["attempt"] > 1 else ""))
        if total > max_running:
            out.append(f"  ... and {total - max_running} more")
    if st.get("failures"):
        out.append("recent failures:")
        for f in st["failures"]:
            out.append(f"  {f['outcome']:<10} {f['step']}: {f['reason']}")
    return "\n".join(out)
