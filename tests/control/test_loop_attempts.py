"""A step the fleet fails as a loop (a restart past the limit, a wait for nothing twice
in a row, a failed child submitted again past the limit), or whose children it refuses,
counts toward --max-attempts like any failed attempt: its attempt record says failed, in
the journal and in a per-step attempt file alike, so a job chain that runs the suite
again stops running it. Through the real `fleet` CLI: real processes, real files. Step
functions live in tests/stage_steps.py and tests/children_steps.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from children_steps import ran
from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")

RESTART_LOOP = "restart again after 20 restarts in this run"
WAIT_LOOP = "wait for its children twice in a row"

SUITE = """
[suite]
name = "loops"
run_dir = "loops"

[[steps]]
id = "r"
call = "stage_steps:restart_always"
retries = 1

[[steps]]
id = "w"
call = "children_steps:waits_always"
args = { kids = 0 }
retries = 1

[[steps]]
id = "after"
command = "true"
deps = ["r"]

[[steps]]
id = "bad"
call = "children_steps:bad_dep"
"""


def run(tmp_path: Path, suite: Path, *extra: str):
    return fleet("run", str(suite), "--max-attempts", *extra, cwd=tmp_path, timeout=180)


def attempts(run_dir: Path, step: str) -> dict:
    """The journals' attempt records of a step, the last line of each attempt winning (as
    a replay reads them), by (fleet, generation, attempt)."""
    out = {}
    for path in sorted((run_dir / ".fleet" / "journal").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            x = json.loads(line)
            if x.get("k") == "attempt" and x.get("step") == step:
                rec = x["rec"]
                out[(rec["fleet"], rec["generation"], rec["attempt"])] = rec
    return out


def last_exits(run_dir: Path, step: str) -> dict:
    """The events' last exit line of each attempt of a step that ran, by (fleet, attempt)."""
    return {(e["fleet"], e["attempt"]): e for e in events(run_dir)
            if e["kind"] == "exit" and e["step"] == step and e["outcome"] != "stopped"}


def test_steps_that_loop_count_as_failed_attempts_and_a_later_run_stops_them_at_the_limit(tmp_path):
    # (their records said "restart" and "wait", counted by none: every run ran them again)
    suite = write_suite(tmp_path / "loops.toml", SUITE)
    run_dir = tmp_path / "loops"
    said = [run(tmp_path, suite, "2") for _ in range(3)]
    for r in said:
        assert r.returncode == 1, r.stdout + r.stderr
    # w fails twice in its first run (the attempt and its retry); r once a run (not retried).
    assert "failed     w: it asked to " + WAIT_LOOP in said[0].stdout, said[0].stdout
    assert "stopped    w: 2 attempts of this definition recorded without success (limit 2)" in said[1].stdout, \
        said[1].stdout
    for r in said[:2]:
        assert "failed     r: it asked to " + RESTART_LOOP in r.stdout, r.stdout
    assert "stopped    r: 2 attempts of this definition recorded without success (limit 2)" in said[2].stdout, \
        said[2].stdout
    assert "blocked    after" in said[2].stdout, said[2].stdout
    # A wait whose children the fleet refuses fails too: its record said "wait".
    assert "stopped    bad: 2 attempts of this definition recorded without success (limit 2)" in said[2].stdout, \
        said[2].stdout
    for step, why, n in (("r", RESTART_LOOP, 2), ("w", WAIT_LOOP, 2), ("bad", "its submitted steps were refused", 2)):
        recs = attempts(run_dir, step)
        assert len(recs) == n and all(r["outcome"] == "failed" and why in r["reason"] and r["spec"]
                                      for r in recs.values()), recs
        ends = last_exits(run_dir, step)
        assert {k: (e["outcome"], e["reason"]) for k, e in ends.items()} == \
            {(f, a): (r["outcome"], r["reason"]) for (f, _, a), r in recs.items()}, (ends, recs)
    assert_nothing_left(run_dir)


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait(timeout=30)
    return p.pid


