"""A step's start and its two reports on a real Coordinator, timed in one process per
tree, trees alternated (as benchmarks/msg_path_jobs.py): what the coordinator's loop
does per step outside the scheduler, in a lone fleet (the run directory's lease held
alone, the common case):

- "start": acting on a Start decision (Coordinator._act: the claim bookkeeping, the
  `start` line, the journal's start, the Launch made, encoded and queued for its agent);
- "Started report": an agent's Started frame taken as the transport takes it
  (Transport._one: decoded, the agent known, the report checked, the `started` line);
- "Exited report": the same for a success's Exited (the `exit` line, the journal's
  `done` line with the marker's and attempt's texts, the marker owed, the scheduler's
  event queued).

    python benchmarks/step_cycle_jobs.py --trees /tmp/base,. [--rounds 5] [--out FILE]

Each child process builds a real Coordinator (its sockets bound, nothing started) on a
run directory under /dev/shm (else /tmp), 200 simulated nodes of 64 cores joined through
its agents table, and one submission entered straight into its scheduler; the decisions
are made before the timing (the scheduler's own cost is not in these figures), every
job is then timed on new steps, best of 5 repeats of 2,000 steps. The Launches and the
lines are dropped between repeats (not written: the files are not what is timed).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _trees  # noqa: E402

N, REPEAT, NODES = 2_000, 5, 200


class _Launcher:
    def start(self, *a):
        pass

    def failed(self):
        return ""

    def stop(self):
        pass


def jobs() -> dict:
    """us per step of each job, in this process's fleet."""
    from fleet.control import store
    from fleet.control.coordinator import Coordinator
    from fleet.core.decisions import NodeJoined, Start, submission
    from fleet.core.suite import parse_suite
    from fleet.wire import messages as P
    from fleet.wire import records

    total = N * REPEAT
    tmp = Path(tempfile.mkdtemp(prefix="step-cycle-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    run_dir = tmp / "run"
    run_dir.mkdir()
    coord = Coordinator(run_dir, NODES, _Launcher(), window=0)
    try:
        specs = parse_suite({"steps": [{"id": "s/{i}", "array": f"1-{total}", "call": "m:f"}]},
                            run_dir / "s.toml").steps
        for s in specs:  # as a submission does, on its worker thread (fleet.control.submissions): not timed
            records.spec_hash(s)
        now = time.time()
        for i in range(NODES):
            node = f"node{i + 1}"
            join = P.Join(node=node, host="h", cores=list(range(64)), gpus=[], memory=64 << 30, pid=1, zygote_pid=2,
                          preload=[])
            for spec in coord.liveness.join(node.encode(), join, now, False):
                coord.sched.handle(NodeJoined(spec), now)
        coord.ready = True
        coord.specs.update((s.id, s) for s in specs)
        store.declared(run_dir, specs, {s.id: s.deps for s in specs}, {}, {})
        starts = [d for d in coord.sched.handle(submission(specs), now) if isinstance(d, Start)]
        while len(starts) < total:  # a bounded pass: the rest of it (fleet.core.decisions.GoOn)
            from fleet.core.decisions import Exits
            more = [d for d in coord.sched.handle(Exits(()), now) if isinstance(d, Start)]
            if not more:
                break
            starts += more
        assert len(starts) >= total, len(starts)
        frames = []
        try:
            from fleet.wire.numtext import exit_numbers as spell
        except ImportError:  # a tree from before 2026-12-05: the coordinator spells them
            spell = None
        for d in starts[:total]:
            node = d.placement[0].node.encode()
            t = time.time()
            times = (t, t + 0.001, t + 0.002, t + 0.25, t + 0.2501, 0.01, 0.002)
            # Its numbers spelled as its node spells them, in a tree whose Exited carries them
            # (fleet.wire.numtext; not timed: a node's work).
            extra = {"spelt": spell(*times)} if spell else {}
            frames.append((node, P.encode(P.Started(step=d.step, attempt=d.attempt, pid=4242, pgid=4242, at=t)),
                           P.encode(P.Exited(step=d.step, attempt=d.attempt, pid=4242, outcome="succeeded",
                                             returncode=0, signal=None, decided_at=times[0], first_at=times[1],
                                             work_start=times[2], work_end=times[3], ended_at=times[4],
                                             utime=times[5], stime=times[6], maxrss_kb=9000, affinity=(5,),
                                             placement_ok=True, error=None, **extra))))
        coord._feeding = True  # what the reports feed the scheduler waits in its inbox (not handled here)
        sock, handler = coord.agent_sock, coord._on_agent
        out: dict[str, float] = {}

        def timed(name, fn, lo):
            t0 = time.thread_time_ns()
            for i in range(lo, lo + N):
                fn(i)
            us = (time.thread_time_ns() - t0) / N / 1000
            out[name] = round(min(us, out.get(name, us)), 3)

        for r in range(REPEAT):
            lo = r * N
            timed("start", lambda i: coord._act((starts[i],), now), lo)
            timed("Started report", lambda i: coord.transport._one(sock, frames[i][0], frames[i][1], handler, None), lo)
            timed("Exited report", lambda i: coord.transport._one(sock, frames[i][0], frames[i][2], handler, None), lo)
            coord.transport._out.clear()
            coord.events._pending.clear()
            coord.recorder.journal._lines.clear()
            coord.recorder.journal._owed.clear()
            coord._inbox.clear()
        assert not coord.transport.dropped, coord.transport.dropped
    finally:
        coord.recorder.lease.release()
        coord.transport.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    sys.exit(_trees.main(__file__, jobs, 5))
