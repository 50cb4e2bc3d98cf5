"""A step's log: each attempt starts with one header line and fleet's own lines start
with `fleet:`, whatever the step's output ended with. Through the real `fleet` CLI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fleet.node import stepdirs
from fleetharness import assert_nothing_left, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def test_output_without_a_final_newline_does_not_run_into_the_next_header_or_fleets_own_lines(tmp_path):
    suite = write_suite(tmp_path / "ln.toml", """
[suite]
name = "ln"
run_dir = "ln"

[[steps]]
id = "cmd"
command = "printf 'progress 50%%'; exit 1"
retries = 1

[[steps]]
id = "call"
call = "log_steps:partial_line"
retries = 1

[[steps]]
id = "ne"
command = "printf 'writing result...'"
outputs = ["steps/ne/r.txt"]
""")
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "ln"
    assert r.returncode == 1, r.stdout + r.stderr
    cmd = (run_dir / "steps/cmd/log").read_text()
    assert "progress 50%\n==== fleet: step cmd attempt 2 " in cmd, cmd
    assert cmd.endswith("progress 50%"), cmd  # (the step's own bytes are left as they are)
    call = (run_dir / "steps/call/log").read_text()
    assert "call progress 1\n==== fleet: step call attempt 2 " in call, call
    ne = (run_dir / "steps/ne/log").read_text()
    assert "writing result...\nfleet: declared output steps/ne/r.txt was not produced\n" in ne, ne
    for text in (cmd, call, ne):
        assert all(line.startswith("==== fleet: ") for line in text.splitlines() if "==== fleet" in line), text
    assert_nothing_left(run_dir)


def test_a_newline_is_added_only_where_the_log_does_not_end_in_one(tmp_path):
    log = tmp_path / "log"
    for text, want in (("", ""), ("done\n", ""), ("half", "\n")):
        log.write_text(text)
        stepdirs.append_to_log(str(log), "fleet: x\n")
        assert log.read_text() == text + want + "fleet: x\n"
    fd = os.open(log, os.O_WRONLY)  # (a log it cannot read back: nothing added, nothing raised)
    try:
        assert stepdirs.line_start(fd) == b""
    finally:
        os.close(fd)
