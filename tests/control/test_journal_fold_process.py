"""A fleet's own journal, rotated mid-run, is folded by a process of its own, not on a
thread of the coordinator (where it held the interpreter lock and set off collections
over the whole heap: the loop stalled for seconds; fleet.control.foldproc). Through a
real `fleet run`, with the coordinator's turn trace (fleet.control.turntrace) as the
record of which process folded."""

from __future__ import annotations

import json

from fleetharness import assert_nothing_left, fleet, write_suite
from test_journal_fold import run  # a real `fleet run` in its own group, 2 nodes

from fleet.control import fold, turntrace

SUITE = """
[suite]
name = "foldproc"
[[steps]]
id = "s/{i}"
array = "1-40"
call = "fleet_steps:count_runs"
"""


def test_a_rotated_journal_is_folded_by_another_process_and_every_step_is_recorded_once(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    trace = tmp_path / "turns.jsonl"
    r = run(tmp_path, suite, {fold.ROTATE_ENV: "1500", turntrace.ENV: str(trace), turntrace.SLOW_ENV: "1000"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    starts = [x for x in lines if x["k"] == "fold" and x["event"] == "start"]
    ends = [x for x in lines if x["k"] == "fold" and x["event"] == "end"]
    assert starts, "the journal was never rotated"
    for s in starts:  # a process of its own: neither the coordinator nor a thread in it
        assert s["pid"] is not None and s["pid"] != s["coordinator"], s
    assert len(ends) >= len(starts) - 1  # the last may end only as the fleet stops (it waits for it)
    a = json.loads(fleet("audit", str(tmp_path / "run"), "--json", cwd=tmp_path, timeout=60).stdout)["steps"]
    assert all(a[f"s/{i}"]["successes"] == 1 and a[f"s/{i}"]["attempts"] == 1 for i in range(1, 41))
    assert_nothing_left(tmp_path / "run")
