"""Reruns of steps whose directories exist (failed before, --force) take the lease and
journal path as fresh steps do: no per-step claim, no attempt file, each step once,
its attempts counted on from what earlier fleets recorded; and a run directory an
older layout wrote with per-step claims and attempt files still reruns correctly.
Real `fleet run` processes (each an embedded fleet), real fork, real files."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.control.checks import checked_suite
from fleet.wire import events as E
from fleet.wire import records as R


def suite_of(tmp_path: Path, flag: Path, seen: Path) -> Path:
    """s1..s6; s1-s3 fail while `flag` is missing. Every run of a step writes a line to
    `seen`: its id, then what its .fleet directory holds while it runs."""
    return write_suite(tmp_path / "s.toml", f"""
[suite]
name = "rerun"
run_dir = "run"
[[steps]]
id = "s{{i}}"
array = "1-6"
retries = 0
command = ["sh", "-c", "echo $FLEET_STEP $(ls -a $FLEET_RUN_DIR/steps/$FLEET_STEP/.fleet) >> {seen}; case $FLEET_STEP in s1|s2|s3) test -e {flag};; esac"]
""")


def runs_seen(seen: Path) -> list[list[str]]:
    return [line.split() for line in seen.read_text().splitlines()] if seen.exists() else []


def per_step_files(run_dir: Path) -> list[str]:
    """Per-step claim, adoption and attempt files in any step's .fleet directory."""
    return sorted(str(p.relative_to(run_dir)) for p in (run_dir / "steps").glob("*/.fleet/*")
                  if p.name == R.CLAIM or p.name.startswith(("adopt.", R.ATTEMPT)))


def run(suite: Path, *extra: str) -> subprocess.CompletedProcess:
    return fleet("run", str(suite), "--nodes", "2", *extra, cwd=suite.parent, timeout=90)


def test_a_rerun_of_failed_steps_and_a_forced_rerun_take_no_per_step_claim_and_run_each_step_once(tmp_path):
    flag, seen = tmp_path / "flag", tmp_path / "seen.txt"
    suite = suite_of(tmp_path, flag, seen)
    run_dir = tmp_path / "run"
    r = run(suite)
    assert r.returncode == 1 and r.stdout.count("failed ") >= 3, r.stdout + r.stderr
    first = len(runs_seen(seen))
    assert first == 6
    flag.write_text("go")
    # A new fleet on the run directory: s1-s3 have directories (and final.json) on disk.
    r = run(suite)
    assert r.returncode == 0, r.stdout + r.stderr
    again = runs_seen(seen)[first:]
    assert sorted(x[0] for x in again) == ["s1", "s2", "s3"]
    assert not [x for x in again if R.CLAIM in x[1:]], again  # no claim while it ran
    assert per_step_files(run_dir) == []
    for s in ("s1", "s2", "s3"):  # the failed attempt and this one: attempts counted on
        assert [a["outcome"] for a in sorted(R.attempts(run_dir, s), key=lambda a: a["ended_at"])] == [
            "failed", "succeeded"]
    # Forced: every step runs once more, still without a claim or an attempt file.
    r = run(suite, "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    forced = runs_seen(seen)[first + 3:]
    assert sorted(x[0] for x in forced) == [f"s{i}" for i in range(1, 7)]
    assert not [x for x in forced if R.CLAIM in x[1:]], forced
    assert per_step_files(run_dir) == []
    assert {s: len(R.attempts(run_dir, s)) for s in (f"s{i}" for i in range(1, 7))} == {
        "s1": 3, "s2": 3, "s3": 3, "s4": 2, "s5": 2, "s6": 2}
    assert all(R.is_done(run_dir, spec) for spec in checked_suite(suite, check_inputs=False)[0].steps)
    a = fleet("audit", str(run_dir), cwd=tmp_path, timeout=60)
    assert a.returncode == 0 and "DUPLICATE" not in a.stdout, a.stdout + a.stderr
    assert_nothing_left(run_dir)


def _old_layout(run_dir: Path, suite: Path, dead_pid: int) -> None:
    """Per-step files as a fleet before the lease and the journal left them: attempt
    files and final.json for failed steps, a success's done.json, and the claim a fleet
    killed -9 never released (its pid is gone)."""
    specs = {s.id: s for s in checked_suite(suite, check_inputs=False)[0].steps}
    now = time.time() - 30
    old = {"fleet": "old-1", "host": socket.gethostname()}

    def put(step: str, name: str, rec: dict) -> None:
        d = R.fleet_dir(run_dir, step)
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(json.dumps(rec))

    for step, n in (("s1", 1), ("s2", 2), ("s3", 1)):
        for a in range(1, n + 1):
            put(step, f"{R.ATTEMPT}old-1.{a}.json", {**old, "attempt": a, "outcome": "failed", "exit_code": 1,
                                                      "ended_at": now + a, "spec": R.spec_hash(specs[step])})
        put(step, R.FINAL, {**old, "outcome": "failed", "attempt": n, "at": now + n,
                            "spec": R.spec_hash(specs[step])})
    put("s3", R.CLAIM, {**old, "pid": dead_pid, "attempt": 2, "at": now, "generation": 1, "base": 0})
    for step in ("s4", "s5", "s6"):
        put(step, R.DONE, {**old, "outcome": "succeeded", "attempt": 1, "spec": R.spec_hash(specs[step])})


def test_a_run_directory_an_older_layout_left_with_claims_and_attempt_files_reruns_correctly(tmp_path):
    flag, seen = tmp_path / "flag", tmp_path / "seen.txt"
    flag.write_text("go")
    suite = suite_of(tmp_path, flag, seen)
    run_dir = tmp_path / "run"
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    _old_layout(run_dir, suite, dead.pid)
    r = run(suite, "--max-attempts", "2")
    # s2 had its 2 attempts (limit 2) in the old files: stopped, not run; s1 runs its
    # second; s3's claim (its holder is dead) is adopted and s3 runs; s4-s6 are done.
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 attempts of this definition recorded without success (limit 2)" in r.stdout, r.stdout
    assert Counter(x[0] for x in runs_seen(seen)) == Counter(["s1", "s3"])
    adopted = [e for e in records(run_dir) if isinstance(e, E.Adopted)]
    assert [e.step for e in adopted] == ["s3"] and adopted[0].previous["pid"] == dead.pid
    assert {s: len(R.attempts(run_dir, s)) for s in ("s1", "s2", "s3")} == {"s1": 2, "s2": 2, "s3": 2}
    assert not (R.fleet_dir(run_dir, "s3") / R.CLAIM).exists()  # released once s3 ended here
    # s1 went through the journal: no new per-step file beside the old ones.
    assert sorted(p.name for p in R.fleet_dir(run_dir, "s1").glob(f"{R.ATTEMPT}*")) == ["attempt.old-1.1.json"]
    for s in ("s1", "s3"):
        assert R.is_done(run_dir, checked_suite(suite, check_inputs=False)[0].step(s))
    assert_nothing_left(run_dir)
