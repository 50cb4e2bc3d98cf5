"""`fleet report` of a stream with damaged lines: counted and said (text, page, JSON),
and a utilization they inflate shown at 100 % at most, saying why."""

from __future__ import annotations

import json
import re

from fleet.report.command import run as report_command
from test_report import Stream


def back_to_back() -> Stream:
    """One node of one core; a then b on it, 10 s each."""
    s = Stream().fleet(90, [("n1", [0], [], 100)])
    s.submit(100, [("a", [], 1, None), ("b", [], 1, None)])
    s.start(100, "a", "n1", [0]).exit(110, "a", startup=0, work=10)
    s.start(110, "b", "n1", [0]).exit(120, "b", startup=0, work=10)
    return s.down(120)


def test_a_damaged_line_mid_stream_is_counted_and_said_and_utilization_stays_at_most_100_percent(tmp_path):
    # Before 2026-12-06 the line was skipped without a word, and a's exit missing, a held
    # its core to the end beside b: "cores 150% held".
    lines = back_to_back().lines()
    cut = next(i for i, line in enumerate(lines) if '"kind":"exit"' in line)
    lines[cut] = lines[cut][:60]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    code, out, _ = report_command(str(tmp_path), as_json=True, html_file=str(tmp_path / "r.html"))
    assert code == 0
    j = json.loads(out)
    assert j["damaged_lines"] == 1
    assert j["utilization"]["overall"]["cores_held"] == 1.0 and j["utilization"]["nodes"]["n1"]["cores_held"] == 1.0
    assert j["utilization"]["over_capacity"] == {"n1": 1.5, "overall": 1.5}, j["utilization"]
    assert any(n.startswith("1 damaged line(s) of the stream") for n in j["notes"]), j["notes"]
    assert any("n1 1.50 times" in n and "shown as 100%" in n and "damaged lines" in n for n in j["notes"]), j["notes"]
    code, text, _ = report_command(str(tmp_path))
    assert "note: 1 damaged line(s)" in text and "shown as 100%" in text, text
    assert not [p for p in re.findall(r"(\d+)%", text) if int(p) > 100], text
    page = (tmp_path / "r.html").read_text()
    assert "1 damaged line(s)" in page and "shown as 100%" in page


def test_a_torn_last_line_alone_is_not_counted_as_damage(tmp_path):
    lines = back_to_back().lines()
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n" + lines[-1][:20])  # a live writer's line
    code, out, _ = report_command(str(tmp_path), as_json=True)
    j = json.loads(out)
    assert code == 0 and "damaged_lines" not in j and "over_capacity" not in j["utilization"], j
    assert not any("damaged" in n for n in j["notes"]), j["notes"]
    (tmp_path / "events.jsonl").write_text("\n".join(lines[:3] + ["{not json", "[1, 2]"] + lines[3:]) + "\n")
    j = json.loads(report_command(str(tmp_path), as_json=True)[1])
    assert j["damaged_lines"] == 2 and j["counts"] == {"succeeded": 2}, j


def test_a_record_whose_time_is_infinite_or_nan_is_a_damaged_line_counted_not_a_traceback(tmp_path):
    # (before 2026-12-06 `"t": Infinity` made the wall infinite: ZeroDivisionError in every
    # form of the report; 1e999, which JSON reads as infinity, too)
    lines = back_to_back().lines()
    cut = next(i for i, line in enumerate(lines) if '"kind":"exit"' in line)
    bad = ['{"t": Infinity, "kind": "exit", "step": "a"}', '{"t": 1e999, "kind": "exit", "step": "b"}',
           '{"t": -Infinity, "kind": "exit", "step": "a"}', '{"t": NaN, "kind": "exit", "step": "a"}']
    (tmp_path / "events.jsonl").write_text("\n".join(lines[:cut] + bad + lines[cut:]) + "\n" + bad[0] + "\n")
    code, out, _ = report_command(str(tmp_path), as_json=True, html_file=str(tmp_path / "r.html"))
    j = json.loads(out)
    assert code == 0 and j["damaged_lines"] == 4 and j["counts"] == {"succeeded": 2}, j
    assert any(n.startswith("4 damaged line(s) of the stream") for n in j["notes"]), j["notes"]
    code, text, _ = report_command(str(tmp_path))
    assert code == 0 and "note: 4 damaged line(s)" in text, text
