"""What the coordinator of a benchmark run did, counted (FLEET_BENCH_STATS=FILE, read by
benchmarks/_simagents.py): CPython's collections by generation (how many, wall time),
loop turns, agent messages and frames each way, scheduler calls by event kind with the exits and decisions they carried,
and the loop thread's CPU time in the scheduler (`handle`). Written as JSON when the
coordinator stops. Each count is a clock read or two: the run's own figures stay close
to an uncounted run's, not equal to them."""

from __future__ import annotations

import gc
import json
import time
from collections import Counter


def install(coord, path: str):
    """Count `coord`'s work; returns a function that writes the counts to `path`."""
    st = {"gc_n": [0, 0, 0], "gc_s": [0.0, 0.0, 0.0], "turns": 0, "handle_calls": Counter(),
          "handle_cpu_s": Counter(), "exits_in": 0, "decisions": Counter()}
    t0 = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        g = info.get("generation", 0)
        if phase == "start":
            t0[0] = time.perf_counter()
        else:
            st["gc_n"][g] += 1
            st["gc_s"][g] += time.perf_counter() - t0[0]

    gc.callbacks.append(on_gc)
    sched = coord.sched
    handle = sched.handle
    cpu = time.thread_time

    def counted(event, now):
        kind = type(event).__name__
        c0 = cpu()
        out = handle(event, now)
        st["handle_cpu_s"][kind] += cpu() - c0
        st["handle_calls"][kind] += 1
        if kind == "Exits":
            st["exits_in"] += len(event.exits)
        for d in out:
            st["decisions"][type(d).__name__] += 1
        return out

    sched.handle = counted
    st.update(msgs_in=0, frames_in=0, msgs_out=0, frames_out=0)
    sock = coord.transport.agent_sock
    recv = sock.recv_multipart

    def received(*a):
        frames = recv(*a)  # (raises zmq.Again when none waits: not counted)
        st["msgs_in"] += 1
        st["frames_in"] += len(frames) - 1
        return frames

    sock.recv_multipart = received
    tr = coord.transport
    flush = tr.flush

    def flushed(unreachable):
        st["msgs_out"] += len(tr._out)
        st["frames_out"] += sum(map(len, tr._out.values()))
        return flush(unreachable)

    tr.flush = flushed
    live = coord.liveness
    ended = live.listening

    def listening():
        st["turns"] += 1
        return ended()

    live.listening = listening

    def write() -> None:
        out = dict(st, gc_s=[round(x, 3) for x in st["gc_s"]],
                   handle_cpu_s={k: round(v, 3) for k, v in st["handle_cpu_s"].items()})
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    return write
