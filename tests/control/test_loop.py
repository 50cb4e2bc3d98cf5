"""The coordinator's loop is never held by a big submission (issue 12, item 2): the
suite is read and checked on a worker thread and entered a part per turn, so agents
keep hearing heartbeats and clients keep getting status answers meanwhile."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fleetharness import assert_nothing_left, env, events, fleet, write_suite

from fleet.control.client import Client, FleetError, find
from fleet.wire import messages as P

STEPS = 100_000


def _status(client: Client, timeout: float) -> tuple[float, dict | None]:
    """One status answer and how long it took (None: none within timeout)."""
    t0 = time.monotonic()
    try:
        st = client.ask(P.Status(), timeout=timeout).status
    except FleetError:
        st = None
    return time.monotonic() - t0, st


def test_a_100000_step_submission_loses_no_agent_and_status_answers_throughout(tmp_path: Path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "big.toml", f'''
[suite]
name = "big"
run_dir = "{run_dir}"

[[steps]]
id = "s/{{i}}"
array = "1-{STEPS}"
call = "os:getpid"
''')
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "2", "--heartbeat", "0.5",
          "--heartbeat-timeout", "2", cwd=tmp_path, check=True, timeout=120)
    runner = None
    try:
        client = Client(find(run_dir))
        runner = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir)],
                                  cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        latencies, entered_at, deadline = [], None, time.monotonic() + 300
        # Poll through the whole submission (read, checked, entered) and 3 s of its steps running.
        while time.monotonic() < deadline and (entered_at is None or time.monotonic() < entered_at + 3):
            took, st = _status(client, timeout=10)
            assert st is not None, f"no status answer within 10 s after {len(latencies)} answers"
            latencies.append(took)
            subs = st["submissions"]
            if entered_at is None and subs and subs[0]["steps"] == STEPS and not st["loop"]["submitting"]:
                entered_at = time.monotonic()
            time.sleep(0.1)
        assert entered_at is not None, "the submission was not in within 300 s"
        loop = st["loop"]
        print(f"status answers: {len(latencies)}, max {max(latencies):.3f} s, median {statistics.median(latencies):.3f} s; loop {loop}")
        client.close()
        # A loaded 2-core CI machine may be slow for a moment: every answer within 5 s and
        # half of them within 1 s is the claim here (the figures belong to benchmarks/).
        assert max(latencies) < 5.0, (max(latencies), loop)
        assert statistics.median(latencies) < 1.0, (statistics.median(latencies), loop)
        assert all(n["alive"] for n in st["nodes"]) and len(st["nodes"]) == 2, st["nodes"]
        assert st["counts"].get("succeeded", 0) > 0, st["counts"]  # steps ran while we asked
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        if runner is not None:
            try:
                runner.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(runner.pid, signal.SIGKILL)
                runner.communicate()
    recs = events(run_dir)
    assert [r for r in recs if r["kind"] == "node_lost"] == []
    assert [r for r in recs if r["kind"] == "exit" and r.get("outcome") == "lost"] == []
    assert sum(r["kind"] == "step" for r in recs) == STEPS
    assert_nothing_left(run_dir)
