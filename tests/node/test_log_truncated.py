"""A step that truncates its own log (`> /dev/stderr`, open("/dev/stdout", "w")) is told
so in that log, at its end (fleet.node.logcut); one that writes with `>&2` is not.
Through the real `fleet` CLI, and on real files."""

from __future__ import annotations

import os
import sys

import pytest

from fleet.node import logcut
from fleetharness import assert_nothing_left, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")

SAID = "fleet: this step truncated its own log"


def test_a_command_that_writes_to_dev_stderr_with_a_truncating_redirect_is_told_why_its_log_lost_its_start(tmp_path):
    suite = write_suite(tmp_path / "t.toml", """
[suite]
name = "trunc"
run_dir = "run"

[[steps]]
id = "t"
command = "echo line-one; echo line-two; echo 'error: something' > /dev/stderr; exit 1"
retries = 1

[[steps]]
id = "ok"
command = "echo line-one; echo 'error: something' >&2; echo appended >> /dev/stderr; exit 1"
""")
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "run"
    assert r.returncode == 1, r.stdout + r.stderr
    log = (run_dir / "steps/t/log").read_text()
    # (The second attempt's truncation took the first's line with the rest.)
    assert log.startswith("error: something\n" + SAID), log
    assert log.count(SAID) == 1 and "`>&2`" in log and log.endswith("\n"), log
    ok = (run_dir / "steps/ok/log").read_text()
    assert ok.startswith("==== fleet: step ok attempt 1 ") and "line-one\nerror: something\nappended\n" in ok, ok
    assert SAID not in ok, ok
    assert_nothing_left(run_dir)


def test_a_call_step_that_opens_dev_stdout_for_writing_is_told_so_in_its_log(tmp_path):
    suite = write_suite(tmp_path / "t.toml", """
[suite]
name = "trunc2"
run_dir = "run"

[[steps]]
id = "c"
call = "log_steps:reopen_stdout"
""")
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "run"
    assert r.returncode == 1, r.stdout + r.stderr
    log = (run_dir / "steps/c/log").read_text()
    assert log.startswith("written through /dev/stdout\n"), log
    assert log.count(SAID) == 1, log
    assert_nothing_left(run_dir)


def test_a_command_that_truncated_its_log_and_then_timed_out_is_told_so_when_it_is_reaped(tmp_path):
    suite = write_suite(tmp_path / "t.toml", """
[suite]
name = "trunc3"
run_dir = "run"

[[steps]]
id = "slow"
command = "echo starting; echo 'error: stuck' > /dev/stderr; exec sleep 60"
timeout = 1
""")
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "run"
    assert r.returncode == 1, r.stdout + r.stderr
    log = (run_dir / "steps/slow/log").read_text()
    assert log.startswith("error: stuck\n") and log.count(SAID) == 1, log
    assert_nothing_left(run_dir)


def test_the_check_says_a_log_shorter_than_its_header_left_it_and_nothing_else(tmp_path):
    path = tmp_path / "log"
    path.write_text("earlier attempt\n")
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    mark = logcut.write_header(fd, b"==== header ====\n")
    assert mark is not None and mark.size == len("earlier attempt\n==== header ====\n")
    os.write(fd, b"more\n")
    assert not logcut.cut(mark) and SAID not in path.read_text()  # longer: said nothing
    with open(path, "w") as again:  # what `> /dev/stderr` does
        again.write("x")
    assert logcut.cut(mark)
    assert path.read_text() == "x\n" + logcut.CUT  # (on a line of its own)
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    os.dup2(other, fd)  # the log's number taken by another (empty) file
    os.close(other)
    assert not logcut.cut(mark)
    os.close(fd)
    r, w = os.pipe()  # not a regular file: nothing to check
    assert logcut.write_header(w, b"h\n") is None
    os.close(r)
    os.close(w)
