"""`fleet report` on its command line: with --json an error is one JSON object on stdout,
as `fleet status --json` and `fleet audit --json` say theirs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetharness import fleet, small_tmpfs


def test_report_json_says_its_errors_as_one_json_object_with_exit_2(tmp_path):
    # Before 2026-12-06: the message on stderr only, nothing on stdout.
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "events.jsonl").write_text("hello\nworld\n")
    for args, words in ((["empty"], "no event stream at empty/events.jsonl"),
                        (["junk"], "is not a fleet event stream"),
                        (["nowhere"], "does not exist"),
                        (["empty", "--session", "0"], "--session")):
        r = fleet("report", *args, "--json", cwd=tmp_path, timeout=60)
        assert r.returncode == 2, (args, r.returncode, r.stdout, r.stderr)
        err = json.loads(r.stdout)["error"]
        assert words in err and words in r.stderr, (args, err, r.stderr)
    r = fleet("report", "empty", cwd=tmp_path, timeout=60)  # without --json: as before
    assert r.returncode == 2 and r.stdout == "" and "no event stream" in r.stderr


def test_report_says_in_one_line_that_it_cannot_write_its_trace_or_page_on_a_read_only_file_system(tmp_path):
    # Before 2026-12-06: a traceback ending in OSError (Read-only file system), exit 1,
    # and with --json no error object. A read-only tmpfs stops root too (chmod does not).
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(Path(__file__).parent / "data" / "events-0.1.jsonl", run / "events.jsonl")
    with small_tmpfs(tmp_path / "ro", size="1m") as ro:
        r = subprocess.run(["mount", "-o", "remount,ro", str(ro)], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            pytest.skip(f"cannot make the tmpfs read-only: {r.stderr.strip()}")
        for flag, name in (("--html", "r.html"), ("--trace", "t.json")):
            r = fleet("report", str(run), flag, name, cwd=ro, timeout=90)
            assert r.returncode == 2 and r.stdout == "", (flag, r.returncode, r.stdout, r.stderr)
            assert r.stderr.strip() == f"{flag} {name}: cannot write it: Read-only file system", r.stderr
            r = fleet("report", str(run), "--json", flag, name, cwd=ro, timeout=90)
            assert r.returncode == 2 and "Traceback" not in r.stderr, (flag, r.returncode, r.stderr)
            assert json.loads(r.stdout) == {"error": f"{flag} {name}: cannot write it: Read-only file system"}
        # The trace written elsewhere first, then the page here: the trace is said, then why not the page.
        r = fleet("report", str(run), "--trace", str(tmp_path / "t.json"), "--html", "r.html", cwd=ro, timeout=90)
        assert r.returncode == 2 and (tmp_path / "t.json").exists(), (r.returncode, r.stderr)
        assert r.stderr.splitlines()[-1] == "--html r.html: cannot write it: Read-only file system", r.stderr
