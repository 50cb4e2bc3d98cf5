"""`fleet audit` through real fleets, on what a step's newest record says: a step
handed to a node ahead and cancelled before it started is cancelled, not running; a
coordinator killed with SIGKILL leaves its steps running (stale) and the steps it never
started `not run`, and the lost attempt a later fleet records beats an earlier
interruption; steps a Ctrl-C'd fleet never started are `not run`, not missing; a file
that is no event stream is refused."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for, write_suite

from fleet.wire import records


def audit(run_dir: Path, cwd: Path) -> tuple[int, dict, str]:
    """(exit status, the --json answer, the text answer)."""
    j = fleet("audit", str(run_dir), "--json", cwd=cwd, timeout=60)
    t = fleet("audit", str(run_dir), cwd=cwd, timeout=60)
    assert j.returncode == t.returncode, (j.stdout, t.stdout, j.stderr)
    return j.returncode, json.loads(j.stdout), t.stdout


def statuses(a: dict) -> dict[str, str]:
    return {s: v["status"] for s, v in a["steps"].items()}


def kinds(run_dir: Path, kind: str, step: str | None = None) -> list[dict]:
    return [e for e in events(run_dir) if e.get("kind") == kind and (step is None or e.get("step") == step)]


def _more_steps_than_cores(tmp_path: Path, run_dir: Path, flag: Path, background):
    """A fleet up on one node, running twice its cores' steps, each waiting for `flag`:
    (the number of cores, the `fleet run` process). The caller takes the fleet down."""
    cores = len(os.sched_getaffinity(0))
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "queued"
[[steps]]
id = "s/{{i}}"
array = "0-{2 * cores + 1}"
call = "fleet_steps:wait_for_file"
args = {{ path = "{flag}", timeout = 120 }}
""")
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=120)
    try:
        run = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    except BaseException:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        raise
    background.append(run)
    return cores, run


def test_a_step_cancelled_while_queued_on_its_node_is_audited_cancelled_not_running_while_the_fleet_is_up(
        tmp_path, background):
    # (a step handed to its node ahead has a start line in the journal; cancelled before it
    # began, only its final line followed: audit said "running ... (its journal)" until down)
    run_dir, flag = tmp_path / "run", tmp_path / "never"
    cores, run = _more_steps_than_cores(tmp_path, run_dir, flag, background)
    try:
        wait_for(lambda: kinds(run_dir, "queued") and kinds(run_dir, "started"), 60, "a step queued on its node")
        queued = {e["step"] for e in kinds(run_dir, "queued")}
        # The queued ones alone (the running ones go on, so that none of them starts meanwhile),
        # then everything else not started.
        fleet("cancel", "--run-dir", str(run_dir), *sorted(queued), cwd=tmp_path, check=True, timeout=60)
        fleet("cancel", "--run-dir", str(run_dir), "--waiting", cwd=tmp_path, check=True, timeout=60)
        flag.touch()
        finish(run, 90)
        assert not queued & {e["step"] for e in kinds(run_dir, "started")}
        code, a, text = audit(run_dir, tmp_path)  # the fleet still up
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert code == 0, text
    started = {e["step"] for e in kinds(run_dir, "started")}
    assert statuses(a) == {s: "succeeded" if s in started else "cancelled" for s in statuses(a)}, text
    assert all(statuses(a)[s] == "cancelled" for s in queued) and "running" not in text, text
    assert_nothing_left(run_dir)


def test_a_step_queued_on_its_node_of_a_live_fleet_is_audited_waiting_there_not_running(tmp_path, background):
    # (a step handed to its node ahead has a start line in the journal from the handing:
    # audit said "running ... (its journal)" for it, more steps running than cores)
    run_dir, flag = tmp_path / "run", tmp_path / "go"
    cores, run = _more_steps_than_cores(tmp_path, run_dir, flag, background)
    try:
        wait_for(lambda: len(kinds(run_dir, "started")) == cores and kinds(run_dir, "queued"), 60,
                 "every core busy and a step queued on its node")
        code, a, text = audit(run_dir, tmp_path)  # nothing starts or ends until the flag
        started = {e["step"] for e in kinds(run_dir, "started")}
        queued = {e["step"] for e in kinds(run_dir, "queued")} - started
        flag.touch()
        assert finish(run, 90)[0] == 0
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert code == 0 and queued, text
    assert statuses(a) == {s: "running" if s in started else "waiting" for s in statuses(a)}, text
    for s in queued:
        assert a["steps"][s]["reason"].startswith("queued on node1 in "), a["steps"][s]
    assert text.splitlines()[-1] == f"{cores} running, {2 * cores + 2 - cores} waiting", text
    assert_nothing_left(run_dir)


