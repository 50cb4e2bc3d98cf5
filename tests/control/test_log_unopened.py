"""A step whose log cannot be opened (a directory in its place here; an immutable file,
`chattr +i`, alike) fails saying so, in the words records.no_log knows, and nothing
points to a log: `fleet run` neither says "log in the run directory" nor gives a `log
of` line (the earlier attempt's log would be read as this one's), and `fleet report
--json` gives its problem no log. Before 2026-12-07 it failed `PermissionError: ...`
and was pointed to the stale log. A call step and a command step, real processes."""

from __future__ import annotations

import json

from fleetharness import assert_nothing_left, fleet, write_suite

from fleet.wire import records


def test_a_step_whose_log_cannot_be_opened_says_so_and_no_log_is_pointed_to(tmp_path):
    suite = write_suite(tmp_path / "s7.toml", '[[steps]]\nid = "b"\ncall = "os:getpid"\n'
                                              '[[steps]]\nid = "c"\ncommand = "true"\n')
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    for step in ("b", "c"):
        log = records.step_dir(run_dir, step) / "log"
        log.rename(log.with_name("log.earlier"))
        log.mkdir()  # (what os.open refuses, root or not)
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--force", "--max-attempts", "1", cwd=tmp_path,
              timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    for step in ("b", "c"):
        line = next(x for x in r.stdout.splitlines() if x.endswith(f"failed     {step}") or f"failed     {step}:" in x)
        assert f"{step}: cannot open the step's log {run_dir}/steps/{step}/log: Is a directory" in line, line
        assert "log in the run directory" not in line and "(no log:" in line, line
    assert "log of" not in r.stdout and "log of" not in r.stderr, r.stdout + r.stderr
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    problems = [p for p in rep["problems"] if p["step"] in ("b", "c")]
    assert len(problems) == 2 and not any("log" in p for p in problems), problems
    assert_nothing_left(run_dir)
