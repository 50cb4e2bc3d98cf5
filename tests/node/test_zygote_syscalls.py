"""The zygote's per-step system calls (issue 12, benchmark b): it reaps only when a child
has ended (SIGCHLD), reads its children's records once per batch of exits, stops reading
a pipe at a short read instead of at EAGAIN, and talks to its forking helper without
poll() before each send and receive. Counted with strace on a real zygote; the counts
are of calls, not of time, so load does not move them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from fleet.wire.messages import Exited

from test_zygote import TIMEOUT, launch, zygote  # noqa: F401  (fixture)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")

STEPS = 60


def _tracer_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


def _counts(path: str) -> dict[str, int]:
    """strace -c's table: calls by system call."""
    out = {}
    for line in open(path):
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            out[parts[-1]] = int(parts[3])
    return out


def _traced(z, tmp_path, launch_of) -> dict[str, int]:
    """The zygote's system calls (strace -c of its own thread, not its children) while
    it runs STEPS steps, ``launch_of(i)`` each, one after the other."""
    out = tmp_path / "strace.txt"
    tracer = subprocess.Popen(["strace", "-c", "-p", str(z.proc.pid), "-o", str(out)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while _tracer_of(z.proc.pid) != tracer.pid:
            if tracer.poll() is not None:
                pytest.skip("strace cannot attach here (ptrace not permitted)")
            assert time.monotonic() < deadline, "strace never attached"
            time.sleep(0.01)
        for i in range(STEPS):
            msg = launch_of(i)
            z.send(msg)
            assert z.exited(msg.step).outcome == "succeeded"
    finally:
        tracer.send_signal(signal.SIGINT)  # strace writes its table and detaches
        try:
            tracer.wait(timeout=TIMEOUT)
        finally:
            if tracer.poll() is None:
                os.killpg(tracer.pid, signal.SIGKILL)
                tracer.wait()
    return _counts(str(out))


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_the_zygote_makes_about_half_the_reads_waits_and_polls_per_step_it_made(zygote, tmp_path):
    z = zygote()
    for i in range(3):  # the helper and the first spares are made
        z.send(launch(tmp_path, f"warm{i}", "steps:draw"))
        assert z.exited(f"warm{i}").outcome == "succeeded"
    calls = _traced(z, tmp_path, lambda i: launch(tmp_path, f"s{i}", "steps:draw"))
    assert calls.get("wait4", 0) == STEPS, calls  # one reaped step each
    per_step = sum(calls.get(name, 0) for name in ("read", "waitid", "poll")) / STEPS
    # Before (commit fd122c2): ~6.8 reads (half of them EAGAIN), ~3.9 waitids (a reap after
    # every launch and every loop turn) and ~4.7 polls (two of them inside the helper
    # socket's settimeout) a step: ~15. Now ~3 + 2 + ~3.
    assert per_step <= 10.5, (per_step, calls)


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_a_command_step_costs_the_zygote_one_open_one_close_and_two_fstats_of_its_log(zygote, tmp_path):
    # Its log: opened, its length read (an fstat: the header on a line of its own; a pread
    # only where it is not empty), and, kept open until it is reaped, one fstat more there,
    # to see whether the step truncated it (fleet.node.logcut, new on 2026-12-07: 2 -> 3
    # stats a step, the same opens and closes). The third is the work directory's, which
    # is the log's directory and exists (fleet.node.stepdirs._makedirs).
    z = zygote()
    for i in range(3):
        z.send(launch(tmp_path, f"warm{i}", kind="command", command=["true"]))
        assert z.exited(f"warm{i}").outcome == "succeeded"
    calls = _traced(z, tmp_path, lambda i: launch(tmp_path, f"s{i}", kind="command", command=["true"]))
    assert calls.get("wait4", 0) == STEPS, calls
    per_step = {name: calls.get(name, 0) / STEPS for name in ("openat", "fstat", "newfstatat", "close", "pread64")}
    assert per_step["fstat"] + per_step["newfstatat"] == 3, (per_step, calls)
    assert per_step["pread64"] == 0, (per_step, calls)  # (the fresh log is empty: nothing to read)


def test_steps_that_end_together_are_each_reported_with_their_own_records(zygote, tmp_path):
    z = zygote()
    gate = tmp_path / "go"
    names = [f"w{i}" for i in range(4)]
    for name in names:
        z.send(launch(tmp_path, name, "steps:wait_for_file", args={"path": str(gate)}))
    deadline = time.monotonic() + TIMEOUT
    while len(z.started) < len(names):  # each has started (its Started read)
        msg = z.next(max(0.0, deadline - time.monotonic()))
        assert not isinstance(msg, Exited), msg
    gate.touch()  # all four end at once: reaped in one batch or a few
    exits = {name: z.exited(name) for name in names}
    for name, ex in exits.items():
        assert ex.outcome == "succeeded" and ex.pid == z.started[name].pid, ex
        # work_start, first_at and the affinity come from the step's own records, read
        # after it was reaped: a batch that missed them would report the exit's time.
        assert ex.first_at <= ex.work_start < ex.work_end <= ex.ended_at, ex
        assert ex.affinity == tuple(sorted(os.sched_getaffinity(0))), ex
