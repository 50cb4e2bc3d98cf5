"""--max-attempts counts the attempts that could be the same stuck step: those of the
step's current definition that ended without success since it last succeeded or was
explicitly rerun (--force, or its directory removed). A changed step, a forced one and
a removed one run again; the same definition, rerun as it is, stays stopped (the
protection for a job that resubmits itself). Real `fleet run` processes (each an
embedded fleet), real files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fleetharness import assert_nothing_left, fleet, write_suite

from fleet.control import fold
from fleet.core.suite import suite_from_toml
from fleet.wire import records, spechash

LIMIT = "2"
HB = ("--heartbeat", "0.2", "--heartbeat-timeout", "2")


def suite(tmp_path: Path, command: str, retries: int = 0) -> Path:
    """One step `f` running `command`; each of its runs adds a line to runs.txt."""
    return write_suite(tmp_path / "s.toml", f"""
[suite]
name = "limit"
run_dir = "run"
[[steps]]
id = "f"
retries = {retries}
command = ["sh", "-c", "echo run >> {tmp_path / 'runs.txt'}; {command}"]
""")


def runs(tmp_path: Path) -> int:
    p = tmp_path / "runs.txt"
    return len(p.read_text().splitlines()) if p.exists() else 0


def run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return fleet("run", str(tmp_path / "s.toml"), "--max-attempts", LIMIT, *extra, cwd=tmp_path, timeout=90)


def stop_it(tmp_path: Path, flag: Path) -> None:
    """Fail `f` (it needs `flag`) in two runs, then see the third stop it unrun."""
    suite(tmp_path, f"test -e {flag}")
    for n in (1, 2):
        r = run(tmp_path)
        assert r.returncode == 1 and "failed" in r.stdout and runs(tmp_path) == n, r.stdout + r.stderr
    stopped(run(tmp_path), 2)
    assert runs(tmp_path) == 2


def stopped(r: subprocess.CompletedProcess, n: int) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"stopped    f: {n} attempts of this definition recorded without success (limit {n})" in r.stdout, r.stdout
    assert "change the step, rerun it with --force, or raise --max-attempts (0: no limit)" in r.stdout, r.stdout


def succeeds(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0 and "succeeded" in r.stdout, r.stdout + r.stderr


def test_a_step_stopped_by_the_limit_runs_again_once_its_definition_changes_and_succeeds(tmp_path):
    flag = tmp_path / "flag"
    stop_it(tmp_path, flag)
    suite(tmp_path, "exit 0")  # the fix
    succeeds(run(tmp_path))
    assert runs(tmp_path) == 3
    r = run(tmp_path)  # and it is done
    assert r.returncode == 0 and "skipped" in r.stdout and runs(tmp_path) == 3, r.stdout + r.stderr
    assert_nothing_left(tmp_path / "run")


def test_a_step_that_used_up_the_limit_with_its_retries_in_one_run_runs_again_once_fixed(tmp_path):
    suite(tmp_path, "exit 1", retries=4)  # its limit is then 5: every try of one run
    r = run(tmp_path)
    assert r.returncode == 1 and "failed" in r.stdout and runs(tmp_path) == 5, r.stdout + r.stderr
    r = run(tmp_path)
    assert r.returncode == 1 and "5 attempts of this definition recorded without success (limit 5)" in r.stdout
    assert runs(tmp_path) == 5
    suite(tmp_path, "exit 0", retries=4)
    succeeds(run(tmp_path))
    assert runs(tmp_path) == 6


def test_the_same_definition_rerun_as_it_is_stays_stopped_even_once_it_would_succeed(tmp_path):
    flag = tmp_path / "flag"
    stop_it(tmp_path, flag)
    flag.write_text("go")  # nothing in the step's definition says so: still the stuck step
    for _ in range(2):
        stopped(run(tmp_path), 2)
    assert runs(tmp_path) == 2


@pytest.mark.parametrize("folded", [False, True], ids=["journals", "folded"])
def test_force_runs_a_stopped_step_again_and_later_runs_count_only_from_there(tmp_path, monkeypatch, folded):
    if folded:  # every start folds the journals before: the reset must survive the fold
        monkeypatch.setenv(fold.FOLD_FILES_ENV, "1")
    flag = tmp_path / "flag"
    stop_it(tmp_path, flag)
    r = run(tmp_path, "--force")  # fails again: one attempt since the forced rerun
    assert r.returncode == 1 and "failed" in r.stdout and runs(tmp_path) == 3, r.stdout + r.stderr
    r = run(tmp_path)  # a new fleet reads the forced rerun from the journal: the second attempt since
    assert r.returncode == 1 and "failed" in r.stdout and runs(tmp_path) == 4, r.stdout + r.stderr
    stopped(run(tmp_path), 2)
    flag.write_text("go")
    succeeds(run(tmp_path, "--force"))
    assert runs(tmp_path) == 5
    assert_nothing_left(tmp_path / "run")


def test_removing_a_stopped_steps_directory_runs_it_again(tmp_path):
    flag = tmp_path / "flag"
    stop_it(tmp_path, flag)
    shutil.rmtree(tmp_path / "run" / "steps" / "f")
    r = run(tmp_path)
    assert r.returncode == 1 and "failed" in r.stdout and runs(tmp_path) == 3, r.stdout + r.stderr
    r = run(tmp_path)  # counted from the removal on, in a new fleet too
    assert r.returncode == 1 and "failed" in r.stdout and runs(tmp_path) == 4, r.stdout + r.stderr
    stopped(run(tmp_path), 2)


def test_a_step_that_keeps_succeeding_when_its_dependency_reruns_is_never_stopped(tmp_path):
    write_suite(tmp_path / "s.toml", f"""
