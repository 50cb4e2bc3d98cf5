"""A 1,000,000-step suite submitted to a running fleet, status asked meanwhile (issue 12, benchmark a).

    python benchmarks/million_submit.py                  # 1,000,000 steps: results/million_submit.json
    python benchmarks/million_submit.py --steps 100000 --out /tmp/m.json --work DIR

A real coordinator in its own process (`benchmarks/_simagents.py coordinator`) and
--agents simulated agents of 64 cores (`_simagents.py agents`: the real protocol over
ZeroMQ with CURVE, no forking) whose steps run --duration s (an hour by default: the
first steps to fit start and stay running, the rest wait; what is measured is the
submission, not the run). Then, from this process:

- a status prober, its own process, asks Status every 0.25 s (4 Hz) on its own socket
  from before the Submit until after its reply, keeping each answer's time;
- the Submit is sent (fleet.control.client.Client); "accepted" is the submission's
  `submitted` record in events.jsonl (written when the suite is read, checked and
  registered), "entered" the Submit's reply (every step is in the scheduler);
- the coordinator's RSS (/proc/<pid>/status VmRSS, sampled every 0.1 s) and its peak
  (VmHWM) before and after; memory per step is (peak - RSS before) / steps, and the RSS
  kept once it is in (sampled 2 s after the reply) over the same baseline.

Then Down; nothing is left running (each process is its own session, killed by group).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE.parent), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

from _simagents import cpu_s, ms, peak_rss_mib  # noqa: E402
from control_scale import Processes, env, start_fleet, wait_up, write_suite  # noqa: E402
from fleet.control.client import Client  # noqa: E402
from fleet.wire import connection  # noqa: E402
from fleet.wire import messages as P  # noqa: E402

import psutil  # noqa: E402

PROBE_EVERY = 0.25  # s between Status requests: 4 Hz


def probe_main(run: str, out: str, stop: str) -> int:
    """The status prober's process: Status every PROBE_EVERY s until `stop` exists."""
    conn = connection.read(connection.path_in(Path(run)))
    c = Client(conn)
    samples, error = [], None
    try:
        while not os.path.exists(stop):
            t0 = time.time()
            c.ask(P.Status(), timeout=120)
            samples.append((t0, time.time() - t0))
            time.sleep(max(0.0, PROBE_EVERY - (time.time() - t0)))
    except Exception as e:  # reported with the results
        error = f"{type(e).__name__}: {e}"
    finally:
        c.close()
    Path(out).write_text(json.dumps({"samples": samples, "error": error}))
    return 0


def vm_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def accepted_at(events: Path, stop: threading.Event, found: dict) -> None:
    """The `submitted` record's time, read from events.jsonl as it grows."""
    pos, buf = 0, b""
    while not stop.is_set() and "t" not in found:
        try:
            with open(events, "rb") as f:
                f.seek(pos)
                chunk = f.read(1 << 22)
        except FileNotFoundError:
            chunk = b""
        pos += len(chunk)
        buf += chunk
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            if b'"submitted"' in line:
                rec = json.loads(line)
                if rec.get("kind") == "submitted":
                    found["t"] = rec["t"]
                    return
        if not chunk:
            time.sleep(0.05)


