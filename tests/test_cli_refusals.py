"""Bad command lines are refused before anything starts, naming the flag, file or field.

Each case runs the real `fleet` command in a fresh process (no fleet is up, no batch
job in its environment) and checks its exit status (2), what it says, and that it left
nothing behind: no run directory, no coordinator log, no process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fleetharness import completed

SUITE = '[[steps]]\nid = "a"\ncommand = "true"\nestimate = 5\n'
ALLOC = ["--nodes", "1", "--cores-per-node", "2"]


def fleet(tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`fleet ARGS` in tmp_path, in its own process group (killed whole if it overruns)."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "PBS_")) and k not in ("FLEET_RUN_DIR", "FLEET_MACHINE", "FLEET_ADVERTISE")}
    return completed([sys.executable, "-m", "fleet", *args], timeout, cwd=tmp_path, env={**clean, **(env or {})},
                     text=True)


def left_behind(tmp_path: Path, within: float = 30.0) -> list[str]:
    """Processes whose command line names tmp_path (a coordinator or agent started
    there), once none is left or `within` seconds have passed (what is stopping ends)."""
    deadline = time.monotonic() + within
    while True:
        out = [" ".join(p.info["cmdline"] or ()) for p in psutil.process_iter(["cmdline"])
               if str(tmp_path) in " ".join(p.info["cmdline"] or ())]
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(0.1)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(SUITE)
    return path


def refused(r: subprocess.CompletedProcess, *said: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for text in said:
        assert text in r.stderr, (text, r.stderr)


UP_CASES = [
    (["--local", "--machine", "nosuch"], ["--local", "--machine nosuch"]),
    (["--machine", "nosuch"], ["--machine", "unknown machine 'nosuch'"]),
    (["--local", "--nodes", str(len(os.sched_getaffinity(0)) + 1)], ["--nodes", "cannot split", "nothing was started"]),
    (["--local", "--heartbeat", "5", "--heartbeat-timeout", "1"], ["--heartbeat-timeout 1", "3 heartbeats"]),
    (["--local", "--heartbeat", "1", "--heartbeat-timeout", "2.5"], ["--heartbeat-timeout 2.5", "at least 3 s"]),
    (["--machine", "slurm"], ["machine slurm", "not inside a batch job", "nothing was started"]),
    (["--local", "--reserve-after", "5", "--no-reservations"], ["--reserve-after", "--no-reservations"]),
    (["--local", "--preload", "numpy,not a module"], ["--preload", "'not a module' is not a module name"]),
    (["--local", "--coordinator-cores", "1"], ["--coordinator-cores 1", "only in a batch job", "nothing was started"]),
]


@pytest.mark.parametrize("args,said", UP_CASES, ids=[" ".join(a) for a, _ in UP_CASES])
def test_fleet_up_refuses_a_bad_command_line_before_it_starts_a_coordinator(tmp_path, args, said):
    run_dir = tmp_path / "rd"
    try:
        r = fleet(tmp_path, "up", "--run-dir", str(run_dir), *args)
        refused(r, *said)
        assert not run_dir.exists()  # no coordinator ran: it would have made the directory and its log
    finally:
        if run_dir.exists():  # (a fleet that came up after all is taken down)
            fleet(tmp_path, "down", "--run-dir", str(run_dir), timeout=120)
    assert left_behind(tmp_path) == []


def test_a_coordinator_keeping_every_core_of_its_node_is_refused_in_a_job_and_outside_one_for_fleet_run(tmp_path, suite):
    job = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "nid[1-2]", "FLEET_MACHINE": "slurm"}
    every = str(len(os.sched_getaffinity(0)))
    r = fleet(tmp_path, "up", "--run-dir", str(tmp_path / "rd"), "--coordinator-cores", every, env=job)
    refused(r, f"--coordinator-cores {every}: this node has", "at least one must be left", "nothing was started")
    refused(fleet(tmp_path, "run", str(suite), "--coordinator-cores", "1"), "--coordinator-cores 1",
            "only in a batch job", "nothing was started")
    assert not (tmp_path / "rd").exists() and not (tmp_path / "runs").exists()
    assert left_behind(tmp_path) == []


def test_nodes_other_than_the_batch_job_s_is_refused_by_fleet_up_and_fleet_run_rather_than_ignored(tmp_path, suite):
    # (it was ignored: `fleet up --nodes 3` in a one-node job came up on that one node
    # without a word; the fleet runs on every node of the job)
    job = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "nid[1-2]", "FLEET_MACHINE": "slurm"}
    said = "a fleet on machine slurm runs on every node of the batch job, which has 2 nodes"
    for nodes in ("3", "1"):
        r = fleet(tmp_path, "up", "--run-dir", str(tmp_path / "rd"), "--nodes", nodes, env=job)
        refused(r, f"--nodes {nodes}: {said}", "leave --nodes out", "give --local", "nothing was started")
        refused(fleet(tmp_path, "run", str(suite), "--nodes", nodes, env=job), f"--nodes {nodes}: {said}",
                "nothing was started")
    assert not (tmp_path / "rd").exists() and not (tmp_path / "runs").exists()
    assert left_behind(tmp_path) == []


def test_a_profile_holding_back_every_core_is_blamed_by_name_and_file_not_nodes(tmp_path, suite):
    # (it said "--nodes 1: cannot split 0 core(s) into 1 pretend node(s)", --nodes not given)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    every = sorted(os.sched_getaffinity(0))
    (profiles / "heldall.toml").write_text(f'[machine]\nlauncher = "local"\nheld_back_cores = {every}\n')
    env = {"FLEET_MACHINES": str(profiles)}
    said = (f"machine heldall ({profiles / 'heldall.toml'}) holds back cores {every}: this machine has none left",
            "hold back fewer in its held_back_cores", "nothing was started")
    for r in (fleet(tmp_path, "up", "--run-dir", str(tmp_path / "rd"), "--machine", "heldall", env=env),
              fleet(tmp_path, "run", str(suite), env={**env, "FLEET_MACHINE": "heldall"})):
        refused(r, *said)
        assert "--nodes" not in r.stderr, r.stderr
    assert not (tmp_path / "rd").exists() and not (tmp_path / "runs").exists()
    assert left_behind(tmp_path) == []


def test_a_broken_local_profile_outside_a_batch_job_is_said_of_the_detected_machine_not_the_batch_job_s(tmp_path,
                                                                                                        suite):
    # (it said "the batch job's machine" where there was no batch job)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "local.toml").write_text('[machine]\nlauncher = "nosuch"\n')
    env = {"FLEET_MACHINES": str(profiles)}
    for r in (fleet(tmp_path, "up", "--run-dir", str(tmp_path / "rd"), env=env), fleet(tmp_path, "run", str(suite), env=env)):
        refused(r, "the detected machine (no batch job: this one)", "field 'machine.launcher'")
        assert "batch job's" not in r.stderr, r.stderr
    assert not (tmp_path / "rd").exists() and not (tmp_path / "runs").exists()


def test_a_date_in_a_call_step_s_args_is_refused_before_anything_starts_not_left_running(tmp_path):
    # (it was: the step started, its launch could not be encoded, and the run never ended)
    dated = tmp_path / "d.toml"
    dated.write_text('[[steps]]\nid = "d"\ncall = "json:dumps"\nargs = { obj = 1979-05-27 }\n')
    refused(fleet(tmp_path, "run", str(dated), timeout=60), "d.toml: step 'd': field 'args'", "args.obj is a TOML date",
            "nothing was started")
    assert not (tmp_path / "runs").exists()


def test_fleet_run_refuses_an_only_that_names_no_step_rather_than_running_every_step(tmp_path, suite):
    r = fleet(tmp_path, "run", str(suite), "--only", " , ")
    refused(r, "--only", "names no step")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("option", ["--only", "--shard"])
def test_fleet_run_refuses_an_empty_only_or_shard_rather_than_taking_it_as_not_given(tmp_path, suite, option):
    # (`--only "$IDS"` with IDS unset ran every step, with --force reran them all; an
    # empty --shard ran the whole suite; the Python API refuses only="")
    r = fleet(tmp_path, "run", str(suite), "--force", option, "")
    refused(r, option)
    assert not (tmp_path / "runs").exists() and left_behind(tmp_path) == []


def test_a_childs_id_given_to_only_or_fleet_step_names_its_parent_and_how_to_run_it_again(tmp_path):
    # (it said "suite 's' has no step 'p/k5'", as for a typo)
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE + '[[steps]]\nid = "p"\ncall = "children_steps:sweep"\n')
    said = ("'p/k5' is not a step of suite 's' but a child of its step 'p'", "fleet run --force --only p")
    refused(fleet(tmp_path, "run", str(suite), "--only", "p/k5"), "--only", *said, "nothing was started")
    refused(fleet(tmp_path, "step", str(suite), "p/k5"), *said)
    refused(fleet(tmp_path, "run", str(suite), "--only", "a/k5"), "--only: suite 's' has no step 'a/k5'")
    assert not (tmp_path / "runs").exists()


COMPANION_CASES = [
    (["validate", "--memory-per-node", "1GiB", "--gpus-per-node", "1"],
     ["--memory-per-node and --gpus-per-node describe the nodes", "give --nodes and --cores-per-node too"]),
    (["validate", "--gpus-per-node", "1"], ["--gpus-per-node describes the nodes", "--nodes and --cores-per-node"]),
    (["run", "--new-generation"], ["--new-generation goes with --shard"]),
    (["run", "--no-wait-foreign"], ["--no-wait-foreign goes with --shard"]),
    (["run", "--with-deps"], ["--with-deps selects with --only"]),
]


@pytest.mark.parametrize("args,said", COMPANION_CASES, ids=[" ".join(a) for a, _ in COMPANION_CASES])
def test_an_option_without_the_one_it_goes_with_is_refused_rather_than_ignored(tmp_path, args, said):
    # (validate said "valid" without checking the GPUs and memory it was given; run
    # took --new-generation and --no-wait-foreign without --shard and did nothing with them)
    big = tmp_path / "big.toml"
    big.write_text('[[steps]]\nid = "a"\ncommand = "true"\ngpus = 4\nmemory = "1TiB"\n')
    refused(fleet(tmp_path, args[0], str(big), *args[1:]), *said)
    assert not (tmp_path / "runs").exists() and left_behind(tmp_path) == []


def test_a_run_directory_that_is_a_file_is_named_with_where_it_came_from(tmp_path, suite):
    (tmp_path / "afile").write_text("")
    r = fleet(tmp_path, "run", str(suite), env={"FLEET_RUN_DIR": str(tmp_path / "afile")})
    refused(r, "afile", "$FLEET_RUN_DIR", "is a file, not a directory")
    in_suite = tmp_path / "t.toml"
    in_suite.write_text('[suite]\nrun_dir = "afile"\n' + SUITE)
    refused(fleet(tmp_path, "run", str(in_suite)), "t.toml: field 'suite.run_dir'", "is a file")
    refused(fleet(tmp_path, "validate", str(in_suite)), "t.toml: field 'suite.run_dir'", "is a file")


def test_a_run_directory_that_would_be_made_in_a_file_is_refused_by_validate_as_run_refuses_it(tmp_path):
    (tmp_path / "afile").write_text("")
    in_suite = tmp_path / "t.toml"
    in_suite.write_text('[suite]\nrun_dir = "afile/sub"\n' + SUITE)
    said = (f"t.toml: field 'suite.run_dir': {tmp_path}/afile/sub cannot be made: {tmp_path}/afile is a file, "
            "not a directory", "nothing was started")
    refused(fleet(tmp_path, "validate", str(in_suite)), *said, "1 problem found")
    refused(fleet(tmp_path, "run", str(in_suite)), f"cannot use run directory {tmp_path}/afile/sub: Not a directory")
    # With the suite's other problems, at once.
    in_suite.write_text('[suite]\nrun_dir = "afile/sub"\n' + SUITE + "cores = 0\n")
    refused(fleet(tmp_path, "validate", str(in_suite)), "t.toml: step 'a': field 'cores'", *said, "2 problems found")
    assert (tmp_path / "afile").read_text() == "" and left_behind(tmp_path) == []


SIMULATE_CASES = [
    (["--drain-before", "5m"], ["--drain-before", "give --walltime too"]),
    (["--reserve-after", "5", "--no-reservations"], ["--reserve-after", "--no-reservations"]),
    (["--reserve-ahead", "2", "--no-reservations"], ["--reserve-ahead", "--no-reservations"]),
    (["--compare-orders", "--compare-reservations"], ["--compare-orders", "--compare-reservations"]),
    (["--no-reservations", "--compare-reservations"], ["--compare-reservations", "--no-reservations"]),
]


@pytest.mark.parametrize("args,said", SIMULATE_CASES, ids=[" ".join(a) for a, _ in SIMULATE_CASES])
def test_fleet_simulate_refuses_options_that_undo_each_other_instead_of_ignoring_one(tmp_path, suite, args, said):
    refused(fleet(tmp_path, "simulate", str(suite), *ALLOC, *args), *said)


def test_a_simulated_drain_margin_is_taken_as_a_fleet_takes_it_and_a_too_long_one_is_said(tmp_path, suite):
    r = fleet(tmp_path, "simulate", str(suite), *ALLOC, "--walltime", "10m", "--drain-before", "1m")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "(drain point 540.0 s)" in r.stdout
    r = fleet(tmp_path, "simulate", str(suite), *ALLOC, "--walltime", "10m", "--drain-before", "20m")
    assert r.returncode == 0, r.stderr  # (it was a drain point of 0: nothing ran)
    assert "(drain point 300.0 s)" in r.stdout
    assert "draining 5 min before the end instead (half the time left)" in r.stderr


def test_fleet_report_says_a_file_is_not_an_event_stream_and_where_it_cannot_write(tmp_path, suite):
    refused(fleet(tmp_path, "report", str(suite)), "s.toml is not a fleet event stream")
    run_dir = tmp_path / "rd"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text("")  # a stream with nothing in it yet is one
    assert fleet(tmp_path, "report", str(run_dir)).returncode == 0
    refused(fleet(tmp_path, "report", str(run_dir), "--trace", str(tmp_path / "nodir" / "t.json")),
            "--trace", "no directory")
    refused(fleet(tmp_path, "report", str(run_dir), "--html", str(tmp_path / "nodir" / "r.html")),
            "--html", "no directory")
    assert not (tmp_path / "nodir").exists()


def test_a_stream_whose_first_line_was_damaged_or_is_still_being_written_is_still_a_stream(tmp_path):
    run_dir = tmp_path / "rd"
    run_dir.mkdir()
    record = '{"t": 1.0, "kind": "fleet_starting", "fleet": "f", "nodes": 1, "pid": 1, "machine": "local"}'
    (run_dir / "events.jsonl").write_text('{"t": 0.5, "kind": "fleet_sta' + record + "\n" + record + "\n")
    assert fleet(tmp_path, "report", str(run_dir)).returncode == 0  # (a fleet killed mid-write, then another)
    (run_dir / "events.jsonl").write_text(record[:30])  # a live run's first line, half written
    assert fleet(tmp_path, "report", str(run_dir)).returncode == 0


def test_fleet_run_outside_a_batch_job_says_where_its_machine_came_from(tmp_path, suite):
    r = fleet(tmp_path, "run", str(suite), env={"FLEET_MACHINE": "slurm"})
    refused(r, "machine slurm", "not inside a batch job", "the machine is $FLEET_MACHINE", "nothing was started")
    assert not (tmp_path / "runs").exists()


def test_fleet_audit_of_a_directory_with_no_run_in_it_is_not_a_clean_audit(tmp_path):
    (tmp_path / "empty").mkdir()
    refused(fleet(tmp_path, "audit", "empty"), "no run in empty")
    r = fleet(tmp_path, "audit", "empty", "--json")
    refused(r, "no run in empty")
    assert json.loads(r.stdout) == {"error": "no run in empty: no .fleet directory and no events.jsonl there"}


JSON_REFUSALS = [
    (["simulate", "bad.toml", *ALLOC], "field 'call': give exactly one of call and command"),
    (["simulate", "s.toml", *ALLOC, "--walltime", "0.5"], "--walltime 0.5: the allocation would end now"),
    (["simulate", "s.toml", "--cores-per-node", "2"], "Missing option '--nodes'"),
    (["simulate", "s.toml", *ALLOC, "--no-reservations", "--compare-reservations"], "--no-reservations"),
    (["audit", "nosuchdir"], "Directory 'nosuchdir' does not exist"),
    (["audit", "empty", "--suite", "bad.toml"], "field 'call': give exactly one of call and command"),
]


@pytest.mark.parametrize("args,said", JSON_REFUSALS, ids=[" ".join(a) for a, _ in JSON_REFUSALS])
def test_a_json_refusal_of_simulate_or_audit_is_one_error_object_on_stdout_as_fleet_report_gives(
        tmp_path, suite, args, said):
    # (simulate and a mistyped audit path printed nothing on stdout: a script reading it got no JSON)
    (tmp_path / "bad.toml").write_text('[[steps]]\nid = "a"\n')
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "events.jsonl").write_text(
        '{"t": 1.0, "kind": "fleet_starting", "fleet": "f", "nodes": 1, "pid": 1, "machine": "local"}\n')
    r = fleet(tmp_path, *args, "--json")
    refused(r, said)
    err = json.loads(r.stdout)
    assert said in err["error"], err


def test_fleet_run_on_a_fleet_that_is_up_says_which_of_its_options_it_ignores(tmp_path, suite):
    run_dir = tmp_path / "rd"
    up = fleet(tmp_path, "up", "--local", "--run-dir", str(run_dir), timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        # (--heartbeat 6 with the default timeout of 10 s would be refused for a fleet it starts)
        r = fleet(tmp_path, "run", str(suite), "--run-dir", str(run_dir), "--walltime", "1h", "--nodes", "2",
                  "--heartbeat", "6")
        assert r.returncode == 0, r.stderr
        assert "--nodes, --heartbeat, --walltime: for a fleet that fleet run starts itself" in r.stderr
        assert "(ignored)" in r.stderr
        quiet = fleet(tmp_path, "run", str(suite), "--run-dir", str(run_dir))
        assert quiet.returncode == 0 and "ignored" not in quiet.stderr, quiet.stderr
    finally:
        down = fleet(tmp_path, "down", "--run-dir", str(run_dir), timeout=120)
        assert down.returncode == 0, down.stderr
    assert left_behind(tmp_path) == []


def test_sizes_and_durations_are_read_as_elsewhere_and_a_node_of_no_memory_is_refused(tmp_path, suite):
    for given, seconds in (("5m", 300.0), ("1e3", 1000.0), (".5", 0.5), ("0", 0.0)):
        ok = fleet(tmp_path, "simulate", str(suite), *ALLOC, "--reserve-after", given, "--compare-reservations",
                   "--json")
        assert ok.returncode == 0, ok.stderr  # a duration, as --walltime takes one, or plain seconds
        assert json.loads(ok.stdout)["reserve_after_s"] == seconds
    refused(fleet(tmp_path, "simulate", str(suite), *ALLOC, "--reserve-after", "-1"), "--reserve-after")
    refused(fleet(tmp_path, "simulate", str(suite), *ALLOC, "--memory-per-node", "0"),
            "--memory-per-node", "more than 0")


def test_fleet_down_on_a_directory_that_does_not_exist_says_so_and_still_exits_0(tmp_path):
    r = fleet(tmp_path, "down", "--run-dir", str(tmp_path / "nosuch"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"no fleet was up in {tmp_path / 'nosuch'} (no such directory)"
    assert not (tmp_path / "nosuch").exists()


def test_a_watch_interval_that_is_not_a_bounded_number_of_seconds_is_refused_before_the_fleet_is_looked_for(tmp_path):
    # (nan, inf and 1e10 crashed the sleep after the first redraw; 1e-9 polled in a tight loop)
    for given in ("nan", "inf", "1e10", "1e-9", "0", "-1"):
        for json_flag in ((), ("--json",)):
            r = fleet(tmp_path, "status", "--watch", "--interval", given, *json_flag, "--run-dir", str(tmp_path / "no"))
            refused(r, "--interval", "give 0.1 to 86400 seconds")
    r = fleet(tmp_path, "status", "--watch", "--interval", "0.1", "--run-dir", str(tmp_path / "no"))
    assert r.returncode == 1 and "--interval" not in r.stderr, r.stderr  # (taken: no fleet is up there)


NOT_SECONDS = [("up", "--timeout", "nan", "more than 0 to 31536000 seconds"),
               ("up", "--heartbeat", "nan", "0.05 to 31536000 seconds (a year)"),
               ("up", "--heartbeat-timeout", "nan", "0.5 to 31536000"),
               ("up", "--stale-after", "nan", "0 to 31536000"),
               ("up", "--report-hold", "nan", "0 to 31536000"),
               ("up", "--timeout", "inf", "more than 0 to"),
               ("run", "--heartbeat-timeout", "inf", "0.5 to"),
               ("run", "--stale-after", "-inf", "0 to"),
               ("run", "--heartbeat", "1e400", "0.05 to"),
               ("audit", "--stale-after", "nan", "0 to")]


def test_nan_and_infinite_seconds_are_refused_by_every_option_that_takes_seconds_before_anything_starts(tmp_path, suite):
    # (click.FloatRange let nan through: a nan heartbeat crashed the coordinator after the
    # run directory was made; a nan heartbeat timeout or stale-after turned losing agents
    # and adopting claims off without a word; an infinite --timeout waited for ever)
    run_dir = tmp_path / "rd"
    for command, option, given, said in NOT_SECONDS:
        target = {"up": ["--local"], "run": [str(suite)], "audit": [str(tmp_path)]}[command]
        r = fleet(tmp_path, command, *target, "--run-dir", str(run_dir), option, given) if command != "audit" \
            else fleet(tmp_path, command, *target, option, given)
        refused(r, f"Invalid value for '{option}': '{given}': give", said)
        assert not run_dir.exists() and not (tmp_path / "runs").exists(), (command, option, given)
    assert left_behind(tmp_path) == []


def test_a_bad_via_is_named_even_where_no_connection_file_is(tmp_path):
    refused(fleet(tmp_path, "status", "--via", "nohost:abc"), "--via", "'nohost:abc': give HOST:PORT")


def test_a_run_directory_whose_path_fleet_could_not_make_files_under_is_refused_by_every_command(tmp_path, suite):
    # Its files would fail deep in the coordinator (ENAMETOOLONG) after the fleet started:
    # refused first, with the reason, and nothing made.
    too_long = tmp_path / "/".join(["r" * 200] * 11)  # > 2,048 bytes in all
    long_name = tmp_path / ("n" * 300)  # one name > 255 bytes
    for run_dir, why in ((too_long, "bytes long; the files fleet makes under it need it at most 2048"),
                         (long_name, "a name in its path is 300 bytes long")):
        refused(fleet(tmp_path, "run", str(suite), "--run-dir", str(run_dir)), "(--run-dir) cannot be used", why,
                "nothing was started")
        for cmd in ("up", "down"):
            r = fleet(tmp_path, cmd, "--run-dir", str(run_dir))
            assert r.returncode in (1, 2) and "Traceback" not in r.stderr and why in r.stderr, (cmd, r.stderr)
        r = fleet(tmp_path, "status", "--run-dir", str(run_dir))
        assert r.returncode == 1 and "no fleet is up" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]
    assert not left_behind(tmp_path, within=1.0)


def test_a_run_directory_whose_event_stream_is_not_a_writable_file_is_refused_and_reported_without_a_traceback(
        tmp_path, suite):
    # What an earlier run left, damaged (a directory in the stream's place here; another
    # user's file, or one made read-only, the same way for a user who is not root).
    run_dir = tmp_path / "run"
    (run_dir / "events.jsonl").mkdir(parents=True)
    r = fleet(tmp_path, "run", str(suite), "--run-dir", str(run_dir))
    refused(r, "its events.jsonl is not a file this user can write")
    r = fleet(tmp_path, "up", "--run-dir", str(run_dir))
    refused(r, "its events.jsonl is not a file this user can write")
    r = fleet(tmp_path, "report", str(run_dir))
    refused(r, "cannot read the event stream", "Is a directory")
    r = fleet(tmp_path, "audit", str(run_dir))
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["events.jsonl"]  # nothing else made there
    assert not left_behind(tmp_path, within=1.0)


def test_a_damaged_connection_file_is_named_with_what_to_do_about_it(tmp_path, suite):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / "fleet.json").write_text("garbage")
    (run_dir / "fleet.json").chmod(0o600)
    for argv in (("status", "--run-dir", str(run_dir)), ("down", "--run-dir", str(run_dir)),
                 ("run", str(suite), "--run-dir", str(run_dir))):
        r = fleet(tmp_path, *argv)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (argv, r.stderr)
        assert "fleet.json: not a fleet connection file" in r.stderr and "remove that file" in r.stderr, r.stderr


def test_a_run_directory_others_can_write_is_refused_before_anything_starts_or_is_said(tmp_path, suite):
    # (a umask of 002, common on project file systems, makes new directories so)
    run_dir = tmp_path / "shared"
    run_dir.mkdir()
    run_dir.chmod(0o775)
    for argv in (("up", "--local", "--run-dir", str(run_dir)), ("run", str(suite), "--run-dir", str(run_dir))):
        r = fleet(tmp_path, *argv)
        refused(r, f"cannot use run directory {run_dir}: others can write to it (mode 0775)", f"chmod go-w {run_dir}")
        assert "starting an embedded fleet" not in r.stderr, r.stderr
    assert list(run_dir.iterdir()) == []  # nothing made there
    assert not left_behind(tmp_path, within=1.0)


def test_fleet_step_record_refuses_a_run_directory_others_can_write_as_fleet_run_does(tmp_path, suite):
    # Before 2026-12-06 fleet step --record wrote its records there (fleet run refused the directory).
    run_dir = tmp_path / "shared"
    run_dir.mkdir()
    run_dir.chmod(0o775)
    r = fleet(tmp_path, "step", str(suite), "a", "--record", "--run-dir", str(run_dir))
    refused(r, f"cannot use run directory {run_dir}: others can write to it (mode 0775)", f"chmod go-w {run_dir}")
    assert list(run_dir.iterdir()) == []  # nothing made there
    # Without --record nothing of fleet's is written there: the step runs in it.
    r = fleet(tmp_path, "step", str(suite), "a", "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["steps"]
    assert not left_behind(tmp_path, within=1.0)


def test_status_via_with_ssh_or_a_port_out_of_range_is_a_usage_error(tmp_path):
    r = fleet(tmp_path, "status", "--ssh", "login1", "--via", "127.0.0.1:5555")
    refused(r, "--ssh and --via: give one")
    for port in ("99999", "0"):
        r = fleet(tmp_path, "status", "--via", f"127.0.0.1:{port}")
        refused(r, f"'127.0.0.1:{port}': the port must be 1 to 65535")


@pytest.mark.parametrize("value", ["2m", "nan", "0", "-5"])
def test_a_bad_fleet_run_silence_is_refused_before_anything_starts_not_a_traceback_mid_run(tmp_path, suite, value):
    # (before 2026-12-07 read only once the suite ran: "2m" a traceback that took the
    # embedded fleet down, its step interrupted; "nan" a wait that never gave up)
    r = fleet(tmp_path, "run", str(suite), env={"FLEET_RUN_SILENCE": value})
    refused(r, f"FLEET_RUN_SILENCE={value!r}", "a number of seconds above 0", "nothing was started")
    assert not (tmp_path / "runs").exists() and left_behind(tmp_path) == []


@pytest.mark.parametrize("args,said", [(["--ssh-option", "-p 2222"], "--ssh-option goes with --ssh"),
                                       (["--interval", "5"], "--interval goes with --watch")])
def test_a_status_option_without_the_one_it_goes_with_is_refused_rather_than_ignored(tmp_path, args, said):
    r = fleet(tmp_path, "status", *args)
    assert r.returncode == 2 and said in r.stderr, (r.returncode, r.stderr)


def test_simulate_says_the_gpus_it_assumed_as_validate_does(tmp_path):
    (tmp_path / "g.toml").write_text('[[steps]]\nid = "g"\ncommand = "true"\ngpus = 1\n')
    for command in ("validate", "simulate"):
        r = fleet(tmp_path, command, "g.toml", "--nodes", "1", "--cores-per-node", "2")
        assert r.returncode == 2 and "assumed no GPUs: give --gpus-per-node" in r.stderr, (command, r.stderr)


def test_drain_before_with_no_end_known_is_said_by_fleet_run_not_only_in_the_coordinators_log(tmp_path, suite):
    r = fleet(tmp_path, "run", str(suite), "--drain-before", "1m")
    assert r.returncode == 0, r.stderr
    assert "--drain-before is given, but no end of the allocation is known" in r.stderr, r.stderr
    r = fleet(tmp_path, "run", str(suite), "--drain-before", "1m", "--walltime", "1h")
    assert "no end of the allocation is known" not in r.stderr, r.stderr
