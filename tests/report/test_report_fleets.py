"""`fleet report` of real runs where one fleet took a suite twice, and where two fleets
(the two shards of a suite) shared a run directory at the same time."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from fleet.report.trace import validate
from fleetharness import assert_nothing_left, events, finish, fleet, spawn, two_fleets_gated, wait_for, write_suite

TWICE = """
[suite]
name = "twice"
[[steps]]
id = "a"
call = "fleet_steps:nap"
args = { seconds = 0.3 }
[[steps]]
id = "b"
call = "fleet_steps:nap"
deps = ["a"]
args = { seconds = 0.3 }
[[steps]]
id = "c"
command = "exit 3"
[[steps]]
id = "d"
command = "exit 4"
retries = 1
"""


def report(run_dir: Path, *extra: str, cwd: Path) -> dict:
    r = fleet("report", str(run_dir), "--json", *extra, cwd=cwd, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_suite_run_twice_in_one_fleet_reports_what_ran_and_labels_only_the_fleets_retries(tmp_path):
    suite = write_suite(tmp_path / "s.toml", TWICE)
    run = tmp_path / "run"
    env = {"FLEET_RUN_DIR": str(run)}
    up = fleet("up", "--local", cwd=tmp_path, timeout=120, environ=env)
    assert up.returncode == 0, up.stderr
    try:
        for _ in range(2):
            r = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ=env)
            assert r.returncode == 1, r.stderr  # c and d fail
        j = report(run, cwd=tmp_path)
        text = fleet("report", str(run), cwd=tmp_path, timeout=60).stdout
    finally:
        down = fleet("down", cwd=tmp_path, timeout=120, environ=env)
    assert down.returncode == 0, down.stderr
    assert j["sessions"] == 1
    # a and b ran and succeeded in this session: the second run's skips do not hide it.
    assert {k: v["outcome"] for k, v in j["steps"].items()} == {"a": "succeeded", "b": "succeeded",
                                                                "c": "failed", "d": "failed"}
    probs = [(p["step"], p["attempt"], p["retried"], p.get("again")) for p in j["problems"]]
    assert sorted(probs, key=str) == sorted([
        ("c", 1, False, "submitted again"), ("c", 1, False, None),  # c has no retries: run again, not retried
        ("d", 1, True, None), ("d", 2, False, "submitted again"), ("d", 1, True, None), ("d", 2, False, None),
    ], key=str)
    assert "failed     c on node1 (attempt 1, submitted again): exit status 3" in text
    assert_nothing_left(run)


FLAKY = """
[suite]
name = "flaky"
[[steps]]
id = "flaky"
command = "test -e {ok} || exit 1"
[[steps]]
id = "dep"
command = "true"
deps = ["flaky"]
"""


def test_a_step_blocked_then_submitted_again_waits_for_its_dependency_only_from_each_submission(tmp_path):
    # (before 2026-12-06 `dep` waited "for a dependency" from its first submission to its
    # start in the second run, the time it was blocked and the fleet idle included)
    ok = tmp_path / "ok"
    suite = write_suite(tmp_path / "s.toml", FLAKY.format(ok=ok))
    run = tmp_path / "run"
    env = {"FLEET_RUN_DIR": str(run)}
    up = fleet("up", "--local", cwd=tmp_path, timeout=120, environ=env)
    assert up.returncode == 0, up.stderr
    try:
        first = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ=env)
        assert first.returncode == 1, first.stdout + first.stderr  # flaky failed, dep blocked
        ok.touch()
        second = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ=env)
        assert second.returncode == 0, second.stdout + second.stderr
        j = report(run, cwd=tmp_path)
    finally:
        down = fleet("down", cwd=tmp_path, timeout=120, environ=env)
    assert down.returncode == 0, down.stderr
    recs = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e.get("step") == "dep"]
    declared = [e["t"] for e in recs if e["kind"] == "step"]
    [blocked] = [e["t"] for e in recs if e["kind"] == "blocked"]
    [start] = [e["t"] for e in recs if e["kind"] == "start"]
    assert len(declared) == 2 and declared[0] <= blocked < declared[1] - 0.05 <= start, recs
    waited = (blocked - declared[0]) + (start - declared[1])  # for flaky, in each run; blocked in between
    assert j["steps"]["dep"]["waited_s"] == pytest.approx(waited, abs=1e-5)
    assert j["waits"]["dependency"]["step_s"] <= waited + 1e-5, j["waits"]
    # flaky, failed and submitted again, waits from each submission to its start (before, only the first)
    fl = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e.get("step") == "flaky"]
    d, st = [e["t"] for e in fl if e["kind"] == "step"], [e["t"] for e in fl if e["kind"] == "start"]
    assert j["steps"]["flaky"]["waited_s"] == pytest.approx((st[0] - d[0]) + (st[1] - d[1]), abs=1e-5)
    for st in j["stretches"]:  # the idle time between the runs is no wait of dep's
        assert all(w["waited_s"] <= max(blocked - declared[0], start - declared[1]) + 1e-5
                   for w in st["steps"] if w["step"] == "dep"), st
    assert_nothing_left(run)


ONE = """
[suite]
name = "one"
[[steps]]
id = "a"
command = "true"
"""


def test_a_step_skipped_as_done_then_forced_waits_from_the_forced_submission_not_between_the_runs(tmp_path):
    # (before 2026-12-07 it waited "for its turn" from the submission that skipped it to
    # its forced start: the time between the runs, the fleet idle, an idle stretch blamed on it)
    suite = write_suite(tmp_path / "s.toml", ONE)
    run = tmp_path / "run"
    env = {"FLEET_RUN_DIR": str(run)}
    first = fleet("run", str(suite), cwd=tmp_path, timeout=120, environ=env)  # a succeeds, before the session
    assert first.returncode == 0, first.stdout + first.stderr
    up = fleet("up", "--local", cwd=tmp_path, timeout=120, environ=env)
    assert up.returncode == 0, up.stderr
    try:
        skipped = fleet("run", str(suite), "--only", "a", cwd=tmp_path, timeout=120, environ=env)
        assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout + skipped.stderr
        forced = fleet("run", str(suite), "--only", "a", "--force", cwd=tmp_path, timeout=120, environ=env)
        assert forced.returncode == 0 and "1 succeeded" in forced.stdout, forced.stdout + forced.stderr
        j = report(run, cwd=tmp_path)
    finally:
        down = fleet("down", cwd=tmp_path, timeout=120, environ=env)
    assert down.returncode == 0, down.stderr
    ours = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e.get("step") == "a"]
    [fleet_up] = {e["fleet"] for e in ours if e["kind"] == "skipped"}  # (the first run's fleet ran it)
    recs = [e for e in ours if e["fleet"] == fleet_up]
    declared = [e["t"] for e in recs if e["kind"] == "step"]
    [skip] = [e["t"] for e in recs if e["kind"] == "skipped"]
    [start] = [e["t"] for e in recs if e["kind"] == "start"]
    assert len(declared) == 2 and declared[0] <= skip < declared[1] <= start, recs
    assert j["steps"]["a"]["outcome"] == "succeeded"
    waited = (skip - declared[0]) + (start - declared[1])  # until the skip, and from the forced submission
    assert j["steps"]["a"]["waited_s"] == pytest.approx(waited, abs=1e-5)
    for st in j["stretches"]:  # the idle time between the runs is no wait of a's
        assert all(w["waited_s"] <= max(skip - declared[0], start - declared[1]) + 1e-5
                   for w in st["steps"] if w["step"] == "a"), st
    assert_nothing_left(run)


def sharded(gate: Path) -> str:
    """13 steps of 0.8 s, the last 5 after the first 5, each waiting for the file `gate` first."""
    return "[suite]\nname = \"sharded\"\nrun_dir = \"run\"\n" + "".join(
        f'[[steps]]\nid = "w{i}"\ncall = "fleet_steps:nap"\nargs = {{ seconds = 0.8, gate = "{gate}" }}\n'
        + (f'deps = ["w{i - 8}"]\n' if i >= 8 else "") for i in range(13))


def test_two_shards_at_once_on_one_run_directory_report_every_step_and_each_fleets_own_node(tmp_path):
    gate = tmp_path / "go"
    suite = write_suite(tmp_path / "s.toml", sharded(gate))
    run = tmp_path / "run"
    ps: list = []

    def shard(i: int):
        ps.append(spawn("run", str(suite), "--shard", f"{i}/2", cwd=tmp_path))
        return ps[-1]

    try:
        # The steps wait until both shards have started one: the shards overlap however
        # late the second comes up (shard 0 alone ends in a few seconds).
        two_fleets_gated(run, gate, lambda: shard(0), lambda: shard(1))
        for p in ps:
            rc, out, err = finish(p, timeout=180)
            assert rc == 0, out + err
    finally:
        for p in ps:  # (the other shard, if one failed)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate(timeout=30)
    trace = tmp_path / "t.json"
    j = report(run, "--trace", str(trace), cwd=tmp_path)
    assert j["sessions"] == 1, "the shards did not overlap: the test would prove nothing"
    assert j["counts"] == {"succeeded": 13}  # each ran once, in one fleet or the other
    fleets = {e["fleet"] for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())}
    assert sorted(j["nodes"]) == sorted(f"node1@{f}" for f in fleets) and len(fleets) == 2
    u = j["utilization"]
    assert 0 < u["overall"]["cores_held"] <= 1
    assert all(0 < n["cores_held"] <= 1 for n in u["nodes"].values()), u["nodes"]
    assert validate(json.loads(trace.read_text())) == []
    assert_nothing_left(run)


# Each step waits for the test's word (a file), so that both fleets hold steps when one is
# killed however slowly the second comes up (a 0.4 s nap let a loaded machine's first
# fleet finish all of them before the second started one: a 60 s wait, then a failure).
KILLED = """
[suite]
name = "killed"
run_dir = "run"
[[steps]]
id = "x/{{i}}"
array = "0-29"
call = "fleet_steps:wait_for_file"
args = {{ path = "{go}", timeout = 120 }}
"""


def test_a_fleet_killed_beside_another_on_its_run_directory_is_reported_gone_not_in_progress(tmp_path):
    # (the survivor took its steps over but wrote no fleet_gone: the report stayed "in
    # progress" until yet another fleet took the dead one's lease)
    from fleetharness import events, wait_for
    go = tmp_path / "go"
    suite = write_suite(tmp_path / "s.toml", KILLED.format(go=go))
    run = tmp_path / "run"
    first = spawn("run", str(suite), cwd=tmp_path)
    second = None
    try:
        wait_for(lambda: any(e["kind"] == "started" for e in events(run)), 60, "the first fleet to start a step")
        second = spawn("run", str(suite), cwd=tmp_path)
        wait_for(lambda: len([e for e in events(run) if e["kind"] == "fleet_starting"]) == 2
                 and len({e["fleet"] for e in events(run) if e["kind"] == "started"}) == 2, 60,
                 "the second fleet to start a step beside the first")
        dead = next(e for e in events(run) if e["kind"] == "fleet_starting")
        os.kill(dead["pid"], signal.SIGKILL)
        go.touch()
        rc, out, err = finish(second, timeout=180)
        assert rc == 0, out + err
        finish(first, timeout=60)
    finally:
        go.touch()
        for p in (first, second):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate(timeout=30)
    gone = [e for e in events(run) if e["kind"] == "fleet_gone"]
    assert [e["gone"] for e in gone] == [dead["fleet"]] and gone[0]["pid"] == dead["pid"], gone
    j = report(run, cwd=tmp_path)
    assert not j["in_progress"] and any(dead["fleet"] in n for n in j["notes"]), j["notes"]
    assert j["counts"].get("succeeded") == 30, j["counts"]
    assert_nothing_left(run)


def test_a_fleet_killed_then_followed_by_a_rerun_keeps_its_nodes_live_time_and_utilization(tmp_path):
    # The rerun's fleet_gone is dated by the dead lease's last refresh (every stale_after/4),
    # which for a fleet killed within its first minutes is before its own fleet_up: the
    # dead fleet ended there, its nodes alive 0 s, its utilization "-". It ends no sooner
    # than the last record it wrote.
    from fleetharness import events, wait_for
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "k2"\nrun_dir = "run"\n[[steps]]\nid = "q/{i}"\n'
                        'array = "0-399"\ncall = "fleet_steps:nap"\nargs = { seconds = 0.05 }\n')
    run = tmp_path / "run"
    first = spawn("run", str(suite), "--nodes", "2", cwd=tmp_path)
    try:
        wait_for(lambda: len([e for e in events(run) if e["kind"] == "exit"]) >= 20, 90, "twenty steps to end")
        dead = next(e for e in events(run) if e["kind"] == "fleet_starting")
        os.kill(dead["pid"], signal.SIGKILL)
        rc, out, err = finish(first, timeout=90)
        assert rc != 0, out + err
        rc, out, err = finish(spawn("run", str(suite), "--nodes", "2", cwd=tmp_path), timeout=180)
        assert rc == 0, out + err
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate(timeout=30)
    ev = events(run)
    # Its nodes were alive (in the wall window, from the first submission) until its last step's end at least.
    submitted = next(e["t"] for e in ev if e["kind"] == "submitted")
    lived = max(e["t"] for e in ev if e["kind"] == "exit" and e["fleet"] == dead["fleet"]) - submitted
    j = report(run, "--session", "1", cwd=tmp_path)
    assert not j["in_progress"] and any(dead["fleet"] in n for n in j["notes"]), j["notes"]
    assert len(j["utilization"]["nodes"]) == 2, j["utilization"]
    for name, nu in j["utilization"]["nodes"].items():
        assert nu["alive_s"] >= lived - 0.001 and 0 < nu["cores_held"] <= 1, (name, nu, lived)
    assert 0 < j["utilization"]["overall"]["cores_held"] <= 1, j["utilization"]
    text = fleet("report", str(run), "--session", "1", cwd=tmp_path, timeout=60).stdout
    assert "cores - held" not in text, text
    assert_nothing_left(run)


SPLIT = """
[suite]
name = "split"
run_dir = "run"
[defaults]
command = "sleep 0.3"
[[steps]]
id = "a"
task = "0"
[[steps]]
id = "c"
task = "2"
deps = ["a"]
[[steps]]
id = "d"
task = "3"
command = "exit 3"
[[steps]]
id = "e"
task = "2"
deps = ["d"]
"""


def test_a_dependency_another_shard_ran_is_named_with_its_shard_and_its_outcome_not_another_fleet(tmp_path):
    # (before 2026-12-06 "dependency d (another fleet runs it) not done", though its fleet
    # had ended and d had failed there)
    suite = write_suite(tmp_path / "s.toml", SPLIT)
    first = fleet("run", str(suite), "--shard", "1/2", "--nodes", "1", cwd=tmp_path, timeout=120)
    assert first.returncode == 1, first.stdout + first.stderr  # d failed
    second = fleet("run", str(suite), "--shard", "0/2", "--nodes", "1", cwd=tmp_path, timeout=120)
    assert second.returncode == 1 and "(shard 1/2's step)" in second.stdout, second.stdout + second.stderr
    j = report(tmp_path / "run", cwd=tmp_path)
    assert j["steps"]["e"]["outcome"] == "blocked" and j["steps"]["e"]["waited_for"] == "dependency", j["steps"]
    # e waited until its fleet heard how d ended (a core was idle: a and c take one of two)
    whys = {w["why"] for st in j["stretches"] for w in st["steps"] if w["step"] == "e"}
    assert whys == {"dependency d (shard 1/2's step, failed) not done"}, j["stretches"]
    assert_nothing_left(tmp_path / "run")



# `late` is killed once the test says so, after the second fleet found it held; `hold`
# keeps the first fleet up until then (a step that failed before the second fleet came
# would be run again there: its claim is free).
HELD = """
[suite]
name = "held"
run_dir = "run"
[[steps]]
id = "hold"
command = "until test -e ../../end; do sleep 0.1; done"
[[steps]]
id = "late"
command = "until test -e ../../go; do sleep 0.1; done; kill -KILL $$"
"""


def test_a_fleet_waiting_on_another_fleets_claim_leaves_the_step_the_outcome_the_fleet_that_ran_it_recorded(
        tmp_path):
    # (before 2026-12-07 the waiting fleet's exit record, `failed` "terminated in fleet
    # F: ...", replaced the outcome of the fleet that ran it: `fleet report` said failed,
    # `fleet audit` terminated)
    suite = write_suite(tmp_path / "s.toml", HELD)
    run = tmp_path / "run"

    def seen(kind: str, step: str, by: bool = False) -> bool:
        return any(e["kind"] == kind and e.get("step") == step and bool(e.get("by")) == by for e in events(run))

    ps = [spawn("run", str(suite), cwd=tmp_path)]
    try:
        wait_for(lambda: seen("started", "late") and seen("started", "hold"), 60, "the first fleet to start both")
        ps.append(spawn("run", str(suite), cwd=tmp_path))
        wait_for(lambda: seen("elsewhere", "late"), 60, "the second fleet to find late held")
        (run / "go").touch()
        wait_for(lambda: seen("exit", "late", by=True), 60, "the second fleet to take late's end")
        (run / "end").touch()
        for p in ps:
            rc, out, err = finish(p, timeout=120)
            assert rc == 1, out + err
    finally:
        for p in ps:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate(timeout=30)
    [by] = [e for e in events(run) if e["kind"] == "exit" and e.get("by")]
    assert by["outcome"] == "failed" and by["reason"].startswith("terminated in fleet "), by  # (what it says)
    j = report(run, cwd=tmp_path)
    assert j["sessions"] == 1
    assert j["counts"] == {"succeeded": 1, "terminated": 1}, j["counts"]
    [p] = j["problems"]
    assert (p["step"], p["outcome"], p.get("again")) == ("late", "terminated", None), p
    assert p["reason"].startswith("killed by SIGKILL"), p
    text = fleet("report", str(run), cwd=tmp_path, timeout=60).stdout
    assert "steps         2: 1 succeeded, 1 terminated" in text, text
    audit = fleet("audit", str(run), cwd=tmp_path, timeout=60)
    assert audit.stdout.splitlines()[-1] == "1 succeeded, 1 terminated", audit.stdout + audit.stderr
    assert_nothing_left(run)