def submit(work: Path, run: Path, conn, steps: int, timeout: float) -> dict:
    coord = psutil.Process(conn.pid)
    suite = write_suite(work / "suite.toml", run, steps)
    stop_file, probe_out = work / "probe.stop", work / "probe.json"
    probe = subprocess.Popen([sys.executable, __file__, "--probe", str(run), str(probe_out), str(stop_file)],
                             env=env(), start_new_session=True, stdin=subprocess.DEVNULL)
    rss, stop, found = [], threading.Event(), {}

    def sample():
        while not stop.is_set():
            rss.append((time.time(), vm_rss_mib(conn.pid)))
            stop.wait(0.1)

    threads = [threading.Thread(target=sample, daemon=True),
               threading.Thread(target=accepted_at, args=(run / "events.jsonl", stop, found), daemon=True)]
    c = Client(conn)
    try:
        time.sleep(1.0)  # the prober's first answers, before the submission
        rss0, hwm0, cpu0 = vm_rss_mib(conn.pid), peak_rss_mib(conn.pid), cpu_s(coord)
        for t in threads:
            t.start()
        t0 = time.time()
        reply = c.ask(P.Submit(str(suite)), timeout=timeout)
        t1 = time.time()
        cpu1 = cpu_s(coord)
        time.sleep(2.0)  # status after it is in, and the RSS it keeps
        rss_kept = vm_rss_mib(conn.pid)
        loop = c.ask(P.Status(), timeout=60).status.get("loop", {})  # the coordinator's own lag figures
    finally:
        stop_file.touch()
        stop.set()
        for t in threads:
            t.join(timeout=10)
        c.close()
        try:
            probe.wait(timeout=150)
        except subprocess.TimeoutExpired:
            os.killpg(probe.pid, 9)
            probe.wait()
    if not reply.ok:
        raise RuntimeError(f"submission refused: {reply.problems}")
    pr = json.loads(probe_out.read_text())
    lat_during = [lat for sent, lat in pr["samples"] if t0 <= sent <= t1]
    sent_during = [sent for sent, _ in pr["samples"] if t0 <= sent <= t1]
    gaps = [b - a for a, b in zip(sent_during, sent_during[1:])]
    hwm1 = peak_rss_mib(conn.pid)
    return {"steps": steps, "accepted_s": round(found["t"] - t0, 2) if "t" in found else None,
            "entered_s": round(t1 - t0, 2), "reply_steps": reply.steps, "reply_skipped": reply.skipped,
            "coordinator_cpu_s": round(cpu1 - cpu0, 2),
            "status_during_submit": ms(lat_during), "status_answers_during_submit": len(lat_during),
            "status_widest_gap_between_requests_ms": round(1000 * max(gaps), 1) if gaps else None,
            "status_before_submit": ms([lat for sent, lat in pr["samples"] if sent < t0]),
            "status_after_submit": ms([lat for sent, lat in pr["samples"] if sent > t1]),
            "status_slowest_during_submit": [[round(sent - t0, 2), round(1000 * lat, 1)] for sent, lat in
                                             sorted(pr["samples"], key=lambda x: -x[1])[:5] if t0 <= sent <= t1],
            "status_probe_error": pr["error"], "coordinator_loop": loop,
            "coordinator_rss_before_mib": round(rss0, 1), "coordinator_peak_before_mib": hwm0,
            "coordinator_peak_after_mib": hwm1, "coordinator_rss_max_sampled_mib": round(max(r for _, r in rss), 1),
            "coordinator_rss_kept_mib": round(rss_kept, 1),
            "peak_bytes_per_step": round((hwm1 - rss0) * 2**20 / steps),
            "kept_bytes_per_step": round((rss_kept - rss0) * 2**20 / steps),
            "events_jsonl_mib": round((run / "events.jsonl").stat().st_size / 2**20, 1)}


def case(work: Path, steps: int, agents: int, duration: float, timeout: float) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    run = work / "run"
    run.mkdir(mode=0o700)
    procs = Processes(work)
    try:
        start_fleet(procs, run, agents, duration, 1.0, timeout, agent_timeout=10.0)
        conn = wait_up(run, procs, 120)
        res = {"agents": agents, "cores_per_agent": 64, "step_seconds": duration,
               **submit(work, run, conn, steps, timeout)}
        down = Client(conn)
        try:
            down.ask(P.Down(), timeout=60)
        finally:
            down.close()
        res["left_running_killed"] = procs.wait(timeout=60)
    finally:
        procs.kill()
    return res


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--probe"]:
        return probe_main(*sys.argv[2:5])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds each started step runs")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--work", help="keep the run here (default: a temporary directory, removed)")
    ap.add_argument("--out", default=str(HERE / "results" / "million_submit.json"))
    args = ap.parse_args(argv)
    from _nodebench import machine, today
    with tempfile.TemporaryDirectory(prefix="million-") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        t0 = time.monotonic()
        r = case(work / "case", args.steps, args.agents, args.duration, args.timeout)
        r["case_wall_s"] = round(time.monotonic() - t0, 1)
    cmd = "python benchmarks/million_submit.py" + (f" --steps {args.steps}" if args.steps != 1_000_000 else "")
    res = {"benchmark": "million_submit", "command": cmd, "date": today(), "machine": machine(),
           "commit": subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(), "run": r}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
