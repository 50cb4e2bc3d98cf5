"""A stream fleet 0.1 wrote still reads, and reports as fleet 0.1 reported it; and one
a development version of 2026-11-30 wrote, with its node window's records out of order.

data/events-0.1.jsonl is what a fleet 0.1 run of data/suite-0.1.toml wrote (its waits
carry their reason only in words); report-0.1.json and report-0.1.txt are what 0.1's
`fleet report --json` and `fleet report` printed for it, in /tmp/v01run/run.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleet.report.command import run as report_command

DATA = Path(__file__).parent / "data"


def test_the_json_report_of_a_0_1_stream_is_what_0_1_printed():
    code, out, msgs = report_command(str(DATA / "events-0.1.jsonl"), as_json=True)
    assert code == 0 and msgs == []
    got, want = json.loads(out), json.loads((DATA / "report-0.1.json").read_text())
    assert got.pop("run_dir") == str(DATA / "events-0.1.jsonl")
    assert want.pop("run_dir") == "/tmp/v01run/run"  # where 0.1 ran: the only difference
    # ... but the log of each problem that ran (added on 2026-12-06)
    assert [p.pop("log", None) for p in got["problems"]] == ["steps/bad/log", "steps/bad/log", None]
    assert got == want


def test_the_text_report_of_a_0_1_stream_is_what_0_1_printed():
    code, out, msgs = report_command(str(DATA / "events-0.1.jsonl"))
    assert code == 0 and msgs == []
    got, want = out.splitlines(), (DATA / "report-0.1.txt").read_text().splitlines()
    assert got[0] == want[0].replace("/tmp/v01run/run", str(DATA / "events-0.1.jsonl"))
    # (and each problem that ran names its log, from 2026-12-06)
    assert [line for line in got if "(log: " in line] == [
        "    failed     bad on node1 (attempt 1, retried): exit status 3 (log: steps/bad/log)",
        "    failed     bad on node1: exit status 3 (log: steps/bad/log)"]
    assert [line.removesuffix(" (log: steps/bad/log)") for line in got[1:]] == want[1:]


def test_a_queued_steps_start_written_after_its_exit_is_the_attempt_that_exit_ended():
    # data/events-2026-11-30-window.jsonl: a run of a 7-step suite by a207d4b (node window,
    # 2026-11-30 23:45), then a rerun by a later version (session 2, all skipped). That
    # coordinator wrote a queued step's `start` after its `exit` (fwd/3, fwd/4): read in
    # order, each became a second attempt that never ended ("unfinished").
    path = str(DATA / "events-2026-11-30-window.jsonl")
    code, out, msgs = report_command(path, as_json=True, session=1)
    assert code == 0 and msgs == []
    got = json.loads(out)
    assert got["counts"] == {"failed": 1, "succeeded": 6}, got["counts"]
    for step in ("fwd/3", "fwd/4"):
        row = got["steps"][step]
        assert (row["attempts"], row["outcome"], row["node"], row["cores"]) == (1, "succeeded", "node1", 1), row
        # Its start is the start record's (the decision), before its end, not the exit's time.
        assert 0 < row["start"] < row["end"], row
