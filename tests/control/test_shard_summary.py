"""`fleet run --shard`'s lines and summary count its own steps, and the other shards'
steps it waits for apart, named with their shard (fleet.control.othershards): before,
"suite 'sh': 9 steps" for a shard of 5, the other shard's steps "skipped", and after an
interrupt "5 not run: run the suite again" of which 4 were the other shard's."""

from __future__ import annotations

import os
import re
import signal

from fleetharness import assert_nothing_left, finish, fleet, spawn, wait_for, write_suite

SUITE = """
[suite]
name = "sh"
[[steps]]
id = "t/{i}"
array = "0-7"
task = "{i}"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
[[steps]]
id = "gather"
task = "0"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
deps = ["t/0", "t/1", "t/2", "t/3", "t/4", "t/5", "t/6", "t/7"]
"""
OTHERS = ["t/1", "t/3", "t/5", "t/7"]


def test_a_shard_counts_and_labels_the_other_shards_steps_it_waited_for_apart_from_its_own(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE)
    fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "1/2", cwd=tmp_path, check=True, timeout=90)
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--shard", "0/2", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "suite 'sh': 5 steps; and 4 steps of other shards it waits for", r.stdout
    numbered = [line for line in lines if re.match(r"\[\d/5\]", line)]
    assert sorted(line.split()[-1] for line in numbered) == ["gather", "t/0", "t/2", "t/4", "t/6"], r.stdout
    assert all("succeeded" in line for line in numbered), r.stdout
    for sid in OTHERS:
        [line] = [x for x in lines if f" {sid} " in x + " "]
        assert line.split() == ["succeeded", sid, "(shard", "1/2's", "step)"], r.stdout
    assert "skipped" not in r.stdout
    assert re.search(r"^suite 'sh': 5 succeeded in [\d.]+ s; of other shards' steps: 4 succeeded$", r.stdout, re.M), \
        r.stdout
    assert_nothing_left(run_dir)


def test_an_interrupted_shard_does_not_count_the_other_shards_steps_among_those_it_did_not_run(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run = spawn("run", str(suite), "--run-dir", str(run_dir), "--shard", "0/2", cwd=tmp_path)
    try:  # its own steps but gather done: gather waits for the other shard, which never comes
        wait_for(lambda: all((run_dir / "steps" / f"t/{i}" / ".fleet" / "done.json").exists() for i in (0, 2, 4, 6)),
                 timeout=60, what="shard 0's own steps")
        os.kill(run.pid, signal.SIGINT)
        code, out, err = finish(run, timeout=90)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=30)
    assert code == 130, out + err
    [summary] = [line for line in out.splitlines() if "interrupted:" in line]
    # (its last successes may not have reached it yet: the five are its own, however they ended)
    m = re.fullmatch(r"suite 'sh': (?:(\d) succeeded|none ended) in [\d.]+ s; interrupted: (\d) running, stopped "
                     r"\(interrupted\), and (\d) not run: run the suite again to finish them \(steps that succeeded "
                     r"are skipped\); of other shards' steps: 4 not ended \(their shards run them\)", summary)
    assert m and sum(int(n or 0) for n in m.groups()) == 5, out
    assert_nothing_left(run_dir)