def test_a_restart_loop_claimed_per_step_says_failed_in_its_attempt_file_and_is_stopped_next_time(tmp_path):
    # A claim left by a fleet that died: the step is claimed per step, its records are files.
    suite = write_suite(tmp_path / "loops.toml", SUITE.replace("retries = 1", "retries = 0"))
    run_dir = tmp_path / "loops"
    d = run_dir / "steps" / "r" / ".fleet"
    d.mkdir(parents=True)
    (d / "claim").write_text(json.dumps({"fleet": "gone", "host": socket.gethostname(), "pid": _dead_pid(),
                                         "attempt": 1, "at": time.time() - 5}))
    first = run(tmp_path, suite, "1", "--only", "r")
    assert first.returncode == 1 and "failed     r: it asked to " + RESTART_LOOP in first.stdout, \
        first.stdout + first.stderr
    files = sorted(d.glob("attempt.*.json"))
    recs = [json.loads(f.read_text()) for f in files]
    assert len(recs) == 1 and recs[0]["outcome"] == "failed" and RESTART_LOOP in recs[0]["reason"] \
        and recs[0]["spec"], recs
    second = run(tmp_path, suite, "1", "--only", "r")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "stopped    r: 1 attempt of this definition recorded without success (limit 1)" in second.stdout, \
        second.stdout
    assert_nothing_left(run_dir)


RESUBMITS = """
[suite]
name = "resubmits"
run_dir = "resubmits"

[[steps]]
id = "p"
call = "children_steps:resubmits_failing"
retries = 1

[[steps]]
id = "after"
command = "true"
deps = ["p"]
"""


def test_a_parent_that_submits_its_failing_child_again_in_every_phase_fails_as_a_loop_and_counts_as_an_attempt(
        tmp_path):
    # (it submitted the child again for ever, a phase and a run of it each time, burning the allocation:
    # the timeout ends the old code's run, and the test fails there)
    suite = write_suite(tmp_path / "resubmits.toml", RESUBMITS)
    run_dir = tmp_path / "resubmits"
    first = fleet("run", str(suite), "--max-attempts", "1", cwd=tmp_path, timeout=120)
    assert first.returncode == 1, first.stdout + first.stderr
    why = "it submitted child p/c again after it ended without success 21 times in a row in this run"
    assert "failed     p: " + why in first.stdout, first.stdout
    assert "blocked    after" in first.stdout, first.stdout
    children = [x for x in ran(run_dir) if x["what"] == "child"]
    assert len(children) == 21 and {x["step"] for x in children} == {"p/c"}, children
    # Not retried: one attempt, recorded failed with the reason (--max-attempts counts it).
    recs = attempts(run_dir, "p")
    assert len(recs) == 1 and all(r["outcome"] == "failed" and why in r["reason"] for r in recs.values()), recs
    # The child's own last end stays as it was: its failure.
    last = [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == "p/c"][-1]
    assert last["outcome"] == "failed" and "this child always fails" in last["reason"], last
    # Each run fails it so, once (its retry does not run: limit 2): the third stops it.
    second = fleet("run", str(suite), "--max-attempts", "1", cwd=tmp_path, timeout=120)
    assert second.returncode == 1 and "failed     p: " + why in second.stdout, second.stdout + second.stderr
    assert len(attempts(run_dir, "p")) == 2
    children = len([x for x in ran(run_dir) if x["what"] == "child"])
    third = fleet("run", str(suite), "--max-attempts", "1", cwd=tmp_path, timeout=120)
    assert third.returncode == 1, third.stdout + third.stderr
    assert "stopped    p: 2 attempts of this definition recorded without success (limit 2)" in third.stdout, \
        third.stdout
    assert len([x for x in ran(run_dir) if x["what"] == "child"]) == children  # (none ran)
    assert_nothing_left(run_dir)
