"""A journal's lines per step: a loop turn's starts in one line, a success's attempt
record on its marker's line; read as the lines they replace, and journals written
before (one line each) read the same."""

from __future__ import annotations

import json
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, write_suite

from fleet.wire import records


def lines_of(run_dir: Path) -> list[dict]:
    return [json.loads(raw) for p in sorted((run_dir / records.JOURNALS).glob("*.jsonl"))
            for raw in p.read_text().splitlines() if raw.strip()]


def test_a_run_journals_each_success_in_one_line_and_its_starts_in_lines_per_turn_and_readers_see_every_attempt(
        tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "lines"
[[steps]]
id = "s/{i}"
array = "1-12"
call = "fleet_steps:count_runs"
""")
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = lines_of(run_dir)
    steps = [f"s/{i}" for i in range(1, 13)]
    done = [x for x in lines if x["k"] == "done"]
    assert sorted(x["step"] for x in done) == sorted(steps)
    assert all(x["att"]["outcome"] == "succeeded" and x["att"]["attempt"] == 1 for x in done)
    assert not [x for x in lines if x["k"] in ("attempt", "start")]  # (before: three lines a step)
    started = [s[0] for x in lines if x["k"] == "starts" for s in x["s"]]
    assert sorted(started) == sorted(steps)
    assert len(lines) < 2 * len(steps) + 2  # header, seal; one line a success, starts per turn
    for s in steps:
        [a] = records.attempts(run_dir, s)
        assert a["outcome"] == "succeeded" and a["fleet"] == done[0]["att"]["fleet"]
    a = json.loads(fleet("audit", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert a["ok"] and {v["successes"] for v in a["steps"].values()} == {1}
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, timeout=90)
    assert r.returncode == 0 and sorted((run_dir / "runs.txt").read_text().split()) == sorted(steps)  # each once
    assert_nothing_left(run_dir)


def _journal(run_dir: Path, name: str, lines: list[dict]) -> None:
    d = run_dir / records.JOURNALS
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_compact_lines_read_as_the_lines_they_replace_and_a_journal_written_before_reads_the_same(tmp_path):
    att = {"fleet": "f", "attempt": 1, "generation": 1, "outcome": "succeeded", "node": "n0"}
    marker = {"outcome": "succeeded", "attempt": 1, "id": "m", "deps": {}, "generation": 1}
    head = {"k": "fleet", "fleet": "f", "host": "h", "pid": 1, "t": 1.0}
    old = [head, {"k": "start", "step": "a", "attempt": 1, "generation": 1, "t": 2.0},
           {"k": "start", "step": "b", "attempt": 2, "generation": 3, "t": 2.0},
           {"k": "attempt", "step": "a", "rec": att, "t": 3.0}, {"k": "done", "step": "a", "rec": marker, "t": 3.0}]
    new = [head, {"k": "starts", "s": [["a", 1, 1], ["b", 2, 3]], "t": 2.0},
           {"k": "done", "step": "a", "rec": marker, "att": att, "t": 3.0}]
    _journal(tmp_path / "old", "f.jsonl", old)
    _journal(tmp_path / "new", "f.jsonl", new)
    o, n = records.read_journals(tmp_path / "old"), records.read_journals(tmp_path / "new")
    assert n.attempts == o.attempts == {"a": {("f", 1, 1): att}}
    assert n.outcome == o.outcome and n.done("a") == marker
    [jo], [jn] = o.each, n.each
    assert jn.running == jo.running == {"b": {"k": "start", "step": "b", "attempt": 2, "generation": 3, "t": 2.0}}
    assert jn.touched == jo.touched == {"a", "b"} and not jn.sealed
    assert records.attempts(tmp_path / "new", "a") == [att]
    # Since 2026-12-03 a starts line names each start's definition beside it ("h"): a
    # crashed fleet's attempts are counted by the fleet that replays its journal.
    _journal(tmp_path / "hashed", "f.jsonl", [head, {"k": "starts", "s": [["a", 1, 1], ["b", 2, 3]], "h": ["x", "y"],
                                                     "t": 2.0}])
    [jh] = records.read_journals(tmp_path / "hashed").each
    assert jh.running == {"a": {"k": "start", "step": "a", "attempt": 1, "generation": 1, "t": 2.0, "spec": "x"},
                          "b": {"k": "start", "step": "b", "attempt": 2, "generation": 3, "t": 2.0, "spec": "y"}}
    # ... and the fleet that replays such a journal records those attempts as lost in its
    # own: an attempt of the dead fleet's, touching nothing of its own journal's.
    lost = {"fleet": "f", "attempt": 2, "generation": 3, "outcome": "lost", "spec": "y"}
    _journal(tmp_path / "lost", "g.jsonl", [{**head, "fleet": "g"}, {"k": "lost", "step": "b", "rec": lost, "t": 4.0}])
    r = records.read_journals(tmp_path / "lost")
    assert r.attempts == {"b": {("f", 3, 2): lost}} and not r.each[0].touched and not r.each[0].running
    # A step the drain interrupted ended there (no attempt): not running when its fleet died.
    _journal(tmp_path / "drained", "f.jsonl", [head, {"k": "starts", "s": [["a", 1, 1]], "h": ["x"], "t": 2.0},
                                               {"k": "interrupted", "step": "a", "t": 3.0}])
    [jd] = records.read_journals(tmp_path / "drained").each
    assert not jd.running and jd.touched == {"a"}
