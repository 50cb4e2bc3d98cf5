"""`fleet audit` through the real command: reruns (forced, changed) are counted as
reruns, not DUPLICATE, and a healthy run directory audits with exit 0; with no
--suite, every step of every recorded submission is audited, so a shard that never
started shows its steps as missing."""

from __future__ import annotations

import json
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, write_suite

from fleet.control import store
from fleet.wire import manifest, records

SUITE = """
[suite]
name = "audited"
[[steps]]
id = "a"
call = "fleet_steps:nap"
args = {{ seconds = {seconds} }}
[[steps]]
id = "b"
call = "fleet_steps:nap"
args = {{ seconds = 0.05 }}
deps = ["a"]
"""


def audit(run_dir: Path, cwd: Path, *extra: str) -> tuple[int, dict, str]:
    """(exit status, the --json answer, the text answer)."""
    j = fleet("audit", str(run_dir), "--json", *extra, cwd=cwd, timeout=60)
    t = fleet("audit", str(run_dir), *extra, cwd=cwd, timeout=60)
    assert j.returncode == t.returncode, (j.stdout, t.stdout)
    return j.returncode, json.loads(j.stdout), t.stdout


def test_a_forced_rerun_against_fleet_up_is_audited_as_a_rerun_not_a_duplicate_and_audit_exits_0(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE.format(seconds=0.05))
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--force", cwd=tmp_path, check=True, timeout=90)
        assert "already done" not in r.stdout, r.stdout
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and a["ok"], text
    assert a["duplicates"] == [] and a["missing"] == []
    assert sorted(a["reruns"]) == ["a", "b"]
    for s in ("a", "b"):
        assert a["steps"][s]["status"] == "succeeded"
        assert (a["steps"][s]["successes"], a["steps"][s]["reruns"], a["steps"][s]["duplicates"]) == (2, 1, 0)
    assert "DUPLICATE" not in text and "rerun 1 time(s)" in text, text
    # The forced submission is on record, with the whole suite's steps.
    forced = [m for m in manifest.read_all(run_dir) if m.force]
    assert len(forced) == 1 and forced[0].steps == ("a", "b") and forced[0].name == "audited"
    assert_nothing_left(run_dir)


def test_a_step_run_again_by_removing_its_directory_is_audited_as_a_rerun_on_a_new_fleet_and_a_live_one(tmp_path):
    # (the user guide's `rm -rf run/steps/<id>`: audit said DUPLICATE and exited 1)
    import shutil
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE.format(seconds=0.05))
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    shutil.rmtree(run_dir / "steps" / "a")  # a again, and b after it (its dependency ran again)
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        shutil.rmtree(run_dir / "steps" / "b")
        fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and a["duplicates"] == [], text
    assert (a["steps"]["a"]["successes"], a["steps"]["a"]["reruns"]) == (2, 1), a["steps"]["a"]
    assert (a["steps"]["b"]["successes"], a["steps"]["b"]["reruns"]) == (3, 2), a["steps"]["b"]
    assert {t.get("rerun") for t in records.attempts(run_dir, "a")} == {"", "removed"}
    assert_nothing_left(run_dir)


def test_a_step_rerun_because_its_definition_changed_is_a_rerun_and_two_unasked_successes_are_a_duplicate(
        tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE.format(seconds=0.05))
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    write_suite(suite, SUITE.format(seconds=0.1))  # a's definition changed: it runs again
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0, text
    assert (a["steps"]["a"]["successes"], a["steps"]["a"]["reruns"]) == (2, 1)
    # b ran against the a before: it runs again too, a rerun for a changed dependency.
    assert (a["steps"]["b"]["successes"], a["steps"]["b"]["reruns"]) == (2, 1)
    assert {t.get("rerun") for t in records.attempts(run_dir, "b")} == {"", "dependency changed"}
    # One more success of b's same definition that nobody asked for: exactly-once broke.
    last = max(records.attempts(run_dir, "b"), key=lambda t: t["ended_at"])
    store.record_attempt(run_dir, "b", "another-fleet", 1, {**last, "fleet": "another-fleet", "rerun": "",
                                                            "ended_at": last["ended_at"] + 1})
    code, a, text = audit(run_dir, tmp_path)
    assert code == 1 and a["duplicates"] == ["b"], text
    assert "DUPLICATE: 3 successful attempts" in text
    assert_nothing_left(run_dir)


