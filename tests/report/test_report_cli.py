"""`fleet report` on its command line: with --json an error is one JSON object on stdout,
as `fleet status --json` and `fleet audit --json` say theirs."""

from __future__ import annotations

import json

from fleetharness import fleet


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
