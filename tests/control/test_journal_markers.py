"""A fleet alone in its run directory takes a step's done marker from its journals
(fleet.control.journalmarks) when a submission is checked, instead of opening the
step's marker file: a rerun of a big suite costs a few directory listings, not one open
per step. Through real `fleet run`, `fleet up` and `fleet step` processes, real files;
every open of a done marker is seen by an audit hook in each process of the fleet."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

from fleetharness import assert_nothing_left, env, events, fleet, write_suite

# An audit hook (PEP 578) in every process started with it on PYTHONPATH: each open of a
# done marker for reading is noted with the process's pid.
SITECUSTOMIZE = '''
import os, sys
_path = os.environ.get("FLEET_TEST_OPEN_LOG")
if _path:
    _fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    def _hook(event, args):
        if event != "open" or not args or not isinstance(args[0], str) or not args[0].endswith("/.fleet/done.json"):
            return
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
        if not (flags & (os.O_WRONLY | os.O_RDWR) or any(c in mode for c in "wax+")):
            os.write(_fd, ("%d %s\\n" % (os.getpid(), args[0])).encode())
    sys.addaudithook(_hook)
'''

N = 20
SUITE = f"""
[suite]
name = "journal-markers"
run_dir = "run"
[[steps]]
id = "a"
call = "fleet_steps:count_runs"
[[steps]]
id = "b"
call = "fleet_steps:count_runs"
deps = ["a"]
[[steps]]
id = "s/{{i}}"
array = "1-{N}"
call = "fleet_steps:count_runs"
"""
EVERY = {"a", "b", *(f"s/{i}" for i in range(1, N + 1))}


def ran(run_dir: Path) -> Counter:
    """Each step's exits in the run directory's event stream, every fleet's."""
    return Counter(r["step"] for r in events(run_dir) if r["kind"] == "exit")


def hooked(tmp_path: Path) -> tuple[dict, Path]:
    """(what to add to the environment for the audit hook, the file it logs to)."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "opens.txt"
    return {"PYTHONPATH": f"{hook}{os.pathsep}{env()['PYTHONPATH']}", "FLEET_TEST_OPEN_LOG": str(log)}, log


def opened(log: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()] if log.exists() else []


def test_a_rerun_on_a_fleet_alone_opens_no_done_marker_its_journals_know_and_skips_every_step(tmp_path, started):
    """Fails on the code before fleet.control.journalmarks: there the rerun opened all 22."""
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(run_dir) == Counter(EVERY)
    assert all((run_dir / "steps" / s / ".fleet" / "done.json").exists() for s in EVERY)
    extra, log = hooked(tmp_path)
    p = started("run", str(suite), "--nodes", "2", extra_env=extra)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and f"{len(EVERY)} already done" in out, out + err
    assert ran(run_dir) == Counter(EVERY)  # nothing ran again
    assert opened(log) == [], opened(log)[:5]
    assert_nothing_left(run_dir)


def test_a_step_whose_directory_was_removed_runs_again_with_its_dependent_and_nothing_else(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run_dir = tmp_path / "run"
    assert fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120).returncode == 0
    shutil.rmtree(run_dir / "steps" / "a")
    shutil.rmtree(run_dir / "steps" / "s" / "3")
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and f"{len(EVERY) - 3} already done" in r.stdout, r.stdout + r.stderr
    assert ran(run_dir) - Counter(EVERY) == Counter({"a": 1, "b": 1, "s/3": 1})
    assert_nothing_left(run_dir)


def test_a_success_fleet_step_records_is_seen_by_a_fleet_up_alone_and_by_the_next_fleet(tmp_path):
    """`fleet step --record` writes a new marker for `a` behind a fleet's back: its dependent
    `b` ran against the old one, so it runs again, on the live fleet's next submission and
    on a new fleet's. Fails without the journal `fleet step` writes (both) or without the
    live fleet's look for new journals (the first)."""
    suite = write_suite(tmp_path / "s.toml", SUITE)
    run_dir = tmp_path / "run"
    fleet("up", "--local", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=120)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 0 and ran(run_dir) == Counter(EVERY), r.stdout + r.stderr
        first = (run_dir / "steps" / "a" / ".fleet" / "done.json").read_text()
        assert fleet("step", str(suite), "a", "--record", cwd=tmp_path, timeout=60).returncode == 0
        assert (run_dir / "steps" / "a" / ".fleet" / "done.json").read_text() != first
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 0 and f"{len(EVERY) - 1} already done" in r.stdout, r.stdout + r.stderr
        assert ran(run_dir) - Counter(EVERY) == Counter({"b": 1})  # (`a` ran by hand: no event)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    assert fleet("step", str(suite), "a", "--record", cwd=tmp_path, timeout=60).returncode == 0
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and f"{len(EVERY) - 1} already done" in r.stdout, r.stdout + r.stderr
    assert ran(run_dir) - Counter(EVERY) == Counter({"b": 2})
    assert_nothing_left(run_dir)