def test_with_no_suite_audit_covers_every_recorded_submission_so_a_shard_that_never_ran_shows_missing(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "sharded"
[[steps]]
id = "t{i}"
array = "0-3"
task = "{i}"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
""")
    fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "0/2", cwd=tmp_path, check=True, timeout=90)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 1, text
    assert {s: v["status"] for s, v in a["steps"].items()} == {
        "t0": "succeeded", "t1": "missing", "t2": "succeeded", "t3": "missing"}
    assert sorted(a["missing"]) == ["t1", "t3"]
    [m] = manifest.read_all(run_dir)
    assert (m.shard, m.steps, m.force) == ("0/2", ("t0", "t1", "t2", "t3"), False)
    fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "1/2", cwd=tmp_path, check=True, timeout=90)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and a["missing"] == [] and a["counts"] == {"succeeded": 4}, text
    assert_nothing_left(run_dir)


def test_a_definition_changed_while_its_old_one_runs_on_a_live_fleet_is_audited_as_a_rerun(tmp_path, background):
    """The old definition is let finish, then the new one runs: two successes of two
    definitions, each attempt recorded under the definition that ran."""
    from fleetharness import events, finish, spawn, wait_for
    run_dir = tmp_path / "run"
    go = tmp_path / "go"
    one = write_suite(tmp_path / "one.toml", '[suite]\nname = "c"\n[[steps]]\nid = "c"\n'
                                             f'command = "while ! test -e {go}; do sleep 0.1; done; echo v1"\n')
    two = write_suite(tmp_path / "two.toml", '[suite]\nname = "c"\n[[steps]]\nid = "c"\ncommand = "echo v2"\n')
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        first = spawn("run", str(one), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(first)
        wait_for(lambda: any(e["kind"] == "started" and e["step"] == "c" for e in events(run_dir)), 60,
                 "the old definition to start")
        second = spawn("run", str(two), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(second)
        wait_for(lambda: sum(e["kind"] == "submitted" for e in events(run_dir)) >= 2 or second.poll() is not None,
                 60, "the new definition to be submitted")
        go.touch()  # the old one ends now
        assert finish(first, 60)[0] == 0 and finish(second, 60)[0] == 0
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    tries = sorted(records.attempts(run_dir, "c"), key=lambda t: t["ended_at"])
    assert [t["outcome"] for t in tries] == ["succeeded", "succeeded"]
    assert tries[0]["spec"] != tries[1]["spec"]  # each under the definition that ran
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and a["duplicates"] == [], text
    assert (a["steps"]["c"]["successes"], a["steps"]["c"]["reruns"]) == (2, 1)
    assert_nothing_left(run_dir)


def test_a_done_step_costs_the_audit_one_directory_read_and_no_file_opened(tmp_path):
    # On a parallel filesystem each look is a metadata operation of milliseconds: a step
    # the journals and its marker say succeeded is read as one listing of its .fleet
    # directory (which holds its marker), nothing opened or looked for one by one.
    import sys

    from fleet.report.audit import audit as do_audit
    n = 40
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f'[suite]\nname = "many"\n[[steps]]\nid = "s/{{i}}"\narray = "1-{n}"\n'
                                             'call = "fleet_steps:nap"\nargs = { seconds = 0 }\n')
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=120)
    seen: list[tuple[str, str]] = []
    watching = [False]

    def hook(event, args):
        if watching[0] and event in ("open", "os.scandir", "os.listdir", "glob.glob"):
            seen.append((event, str(args[0])))
    sys.addaudithook(hook)  # (hooks cannot be removed: this one only listens while watching)
    watching[0] = True
    try:
        a = do_audit(run_dir)
    finally:
        watching[0] = False
    assert a.ok and a.counts == {"succeeded": n}
    per_step = [(e, p) for e, p in seen if f"{run_dir}/steps/" in p]
    assert sorted(per_step) == sorted(("os.scandir", str(records.fleet_dir(run_dir, f"s/{i}")))
                                      for i in range(1, n + 1)), per_step
    assert_nothing_left(run_dir)


def test_a_lean_read_of_the_journals_keeps_every_attempt_and_outcome_with_what_the_audit_reads(tmp_path,
                                                                                               monkeypatch):
    # A failure retried and failed for good (a final), a success, and a forced rerun of
    # it: the lean read (fleet audit's) has the same attempts under the same keys and
    # the same outcomes as the whole read, each record cut to records.LEAN, and the
    # audit from it is the same as from the whole read.
    from fleet.report import audit as A
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "lean"
[[steps]]
id = "bad"
call = "fleet_steps:fail_unless_flag"
args = {{ flag = "{tmp_path / 'no-such-flag'}" }}
retries = 1
[[steps]]
id = "good"
call = "fleet_steps:nap"
args = {{ seconds = 0 }}
""")
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    fleet("run", str(suite), "--run-dir", str(run_dir), "--force", cwd=tmp_path, timeout=120)
    whole, lean = records.read_journals(run_dir), records.read_journals(run_dir, lean=True)
    assert {s: len(a) for s, a in whole.attempts.items()} == {"bad": 4, "good": 2}

    def cut(rec: dict) -> dict:
        return {f: rec[f] for f in records.LEAN if f in rec}
    assert lean.attempts == {s: {k: cut(r) for k, r in a.items()} for s, a in whole.attempts.items()}
    assert lean.outcome == {s: (k, t, cut(r)) for s, (k, t, r) in whole.outcome.items()}
    assert whole.outcome["bad"][0] == "final" and whole.outcome["good"][0] == "done"
    full = A.audit(run_dir)
    real = records.read_journals
    monkeypatch.setattr(records, "read_journals", lambda run_dir, only=None, lean=False: real(run_dir, only))
    assert A.audit(run_dir) == full  # the same audit from the whole read
    assert (full.steps["bad"].status, full.steps["bad"].attempts) == ("failed", 4)
    assert (full.steps["good"].successes, full.steps["good"].reruns) == (2, 1)
    assert_nothing_left(run_dir)


