"""`fleet status` as text: the coordinator's status answer, laid out for a terminal."""

from __future__ import annotations

import time

from fleet.core.units import format_memory

STATES = ("waiting", "ready", "queued", "running", "succeeded", "skipped", "failed", "terminated", "lost",
          "blocked", "unrunnable")


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _suites(submissions: list[dict]) -> list[str]:
    """One line per suite, in the order first submitted: repeated submissions of the same
    suite (reruns, --force) are counted together, not listed one by one."""
    by: dict[str, list[int]] = {}
    for sub in submissions:
        t = by.setdefault(sub["suite"], [0, 0, 0])
        t[0] += 1
        t[1] += sub["steps"]
        t[2] += sub["finished"]
    out = []
    for suite, (times, steps, finished) in by.items():
        pct = 100 * finished / steps if steps else 100
        again = f" ({_n(times, 'submission')})" if times > 1 else ""
        out.append(f"  suite {suite}{again}: {finished}/{steps} finished ({pct:.0f}%)")
    return out


def render(st: dict, now: float | None = None, max_running: int = 20) -> str:
    """The status map as lines of text for a terminal."""
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
    out.extend(_suites(st.get("submissions", [])))
    running = st.get("running", [])
    if running:
        total = st.get("running_total", len(running))
        out.append(f"running ({total}):")
        for r in running[:max_running]:
            out.append(f"  {r['step']:<30} on {r['node']:<10} {_n(r['cores'], 'core'):>9}  {_dur(r['elapsed_s'] or 0):>8}"
                       + (f"  attempt {r['attempt']}" if r["attempt"] > 1 else ""))
        if total > max_running:
            out.append(f"  ... and {total - max_running} more")
    if st.get("failures"):
        out.append("recent failures:")
        for f in st["failures"]:
            out.append(f"  {f['outcome']:<10} {f['step']}: {f['reason']}")
    return "\n".join(out)