SUITE = """
[suite]
name = "killed"
[[steps]]
id = "a"
call = "fleet_steps:wait_for_file"
args = {{ path = "{flag}", timeout = 120 }}
[[steps]]
id = "b"
command = "true"
deps = ["a"]
"""


def test_steps_a_ctrl_c_or_a_sigkill_left_are_interrupted_running_stale_lost_or_not_run_never_missing(
        tmp_path, background):
    run_dir, flag = tmp_path / "run", tmp_path / "never"
    suite = write_suite(tmp_path / "s.toml", SUITE.format(flag=flag))

    # 1. Ctrl-C: `a` is interrupted; `b`, which it waited for, never ran (audit said missing, exit 1).
    run = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path)
    background.append(run)
    wait_for(lambda: kinds(run_dir, "started", "a"), 60, "a to start")
    os.kill(run.pid, signal.SIGINT)
    finish(run, 90)
    assert_nothing_left(run_dir)
    code, a, text = audit(run_dir, tmp_path)
    assert statuses(a) == {"a": "interrupted", "b": "not run"}, text
    assert a["steps"]["b"]["reason"] == "the fleet went down before it ran"
    assert code == 0 and a["missing"] == [], text  # outcomes, as interrupted ones are

    # 2. SIGKILL of the coordinator while `a` runs: the journal says it started (audit said
    # the session-1 interruption, or missing, skipping a dead holder's journal).
    run = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path)
    background.append(run)
    wait_for(lambda: len(kinds(run_dir, "started", "a")) == 2, 60, "a to start again")
    wait_for(lambda: any(j.running.get("a") for j in records.read_journals(run_dir).each if not j.sealed), 30,
             "a's start in the journal")
    killed_start = [e for e in events(run_dir) if e.get("kind") == "fleet_starting"][-1]
    fleet_pid, killed_fleet = killed_start["pid"], killed_start["fleet"]
    os.kill(fleet_pid, signal.SIGKILL)
    assert_nothing_left(run_dir, timeout=15.0)
    finish(run, 60)
    code, a, text = audit(run_dir, tmp_path)
    assert statuses(a) == {"a": "running", "b": "not run"}, text
    assert a["steps"]["a"]["fresh"] is False and "its fleet is gone (stale)" in a["steps"]["a"]["reason"], text
    assert code == 0, text

    # 3. The next fleet replays the dead one's journal and records `a`'s attempt lost: that,
    # newer than the interruption, is what audit says.
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60)
    code, a, text = audit(run_dir, tmp_path)
    assert statuses(a) == {"a": "lost", "b": "not run"}, text
    assert a["steps"]["a"]["attempts"] == 1 and "ended while it ran" in a["steps"]["a"]["reason"], text
    assert code == 0, text

    # 4. Run again to the end: `a` succeeded, and its lost attempt, which may have run to
    # its end (side effects twice), is still said (before 2026-12-07 only the count was).
    flag.touch()
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    code, a, text = audit(run_dir, tmp_path)
    assert statuses(a) == {"a": "succeeded", "b": "succeeded"}, text
    killed = a["steps"]["a"]
    assert killed["attempts"] == 2 and killed["may_have_run"] == [1], text
    assert killed["reason"].startswith(f"attempt 1 in fleet {killed_fleet} was lost and may have run to its end: "
                                       f"its fleet ({killed_fleet}, pid {fleet_pid} on "), text
    assert f"succeeded   a  (attempt 1 in fleet {killed_fleet} was lost" in text, text
    assert code == 0, text
    assert_nothing_left(run_dir)


def test_audit_refuses_a_file_that_is_no_event_stream_as_report_does(tmp_path):
    for name, content in (("garbage", b"not a record\n" * 20 + os.urandom(3000)), ("empty", b"")):
        d = tmp_path / name
        d.mkdir()
        (d / "events.jsonl").write_bytes(content)
        t = fleet("audit", str(d), cwd=tmp_path, timeout=60)
        j = fleet("audit", str(d), "--json", cwd=tmp_path, timeout=60)
        assert (t.returncode, j.returncode) == (2, 2), (name, t.stdout, t.stderr)
        assert "no steps" not in t.stdout and "error" in json.loads(j.stdout), (name, j.stdout)
        why = ("is not a fleet event stream" if name == "garbage" else "an empty events.jsonl")
        assert why in t.stderr, (name, t.stderr)