def test_a_damaged_completion_marker_is_not_audited_as_a_success_as_a_run_does_not_take_it_for_one(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE.format(seconds=0.05))
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    import shutil
    shutil.rmtree(run_dir / ".fleet" / "journal")  # the markers alone say what succeeded
    (run_dir / "steps" / "a" / ".fleet" / records.DONE).write_text("{not json")
    code, j, text = audit(run_dir, tmp_path)
    assert code == 1 and "missing     a" in text and "succeeded   b" in text, text
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 0 and "succeeded  a" in r.stdout, r.stdout + r.stderr  # the run reruns it


ONLY = """
[suite]
name = "partial"
[[steps]]
id = "a"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
[[steps]]
id = "b"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
deps = ["a"]
[[steps]]
id = "c"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
"""


def test_steps_a_run_with_only_did_not_select_are_not_selected_not_missing_and_audit_exits_0(tmp_path):
    # (before 2026-12-07 they were `missing`, exit 1: the submission's record named every
    # step of the suite, selected or not)
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", ONLY)
    fleet("run", str(suite), "--run-dir", str(run_dir), "--only", "a", cwd=tmp_path, check=True, timeout=90)
    for extra in ((), ("--suite", str(suite))):
        code, a, text = audit(run_dir, tmp_path, *extra)
        assert code == 0 and a["ok"] and a["missing"] == [], text
        assert {s: v["status"] for s, v in a["steps"].items()} == {
            "a": "succeeded", "b": "not selected", "c": "not selected"}, text
        assert a["counts"] == {"succeeded": 1, "not selected": 2}
        assert "not selected b  (no submission selected it (fleet run --only))" in text, text
    [m] = manifest.read_all(run_dir)
    assert (m.steps, m.only) == (("a", "b", "c"), ("a",))
    # A second selection: b runs (a succeeded); c is still not asked for.
    fleet("run", str(suite), "--run-dir", str(run_dir), "--only", "b", cwd=tmp_path, check=True, timeout=90)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and {s: v["status"] for s, v in a["steps"].items()} == {
        "a": "succeeded", "b": "succeeded", "c": "not selected"}, text
    # A record of before (no selection on it) is read as then: it asked for every step.
    first = manifest.read_all(run_dir)[0]
    old = manifest.path(run_dir, first.fleet, first.submission)
    rec = json.loads(old.read_text())
    old.write_text(json.dumps({k: v for k, v in rec.items() if k != "only"}))
    code, a, text = audit(run_dir, tmp_path)
    assert code == 1 and a["missing"] == ["c"], text
    # The whole suite asked for, and run: c too.
    fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0 and a["counts"] == {"succeeded": 3}, text
    last = manifest.read_all(run_dir)[-1]
    assert last.only is None and '"only"' not in manifest.path(run_dir, last.fleet, last.submission).read_text()
    assert_nothing_left(run_dir)


def test_a_shard_run_with_only_leaves_the_other_shards_steps_not_selected_and_a_whole_shard_missing(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "sharded"
[[steps]]
id = "t{i}"
array = "0-3"
task = "{i}"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
""")
    fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "0/2", "--only", "t0", cwd=tmp_path, check=True,
          timeout=90)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 0, text
    assert {s: v["status"] for s, v in a["steps"].items()} == {
        "t0": "succeeded", "t1": "not selected", "t2": "not selected", "t3": "not selected"}, text
    # Shard 1 asked for whole, never started: its steps are missing, as before.
    fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "0/2", cwd=tmp_path, check=True, timeout=90)
    code, a, text = audit(run_dir, tmp_path)
    assert code == 1 and sorted(a["missing"]) == ["t1", "t3"], text
    assert a["steps"]["t2"]["status"] == "succeeded"
    assert_nothing_left(run_dir)