[suite]
name = "limit"
run_dir = "run"
[[steps]]
id = "a"
command = "true"
[[steps]]
id = "b"
deps = ["a"]
command = ["sh", "-c", "echo run >> {tmp_path / 'runs.txt'}"]
""")
    succeeds(run(tmp_path))
    for n in (2, 3, 4):  # `a` forced alone, then `b` runs again against its new marker
        succeeds(run(tmp_path, "--force", "--only", "a"))
        succeeds(run(tmp_path))
        assert runs(tmp_path) == n


def test_a_step_that_takes_its_node_down_is_stopped_after_the_limit_and_runs_again_once_changed(tmp_path):
    # Its lost attempts name the definition that ran, though no agent reported them.
    kill_agent = "kill -9 $(cut -d' ' -f4 /proc/$PPID/stat)"  # the step's parent is its zygote, the agent's child
    suite(tmp_path, kill_agent)
    for n in (1, 2):
        r = run(tmp_path, *HB)
        assert r.returncode == 1 and "lost" in r.stdout and runs(tmp_path) == n, r.stdout + r.stderr
    stopped(run(tmp_path, *HB), 2)
    assert runs(tmp_path) == 2
    suite(tmp_path, "exit 0")
    succeeds(run(tmp_path, *HB))
    assert runs(tmp_path) == 3
    assert_nothing_left(tmp_path / "run")


def test_a_step_that_takes_its_fleet_down_is_stopped_after_the_limit_and_runs_again_once_changed(tmp_path):
    # It kills its coordinator (SIGKILL: nothing records its end); the next fleet replays
    # the dead one's journal and counts that attempt as lost, for the definition that ran.
    kill_coordinator = f"pkill -9 -f '[f]leet.control.coordinator.*{tmp_path / 'run'}'; sleep 30"
    suite(tmp_path, kill_coordinator)
    for n in (1, 2):
        r = run(tmp_path, *HB)
        assert r.returncode != 0 and runs(tmp_path) == n, r.stdout + r.stderr
        assert_nothing_left(tmp_path / "run")
    r = run(tmp_path, *HB)
    stopped(r, 2)
    assert runs(tmp_path) == 2
    lost = [r for r in records.read_journals(tmp_path / "run").attempts["f"].values() if r["outcome"] == "lost"]
    assert len(lost) == 2 and all("ended while it ran" in r["reason"] and r["spec"] for r in lost), lost
    suite(tmp_path, "exit 0")
    succeeds(run(tmp_path, *HB))
    assert runs(tmp_path) == 3
    assert_nothing_left(tmp_path / "run")


def test_a_step_stopped_by_an_attempt_fleet_step_recorded_says_so_and_its_report_names_no_log(tmp_path):
    # (the report said "(log: steps/f/log)", a file fleet step never writes, and "1 attempts")
    suite(tmp_path, "exit 7")
    r = fleet("step", str(tmp_path / "s.toml"), "f", "--record", cwd=tmp_path, timeout=90)
    assert r.returncode == 7, r.stdout + r.stderr
    r = fleet("run", str(tmp_path / "s.toml"), "--max-attempts", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 1 and runs(tmp_path) == 1, r.stdout + r.stderr
    said = "1 attempt of this definition recorded without success (by fleet step --record; limit 1)"
    assert f"stopped    f: {said}" in r.stdout, r.stdout
    report = fleet("report", str(tmp_path / "run"), cwd=tmp_path, timeout=60)
    assert report.returncode == 0, report.stdout + report.stderr
    (line,) = [x for x in report.stdout.splitlines() if x.strip().startswith("stopped    f:")]
    assert said in line and "log:" not in line, report.stdout
    assert not (tmp_path / "run" / "steps" / "f" / "log").exists()
    assert_nothing_left(tmp_path / "run")


def test_several_steps_stopped_in_one_pass_with_some_handed_ahead_to_their_nodes_stop_cleanly(tmp_path):
    # Three failing steps on two one-core nodes: the third is queued behind one of the
    # first two. On the rerun every claim says stopped; the queued step, promoted when its
    # predecessor stopped, was said as a Begin with no placement, and acting on it failed
    # (the coordinator logged "acting failed").
    write_suite(tmp_path / "s.toml", """
