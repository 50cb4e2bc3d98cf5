"""A fleet trusts its run directory and what it made there, so no one else may write them.

A run directory others can write, sticky or not, or another user's, is refused before
anything starts; so are fleet's own directories there (.fleet, .fleet/journal, steps)
when others can write them or they are another user's; and what fleet makes there is not
group-writable under a umask of 002, though what steps make still is. Real `fleet`
commands in fresh processes; "another user" is uid 65534 (nobody), only as root.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, completed, env, fleet

NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="making a file another user's (chown) needs root")
SUITE = '[[steps]]\nid = "a"\ncommand = "true"\n'


def refused(r: subprocess.CompletedProcess, *said: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for text in said:
        assert text in r.stderr, (text, r.stderr)


def refused_by_up_and_run(tmp_path: Path, run_dir: Path, *said: str) -> None:
    """`fleet up` and `fleet run` (an embedded fleet) both refuse run_dir, starting nothing
    (a fleet one of them started anyway is stopped, and the test fails)."""
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    before = sorted(p.name for p in run_dir.iterdir())
    try:
        for argv in (("up", "--local", "--run-dir", str(run_dir)),
                     ("run", str(suite), "--nodes", "1", "--run-dir", str(run_dir))):
            r = fleet(*argv, cwd=tmp_path, timeout=90)
            refused(r, *said)
            assert "starting an embedded fleet" not in r.stderr, r.stderr
    finally:
        if (run_dir / "events.jsonl").exists():  # (the code before the fix started one)
            fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing made there


def test_a_sticky_directory_everyone_can_write_is_refused_as_a_run_directory(tmp_path):
    # /tmp, /dev/shm, a shared drop directory: others can make the fleet's steps/ and
    # .fleet/ (and symbolic links in its files' places) before it does.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    refused_by_up_and_run(tmp_path, shared, f"cannot use run directory {shared}: it is a shared directory "
                                            f"(mode 1777", f"use a directory of your own in it, such as {shared}/run")


@as_root
def test_a_shared_sticky_directory_of_another_user_is_said_shared_not_blamed_on_its_owner(tmp_path):
    # As /tmp is for anyone but root: root's, 1777. "Another user's (uid 0)" would cast
    # root as the one to fear and drop the hint of a directory of one's own in it.
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    os.chown(shared, NOBODY, NOBODY)
    refused_by_up_and_run(tmp_path, shared, f"cannot use run directory {shared}: it is a shared directory "
                                            f"(mode 1777", f"use a directory of your own in it, such as {shared}/run")


@as_root
def test_a_run_directory_of_another_user_is_refused_even_one_only_its_owner_can_write(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    refused_by_up_and_run(tmp_path, theirs, f"cannot use run directory {theirs}: it belongs to another user "
                                            f"(uid {NOBODY})")


@pytest.mark.parametrize("entry", [".fleet", ".fleet/journal", "steps"])
def test_a_fleet_directory_others_can_write_in_the_run_directory_is_refused_naming_it(tmp_path, entry):
    # As a fleet before 2026-12-06 left them under a umask of 002.
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / entry).mkdir(parents=True)
    (run_dir / entry).chmod(0o775)
    refused_by_up_and_run(tmp_path, run_dir, f"cannot use run directory {run_dir}: its {entry} is writable by "
                                             f"others (mode 0775)", f"chmod -R go-w {run_dir}")


@as_root
@pytest.mark.parametrize("entry", [".fleet", "steps", "events.jsonl"])
def test_an_entry_of_another_user_in_the_run_directory_is_refused_naming_it(tmp_path, entry):
    # Made by another user while the run directory was open to them: a directory of theirs
    # only they can write, or a symbolic link of theirs in place of the fleet's event log.
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    if entry == "events.jsonl":
        target = tmp_path / "precious.txt"
        target.write_text("mine\n")
        (run_dir / entry).symlink_to(target)
        os.lchown(run_dir / entry, NOBODY, NOBODY)
    else:
        (run_dir / entry).mkdir(mode=0o755)
        os.chown(run_dir / entry, NOBODY, NOBODY)
    refused_by_up_and_run(tmp_path, run_dir, f"cannot use run directory {run_dir}: its {entry} belongs to another "
                                             f"user (uid {NOBODY})", "move it aside")
    if entry == "events.jsonl":
        assert (tmp_path / "precious.txt").read_text() == "mine\n"


# A step that makes a directory of its own and an output's (the user's, under their umask).
STEP_DIRS = r'''
[[steps]]
id = "grp/a"
workdir = "."
command = "mkdir -p mine && echo x > data/out.txt"
outputs = ["data/out.txt"]
'''

UMASK_SUITE = STEP_DIRS + r'''
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


FILES_SUITE = r'''
[[steps]]
id = "called"
call = "steps:record"
''' + STEP_DIRS + r'''
[[steps]]
id = "flaky"
workdir = "."
retries = 1
command = "if [ -e flaky-tried ]; then echo again; else echo first > flaky-tried; exit 1; fi"

[[steps]]
id = "fails"
command = "exit 3"

[[steps]]
id = "gen"
protocol = "steps"
command = "printf '[[steps]]\\nid = \"kid\"\\ncommand = \"echo kid > made-by-kid\"\\n' > \"$FLEET_SUBMIT_DIR/kid.toml\""
'''

MPI_STEP = '''
[[steps]]
id = "m"
mpi = true
ranks = 2
command = ["sh", "-c", "echo rank > rank-$PMI_RANK$OMPI_COMM_WORLD_RANK"]
'''


def test_under_umask_002_no_file_fleet_makes_in_the_run_directory_is_group_writable_and_those_steps_make_are(
        tmp_path):
    # Markers, records, journals and their fold, claims, the lease, logs (the coordinator's,
    # the agents', the steps'), events.jsonl, an MPI step's files: a group member could
    # have changed what the fleet trusts. A rerun (--force) rewrites the markers.
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    mpi = shutil.which("mpiexec") is not None  # (the MPI step only where there is an mpiexec)
    (tmp_path / "s.toml").write_text(FILES_SUITE + (MPI_STEP if mpi else ""))
    argv = [sys.executable, "-m", "fleet", "run", str(tmp_path / "s.toml"), "--nodes", "2", "--run-dir", str(run_dir)]
    for again in ((), ("--force",)):
        r = completed([*argv, *again], 180, cwd=tmp_path, env=env(), text=True, umask=0o002)
        assert r.returncode == 1 and "1 failed, 6 succeeded" in r.stdout, r.stdout + r.stderr  # (only "fails")
        assert_nothing_left(run_dir)
    steps = run_dir / "steps"
    made_by_steps = {run_dir / "mine", run_dir / "data", run_dir / "data" / "out.txt", run_dir / "flaky-tried",
                     steps / "called" / "record.json", steps / "gen" / "kid" / "made-by-kid",
                     *(steps / "m").glob("rank-*")}
    assert (steps / "gen" / "kid" / "made-by-kid").exists() and (steps / "flaky" / "log").read_text().count("again")
    assert not mpi or len(list((steps / "m").glob("rank-*"))) == 2
    # What the steps wrote is as their umask says: group-writable.
    assert all(os.stat(p).st_mode & stat.S_IWGRP for p in made_by_steps if p.exists())
    # Everything else in the run directory is the fleet's: none of it group- or other-writable
    # (the child steps' files taken from the submit directory were the step's, kept aside).
    fleets = [Path(top) / n for top, dirs, files in os.walk(run_dir) for n in dirs + files]
    fleets = [p for p in fleets if p not in made_by_steps and not p.name.endswith(".toml")]
    names = {p.relative_to(run_dir).as_posix() for p in fleets}
    assert {"coordinator.log", "events.jsonl", "steps/called/log", "steps/fails/.fleet/final.json",
            "steps/called/.fleet/done.json", "steps/gen/kid/.fleet/done.json"} <= names, sorted(names)
    assert any(n.startswith("agents/") and n.endswith(".log") for n in names), sorted(names)
    assert any(n.startswith(".fleet/journal/") for n in names), sorted(names)
    assert not mpi or {"steps/m/log", "steps/m/.fleet/done.json"} <= names  # (its launcher's files: test_launchers)
    writable = [f"{p.relative_to(run_dir)} {stat.S_IMODE(os.lstat(p).st_mode):04o}" for p in fleets
                if os.lstat(p).st_mode & 0o022 and not p.is_symlink()]
    assert not writable, writable


def test_an_event_log_others_can_write_is_refused_as_the_sign_of_files_made_so_by_an_earlier_run(tmp_path):
    # A run under a umask of 002 before 2026-12-06 made its files group-writable (its
    # directories too, which are refused already); events.jsonl is the one looked at.
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / "events.jsonl").write_text("")
    (run_dir / "events.jsonl").chmod(0o664)
    refused_by_up_and_run(tmp_path, run_dir, f"cannot use run directory {run_dir}: its events.jsonl is writable by "
                                             f"others (mode 0664)", "done markers, its journal",
                          f"chmod -R go-w {run_dir}")
