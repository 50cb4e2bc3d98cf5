"""A fleet trusts its run directory and what it made there, so no one else may write them:
what fleet makes there is not group-writable under a umask of 002, though what steps make
still is. Real `fleet` commands in fresh processes.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from fleetharness import assert_nothing_left, completed, env

UMASK_SUITE = r'''
[[steps]]
id = "grp/a"
workdir = "."
command = "mkdir -p mine && echo x > data/out.txt"
outputs = ["data/out.txt"]

[[steps]]
id = "gen"
protocol = "steps"
command = "printf '[[steps]]\\nid = \"kid\"\\ncommand = \"true\"\\n' > \"$FLEET_SUBMIT_DIR/kid.toml\""
'''


def test_under_umask_002_what_fleet_makes_in_the_run_directory_is_not_group_writable_and_what_steps_make_is(
        tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    suite = tmp_path / "s.toml"
    suite.write_text(UMASK_SUITE)
    argv = [sys.executable, "-m", "fleet", "run", str(suite), "--nodes", "1", "--run-dir", str(run_dir)]
    r = completed(argv, 120, cwd=tmp_path, env=env(), text=True, umask=0o002)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run_dir / "steps" / "gen" / "kid" / ".fleet").is_dir()  # (the child ran: its directories are made)
    users = {run_dir / "mine", run_dir / "data"}  # the step's own, and its output's (the suite's)
    assert all(os.stat(d).st_mode & stat.S_IWGRP for d in users)  # (the steps' umask is theirs)
    fleets = [Path(top) / d for top, dirs, _ in os.walk(run_dir) for d in dirs if Path(top) / d not in users]
    assert {run_dir / ".fleet", run_dir / "steps" / "grp", run_dir / "steps" / "gen" / ".fleet" / "submit",
            run_dir / "agents"} <= set(fleets)
    writable = [f"{d} {stat.S_IMODE(os.stat(d).st_mode):04o}" for d in fleets if os.stat(d).st_mode & 0o022]
    assert not writable, writable
    assert_nothing_left(run_dir)
    # The next run takes the run directory as this one left it.
    r = completed([*argv, "--force"], 120, cwd=tmp_path, env=env(), text=True, umask=0o002)
    assert r.returncode == 0, r.stdout + r.stderr