[suite]
name = "three"
run_dir = "run"
[[steps]]
id = "x{i}"
array = "1-3"
command = ["false"]
""")
    r = fleet("run", str(tmp_path / "s.toml"), "--nodes", "2", "--max-attempts", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 1 and r.stdout.count("failed ") >= 3, r.stdout + r.stderr
    r = fleet("run", str(tmp_path / "s.toml"), "--nodes", "2", "--max-attempts", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 1 and "3 stopped" in r.stdout, r.stdout + r.stderr
    assert "acting failed" not in (tmp_path / "run" / "coordinator.log").read_text()
    assert_nothing_left(tmp_path / "run")


def test_attempts_recorded_before_the_definition_hash_left_out_the_scheduling_fields_still_count(tmp_path):
    # (attempts of versions before 2026-12-06 name the hash of fleet.core.suite.LEGACY_IDENTITY:
    # after the upgrade they counted for nothing and a stopped step ran again, in every run)
    suite(tmp_path, f"test -e {tmp_path / 'flag'}")
    for n in (1, 2):
        r = run(tmp_path)
        assert r.returncode == 1 and "failed" in r.stdout and runs(tmp_path) == n, r.stdout + r.stderr
    # The journals as such a version wrote them: the same lines, each attempt naming the old hash.
    (spec,) = suite_from_toml((tmp_path / "s.toml").read_text(), tmp_path / "s.toml").steps
    new, old = records.spec_hash(spec), spechash.legacy_hash(spec)
    journals = list((tmp_path / "run" / records.JOURNALS).glob("*.jsonl"))
    assert sum(p.read_text().count(f'"spec":"{new}"') for p in journals) >= 2
    for p in journals:
        p.write_text(p.read_text().replace(f'"{new}"', f'"{old}"'))
    stopped(run(tmp_path), 2)
    assert runs(tmp_path) == 2
    assert_nothing_left(tmp_path / "run")
