"""A trace of the coordinator's slow loop turns, for finding what stalls the loop.

Off unless the environment names a file (FLEET_TURN_TRACE=path); then every loop turn
longer than FLEET_TURN_TRACE_SLOW seconds (0.2 by default) is one JSON line there:
when it began, how long it took (wall) against the loop thread's own CPU time in it
(wall much longer than CPU: the thread waited, for the interpreter lock, the disk or
the machine), the time in each part of the turn (the outermost call of each, so the
parts add up to at most the turn) and CPython's collections during it; every status
answer is a line with when it was made and how long it took, so that a slow answer
seen by a client can be placed. (A rotation's journal fold, which the trace used to
mark, no longer runs during a fleet's run: fleet.control.fold.rotate.)

Installed by wrapping the loop's parts on the one coordinator instance (nothing on the
loop changes when it is off); the cost when on is a few clock reads per part.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time

ENV = "FLEET_TURN_TRACE"
SLOW_ENV = "FLEET_TURN_TRACE_SLOW"

# The loop's parts, as (owner attribute path, method) on the coordinator.
PARTS = (("", "_drain"), ("", "_pump"), ("", "_beat"), ("", "_tend_claims"), ("", "status"),
         ("intake", "collect"), ("intake", "work"), ("drain", "tick"), ("recorder", "turn"),
         ("transport", "flush"), ("events", "flush"))


def install(coord) -> "TurnTrace | None":
    """Trace `coord`'s loop turns if FLEET_TURN_TRACE names a file (else nothing)."""
    path = os.environ.get(ENV)
    return TurnTrace(coord, path, float(os.environ.get(SLOW_ENV) or 0.2)) if path else None


class TurnTrace:
    """Times the parts of each loop turn; writes the slow turns (see the module doc)."""

    def __init__(self, coord, path: str, slow_s: float):
        self.coord, self.slow_s = coord, slow_s
        self.out = open(path, "a", buffering=1)
        self.lock = threading.Lock()  # the fold's thread writes too
        self.parts: dict[str, float] = {}
        self.depth = 0
        self.gc_s, self.gc_n, self._gc_t0 = 0.0, [0, 0, 0], 0.0
        self.turns = 0
        self.t0 = self.cpu0 = 0.0
        for owner, name in PARTS:
            obj = getattr(coord, owner) if owner else coord
            setattr(obj, name, self._timed(f"{owner}.{name}" if owner else name, getattr(obj, name)))
        live = coord.liveness
        began, ended = live.listening_ended, live.listening
        live.listening_ended = lambda: self._begin(began())
        live.listening = lambda: (ended(), self._end())[0]
        gc.callbacks.append(self._gc)

    def write(self, line: dict) -> None:
        with self.lock:
            self.out.write(json.dumps(line, separators=(",", ":")) + "\n")

    def _timed(self, name: str, fn):
        def timed(*a, **kw):
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.depth -= 1
                took = time.perf_counter() - t0
                if self.depth == 0:
                    self.parts[name] = self.parts.get(name, 0.0) + took
                if name == "status":
                    self.write({"k": "status", "t": round(time.time(), 3), "s": round(took, 4)})
        return timed

    def _begin(self, began: float) -> float:
        self.t0, self.cpu0, self.parts, self.gc_s, self.gc_n = time.perf_counter(), time.thread_time(), {}, 0.0, [0, 0, 0]
        return began

    def _end(self) -> None:
        self.turns += 1
        wall = time.perf_counter() - self.t0
        if wall < self.slow_s:
            return
        self.write({"k": "turn", "t": round(time.time() - wall, 3), "n": self.turns, "wall": round(wall, 4),
                    "cpu": round(time.thread_time() - self.cpu0, 4), "gc_s": round(self.gc_s, 4), "gc_n": self.gc_n,
                    "parts": {k: round(v, 4) for k, v in sorted(self.parts.items(), key=lambda kv: -kv[1])}})

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self.gc_s += time.perf_counter() - self._gc_t0
            self.gc_n[info["generation"]] += 1
