"""The everyday path through the real `fleet` command: where up, run, status and down
look for a fleet (the same rule for all four, an embedded fleet too), a run directory
nothing can be written in, an empty suite, `fleet up`'s coordinator options, status
errors as JSON, and help and messages a user reads. Real fleets, real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

import rawpeer as R
from fleetharness import fleet, records, spawn, tagged, wait_for

from fleet.wire import events as E


def kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait(timeout=30)


def two_steps(path: Path, run_dir: str) -> Path:
    path.write_text(f'[suite]\nname = "pair"\nrun_dir = "{run_dir}"\n'
                    '[[steps]]\nid = "a"\ncommand = ["true"]\n[[steps]]\nid = "b"\ncommand = ["true"]\ndeps = ["a"]\n')
    return path


def started_steps(run_dir: Path) -> list[str]:
    return [r.step for r in records(run_dir) if isinstance(r, E.Started)]


# -- item 7: one rule for where the fleet is ------------------------------------------------------

def test_fleet_run_without_run_dir_uses_the_fleet_that_fleet_up_started_in_the_current_directory(tmp_path):
    suite = two_steps(tmp_path / "s.toml", "runs/pair")
    r = fleet("up", "--local", "--nodes", "2", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    try:
        assert f"export FLEET_RUN_DIR={tmp_path.resolve()}" in r.stdout, r.stdout  # the hint for elsewhere
        r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "starting an embedded fleet" not in r.stderr, r.stderr
        assert f"running on the fleet up in {tmp_path.resolve()} (not the suite's run_dir" in r.stderr, r.stderr
        assert sorted(started_steps(tmp_path)) == ["a", "b"]
        assert not (tmp_path / "runs").exists()  # the suite's own run_dir was not used
    finally:
        down = fleet("down", cwd=tmp_path, timeout=60)
    assert down.returncode == 0 and down.stdout.strip() == f"fleet down: {tmp_path.resolve()}", down.stdout
    R.assert_gone(tmp_path)


def test_with_FLEET_RUN_DIR_up_run_status_and_down_all_use_it_from_any_directory(tmp_path):
    run_dir = tmp_path / "shared"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    suite = two_steps(tmp_path / "s.toml", "runs/pair")
    env = {"FLEET_RUN_DIR": str(run_dir)}
    r = fleet("up", "--local", "--nodes", "2", cwd=tmp_path, environ=env)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        assert f"run dir {run_dir}" in r.stdout and "export FLEET_RUN_DIR" not in r.stdout, r.stdout  # set: no hint
        r = fleet("run", str(suite), cwd=elsewhere, environ=env, timeout=120)
        assert r.returncode == 0 and "embedded" not in r.stderr, r.stdout + r.stderr
        assert sorted(started_steps(run_dir)) == ["a", "b"]
        r = fleet("status", "--json", cwd=elsewhere, environ=env)
        assert r.returncode == 0 and json.loads(r.stdout)["run_dir"] == str(run_dir), r.stdout + r.stderr
    finally:
        r = fleet("down", cwd=elsewhere, environ=env)
    assert r.stdout.strip() == f"fleet down: {run_dir}", r.stdout + r.stderr
    assert not (tmp_path / "runs").exists() and not (elsewhere / "fleet.json").exists()
    R.assert_gone(run_dir)


def test_status_and_down_find_the_fleet_a_running_fleet_run_embedded_in_the_run_dir(tmp_path):
    run_dir = tmp_path / "runs" / "sleepy"
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "sleepy"\nrun_dir = "runs/sleepy"\n'
                     '[[steps]]\nid = "long"\ncommand = ["sleep", "120"]\n')
    runner = spawn("run", str(suite), cwd=tmp_path)
    try:
        wait_for(lambda: started_steps(run_dir) == ["long"], 60, "the embedded fleet to start the step")
        assert not (run_dir / "fleet.json").exists() and list(run_dir.glob("fleet-*.json"))
        # By --run-dir, and by the default (the current directory) from inside it.
        r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
        assert r.returncode == 0 and json.loads(r.stdout)["counts"] == {"running": 1}, r.stdout + r.stderr
        r = fleet("status", cwd=run_dir, timeout=60)
        assert r.returncode == 0 and "long" in r.stdout, r.stdout + r.stderr
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"fleet down: {run_dir} (a fleet run's embedded fleet, coordinator pid "), r.stdout
        out, err = runner.communicate(timeout=60)
        assert runner.returncode == 1 and "went down before the suite finished" in err, out + err
        assert "it was stopped (fleet down, or a signal to its coordinator)" in err, err
        assert "Traceback" not in err
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.stdout.strip() == f"no fleet was up in {run_dir}"
    finally:
        kill_group(runner)
    R.assert_gone(run_dir)


# -- item 15: a run directory nothing can be written in -----------------------------------------------

def _unwritable(tmp_path: Path) -> Path:
    """An existing directory this process cannot create files in (root ignores modes)."""
    if os.geteuid() == 0:
        return Path("/sys/kernel")  # sysfs: not even root creates files there
    d = tmp_path / "readonly"
    d.mkdir(mode=0o500)
    return d


@pytest.mark.parametrize("command", ["up", "run"])
@pytest.mark.parametrize("kind", ["under a file", "in /proc", "read-only"])
def test_a_run_dir_that_cannot_be_made_or_written_is_one_line_naming_it_exit_2_and_nothing_starts(
        tmp_path, command, kind):
    (tmp_path / "afile").write_text("")
    run_dir = {"under a file": tmp_path / "afile" / "run", "in /proc": Path("/proc/fleet-no-such/run"),
               "read-only": _unwritable(tmp_path)}[kind]
    suite = two_steps(tmp_path / "s.toml", "unused")
    args = ["up", "--local"] if command == "up" else ["run", str(suite)]
    r = fleet(*args, "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(lines) == 1 and lines[0].startswith(f"fleet: cannot use run directory {run_dir}: "), r.stderr
    assert lines[0].rsplit(": ", 1)[1] in ("Not a directory", "No such file or directory", "Permission denied",
                                           "Operation not permitted", "Read-only file system"), lines
    assert r.stdout == "" and "Traceback" not in r.stderr
    # No coordinator (nor agent) was started for it. (As root the read-only one is /sys/kernel
    # for every test here: another worker's `fleet up`/`run` of it is not one of ours.)
    assert [p for p in tagged(str(run_dir)) if "fleet.control" in p or "fleet.node" in p] == []
    assert not (tmp_path / "unused").exists()


# -- item 20: messages, help, options -------------------------------------------------------------------

def test_an_empty_suite_or_a_shard_with_no_steps_says_so_exits_0_and_starts_no_fleet(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text('[suite]\nname = "nothing"\nrun_dir = "run"\n')
    r = fleet("run", str(empty), cwd=tmp_path, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "suite 'nothing' has no steps; nothing was started\n", "")
    one = tmp_path / "one.toml"
    one.write_text('[suite]\nname = "one"\nrun_dir = "run"\n[[steps]]\nid = "x"\ntask = "4"\ncommand = ["true"]\n')
    r = fleet("run", str(one), "--shard", "1/2", cwd=tmp_path, timeout=60)  # task 4 is shard 0's
    assert (r.returncode, r.stdout) == (0, "suite 'one' has no steps in shard 1/2; nothing was started\n"), r.stderr
    assert not (tmp_path / "run").exists()


def test_fleet_up_passes_stale_after_and_max_attempts_to_its_coordinator(tmp_path):
    r = fleet("up", "--local", "--stale-after", "42", "--max-attempts", "3", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    try:
        conn = R.conn_of(tmp_path)
        argv = psutil.Process(conn.pid).cmdline()
        assert argv[argv.index("--stale-after") + 1] == "42.0" and argv[argv.index("--max-attempts") + 1] == "3"
        log = (tmp_path / "coordinator.log").read_text()
        assert "stale claims adopted after 42 s, max attempts 3" in log, log
    finally:
        fleet("down", cwd=tmp_path, timeout=60)
    R.assert_gone(tmp_path)


def test_status_json_errors_are_one_json_object_with_a_nonzero_exit(tmp_path):
    for args, code, words in ((["--run-dir", str(tmp_path)], 1, "no fleet is up"),
                              (["--via", "nohost:1234", "--connection", str(tmp_path / "nope.json")], 1, "nope.json"),
                              # (a malformed --via is said first, before any connection file is looked for)
                              (["--via", "no-port", "--connection", str(tmp_path / "nope.json")], 2, "--via"),
                              (["--interval", "0"], 2, "--interval")):
        r = fleet("status", *args, "--json", cwd=tmp_path, timeout=60)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        err = json.loads(r.stdout)
        assert list(err) == ["error"] and words in err["error"], err
        assert err["error"] in r.stderr and "Traceback" not in r.stderr  # and the usual words for people


def test_every_option_of_every_command_has_help_text_and_shows_its_default():
    import click
    from fleet.cli import main
    for name, cmd in main.commands.items():
        r = fleet(name, "--help", cwd=Path.cwd(), timeout=60)
        assert r.returncode == 0, r.stderr
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.name == "help":
                continue
            assert p.help, f"fleet {name} {p.opts[0]} has no help text"
            if not (p.is_flag or p.required):
                assert p.show_default or p.default is not None, f"fleet {name} {p.opts[0]} shows no default"
        shown = sum(1 for p in cmd.params if isinstance(p, click.Option) and not (p.is_flag or p.required))
        assert " ".join(r.stdout.split()).count("[default:") == shown, (name, r.stdout)


def test_messages_give_sizes_in_human_units_and_counts_in_the_right_number(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "big"\nrun_dir = "run"\n'
                     '[[steps]]\nid = "huge"\ncommand = ["true"]\nmemory = "16GiB"\n')
    r = fleet("validate", str(suite), "--nodes", "1", "--cores-per-node", "2", "--memory-per-node", "4GiB",
              cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "no node has 16GiB of memory" in r.stderr and "bytes" not in r.stderr, r.stderr
    wide = tmp_path / "wide.toml"
    wide.write_text('[suite]\nname = "wide"\nrun_dir = "run"\n'
                    '[[steps]]\nid = "w"\ncommand = ["true"]\ncores = 4096\n')
    r = fleet("run", str(wide), cwd=tmp_path, timeout=90)  # the embedded fleet's allocation says no (before it starts)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "starting an embedded fleet" not in r.stderr and "4096 cores" in r.stderr, r.stderr
    assert r.stderr.splitlines()[-1] == "1 problem found; nothing was started", r.stderr
    assert not (tmp_path / "run").exists()
