"""A big submission goes in while `fleet status` is answered (issue 12, benchmark a's
1,000,000-step target: benchmarks/million_submit.py measures it). Here, through a real
`fleet up` and `fleet run`: status answers come while the submission is still being
entered (between the scheduler's parts of it), and what it declared reads back whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleetharness import assert_nothing_left, env, events, fleet, write_suite

from fleet.control.client import Client, find
from fleet.wire import messages as P

# Entered in parts as fast as the loop's turns allow: 50,000 idle steps went into the
# scheduler within two turns (~0.1 s), too few for a status answer to land between
# parts reliably; 100,000 take twice as many, and the status is asked again at once.
STEPS = 100_000


def test_status_is_answered_while_a_100000_step_submission_is_still_being_entered(tmp_path: Path):
    run_dir = tmp_path / "run"
    # Every step waits for one that sleeps: nothing else runs, only the submission is measured.
    suite = write_suite(tmp_path / "big.toml", f'''
[suite]
name = "big"
run_dir = "{run_dir}"

[[steps]]
id = "gate"
command = "sleep 600"

[[steps]]
id = "s/{{i}}"
array = "1-{STEPS}"
command = "true"
deps = ["gate"]
''')
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=120)
    runner = None
    try:
        client = Client(find(run_dir))
        runner = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir)],
                                  cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        between, answers, deadline = [], 0, time.monotonic() + 300
        while time.monotonic() < deadline:
            st = client.ask(P.Status(), timeout=60).status
            answers += 1
            entered = sum(st["counts"].values())
            listed = [s for s in st["submissions"] if s["steps"] == STEPS + 1]
            if listed and st["loop"].get("submitting") and 0 < entered < STEPS + 1:
                between.append(entered)  # accepted, part way into the scheduler
            if listed and not st["loop"].get("submitting"):
                break
            time.sleep(0.005)
        client.close()
        assert listed and not st["loop"].get("submitting"), f"not in within 300 s ({answers} answers)"
        assert between, f"no status answer while the submission was being entered ({answers} answers)"
        assert sum(st["counts"].values()) == STEPS + 1, st["counts"]
        assert st["counts"].get("running", 0) == 1, st["counts"]  # the gate; every other step waits for it
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        if runner is not None:
            try:
                runner.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(runner.pid, signal.SIGKILL)
                runner.communicate()
    declared = [r for r in events(run_dir) if r["kind"] == "step"]
    assert len(declared) == STEPS + 1 and len({r["step"] for r in declared}) == STEPS + 1
    assert all(r["deps"] == ["gate"] and r["cores"] == 1 and r["step_kind"] == "command"
               for r in declared if r["step"] != "gate")
    assert_nothing_left(run_dir)
