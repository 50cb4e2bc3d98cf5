"""Two array tables of a suite, one depending on the other step by step, submitted to
a real local fleet: every step runs exactly once; run again, every step is skipped by
its done marker; with one step's directory gone, that step and its dependent run again, and
nothing else (the submission path's shortcuts for a first run and for a suite whose
setup order already has every dep first: fleet.control.submissions, fleet.core.graph)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from fleetharness import assert_nothing_left, events, fleet, write_suite


N = 1500


def ran(run_dir: Path) -> Counter:
    path = run_dir / "runs.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def test_two_arrays_of_1500_steps_each_run_once_then_skip_then_rerun_only_what_lost_its_marker(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "arrays.toml", f'''
[suite]
name = "arrays"
run_dir = "{run_dir}"

[[steps]]
id = "a/{{i}}"
array = "1-{N}"
call = "fleet_steps:count_runs"

[[steps]]
id = "b/{{i}}"
array = "1-{N}"
call = "fleet_steps:count_runs"
deps = ["a/{{i}}"]
''')
    everything = {f"{t}/{i}" for t in "ab" for i in range(1, N + 1)}
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, check=True, timeout=120)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        counts = ran(run_dir)
        assert set(counts) == everything and set(counts.values()) == {1}
        order = [line for line in (run_dir / "runs.txt").read_text().split()]
        first = {sid: n for n, sid in enumerate(order)}
        assert all(first[f"a/{i}"] < first[f"b/{i}"] for i in range(1, N + 1))  # each dep ran before its dependent

        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=300)
        assert r.returncode == 0 and f", {2 * N} already done" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
        assert ran(run_dir) == counts

        shutil.rmtree(run_dir / "steps" / "a" / "7")  # (a fleet alone takes markers from its journals)
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=300)
        assert r.returncode == 0 and f", {2 * N - 2} already done" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
        assert ran(run_dir) - counts == Counter({"a/7": 1, "b/7": 1})
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    exits = Counter(r["step"] for r in events(run_dir) if r["kind"] == "exit")
    assert sum(exits.values()) == 2 * N + 2 and exits["a/7"] == exits["b/7"] == 2
    assert_nothing_left(run_dir)
