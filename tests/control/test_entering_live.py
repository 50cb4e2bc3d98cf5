"""A big submission to a busy fleet does not stop its other steps (issue 12, item 2):
while the scheduler takes the second suite in, part by part, the first suite's steps
keep ending and starting, through a real `fleet up` and two `fleet run`s. Before, every
exit that came meanwhile waited until the whole submission was in (fleet.core.generations,
Entry.passes)."""

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

FIRST, SECOND = 4000, 100_000


def _run(suite: Path, run_dir: Path, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir)],
                            cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_the_first_suites_steps_keep_ending_while_a_second_big_suite_is_entered(tmp_path: Path):
    run_dir = tmp_path / "run"
    first = write_suite(tmp_path / "first.toml", f'''
[suite]
name = "first"
run_dir = "{run_dir}"

[[steps]]
id = "a/{{i}}"
array = "1-{FIRST}"
command = "sleep 0.05"
''')
    # The second suite's steps all wait for a gate that sleeps: only its entry is watched.
    second = write_suite(tmp_path / "second.toml", f'''
[suite]
name = "second"
run_dir = "{run_dir}"

[[steps]]
id = "gate"
command = "sleep 600"

[[steps]]
id = "b/{{i}}"
array = "1-{SECOND}"
command = "true"
deps = ["gate"]
''')
    # No node window: a node starts nothing the coordinator has not just decided, so what
    # starts during the entry was decided during it.
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "1", "--window", "0", cwd=tmp_path, check=True,
          timeout=120)
    runners = []
    try:
        client = Client(find(run_dir))
        runners.append(_run(first, run_dir, tmp_path))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the first suite in and running
            st = client.ask(P.Status(), timeout=30).status
            if st["counts"].get("succeeded", 0) >= 20:
                break
            time.sleep(0.05)
        runners.append(_run(second, run_dir, tmp_path))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # until the second suite is all in
            st = client.ask(P.Status(), timeout=30).status
            if sum(st["counts"].values()) == FIRST + SECOND + 1 and not st["loop"].get("submitting"):
                break
            time.sleep(0.05)
        client.close()
        assert st["counts"].get("succeeded", 0) < FIRST, "the first suite ended before the second was in: nothing shown"
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        for r in runners:
            try:
                r.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(r.pid, signal.SIGKILL)
                r.communicate()
    records = events(run_dir)
    starts = [r for r in records if r["kind"] == "start"]
    assert len({(r["step"], r.get("attempt")) for r in starts}) == len(starts)  # each attempt started once
    # The scheduler takes the second suite in after its last step is declared, and says
    # when it is all in: between the two, the first suite's steps went on.
    sub = next(r["submission"] for r in records if r["kind"] == "submitted" and r["name"] == "second")
    declared = max(r["t"] for r in records if r["kind"] == "step" and r["step"].startswith("b/"))
    entered = [r for r in records if r["kind"] == "entered" and r["submission"] == sub]
    assert len(entered) == 1 and entered[0]["steps"] == SECOND + 1
    took = entered[0]["t"] - declared
    # (a node's `started` is its own time; a `start` is stamped with the event it follows)
    meanwhile = [r for r in records if r["kind"] == "started" and r["step"].startswith("a/")
                 and declared < r["t"] < entered[0]["t"]]
    assert took > 0.2, f"the entry took {took:.3f} s: too short to show anything"
    assert len(meanwhile) >= 4, f"{len(meanwhile)} steps of the first suite started in {took:.2f} s of entry"
    assert_nothing_left(run_dir)
