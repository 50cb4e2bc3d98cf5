"""A step's reason is printed as one line, its control characters escaped
(fleet.core.oneline): in `fleet run`'s lines (a real run), `fleet report`'s text and
`fleet status`. Before 2026-12-06 its newlines gave bare lines and ESC, CR and BEL
reached the terminal."""

from __future__ import annotations

import time
from pathlib import Path

from fleet.control import status, statusview
from fleet.core.scheduler import Scheduler
from fleet.core.oneline import one_line
from fleetharness import assert_nothing_left, fleet, write_suite

SHOWN = "ValueError: shapes do not match:\\n a: (3, 4)\\n b: (4, 5)\\x1b[31m red\\x07\\r"


def test_control_characters_are_escaped_and_plain_text_is_kept_as_it_is():
    assert one_line("plain text, ünïcode and ⏎") == "plain text, ünïcode and ⏎"
    assert one_line("a\nb\r\tc\x00\x7f\x9b[2J\u2028") == "a\\nb\\r\\tc\\x00\\x7f\\x9b[2J\\u2028"


def test_a_reason_of_several_lines_with_escapes_is_one_line_in_fleet_run_and_fleet_report(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n\n'
                        '[[steps]]\nid = "bad"\ncall = "fleet_steps:raises_lines"\n')
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not any(c in r.stdout for c in "\x1b\x07\r"), repr(r.stdout)
    line = next(x for x in r.stdout.splitlines() if "bad" in x and "failed" in x)
    assert line.endswith(f"failed     bad: {SHOWN} (log in the run directory: steps/bad/log)"), line
    assert not any(x.startswith((" a: ", " b: ")) for x in r.stdout.splitlines()), r.stdout
    rep = fleet("report", str(tmp_path / "run"), cwd=tmp_path, timeout=60)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert not any(c in rep.stdout for c in "\x1b\x07\r"), repr(rep.stdout)
    assert f"bad on node1: {SHOWN}" in rep.stdout or f"bad: {SHOWN}" in rep.stdout, rep.stdout
    assert_nothing_left(tmp_path / "run")


def test_fleet_status_shows_a_recent_failures_reason_on_one_line():
    now = time.time()
    failures = [{"step": "bad", "outcome": "failed", "reason": "ValueError: a\n b\x1b[31m\x07\r", "t": now}]
    st = status.answer(Scheduler(), [], up_since=now, run_dir=Path("/run"), failures=failures, dropped={},
                       submissions=[])
    text = statusview.render(st, now=now)
    assert "\n  failed     bad: ValueError: a\\n b\\x1b[31m\\x07\\r" in text, text
    assert not any(c in text for c in "\x1b\x07\r"), repr(text)
