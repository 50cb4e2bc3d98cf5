"""One-step debugging (`fleet step`), step selection (`fleet run --only`) and the
Python API (`fleet.connect`), through the real CLI and real fleets."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import psutil

from fleetharness import assert_nothing_left, env, fleet, records, spawn, wait_for, write_suite

from fleet.node.probe import usable_cores
from fleet.wire import events as E

DOCS = Path(__file__).resolve().parents[2] / "docs"

SUITE = """
[suite]
name = "dbg"
run_dir = "run"
[[steps]]
id = "rec"
call = "steps:record"
cores = 1
[[steps]]
id = "env"
command = "echo step=$FLEET_STEP attempt=$FLEET_ATTEMPT omp=$OMP_NUM_THREADS; pwd; grep Cpus_allowed_list /proc/self/status"
deps = ["rec"]
[[steps]]
id = "three"
command = "echo three failing >&2; exit 3"
"""


def in_pty(*args: str, cwd: Path, timeout: float = 60.0) -> tuple[int, str]:
    """Run `fleet ARGS` with a pseudo-terminal as stdin, stdout and stderr; (status, what it showed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=cwd, env=env(), stdin=slave,
                         stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other side closed (Linux: EIO)
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
        else:
            raise AssertionError(f"fleet {' '.join(args)} timed out:\n{out.decode(errors='replace')}")
        return p.wait(timeout=10), out.decode(errors="replace").replace("\r\n", "\n")
    finally:
        os.close(master)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def nothing_recorded(run: Path, fleet_dirs: bool = False) -> None:
    """No record of the step; nor (unless `fleet_dirs`: an MPI step's launcher files
    are kept there) any empty .fleet directory."""
    if not fleet_dirs:
        assert not list(run.glob("steps/**/.fleet")), sorted(run.glob("steps/**/.fleet"))
    assert not (run / "events.jsonl").exists()
    assert not list(run.glob("steps/*/.fleet/done.json"))
    assert not list(run.glob("steps/*/.fleet/attempt.*"))
    assert not list(run.glob("steps/*/.fleet/claim"))
    assert not list(run.glob("steps/*/log"))


def test_fleet_step_runs_a_call_step_in_the_foreground_with_its_output_on_the_terminal(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    code, shown = in_pty("step", str(suite), "rec", cwd=tmp_path)
    assert code == 0, shown
    assert "hello on stdout" in shown and "hello on stderr" in shown and "raw fd 1" in shown
    run = tmp_path / "run"
    seen = json.loads((run / "steps/rec/record.json").read_text())
    assert seen["cwd"] == str(run / "steps/rec")
    # What a one-node local fleet gives a one-core step: one of this machine's usable cores.
    assert len(seen["affinity"]) == 1 and set(seen["affinity"]) <= set(usable_cores())
    assert seen["cores"] == seen["affinity"]
    assert seen["omp_now"] == "1" and seen["id"] == "rec" and seen["attempt"] == 1
    assert seen["sigint_default"] and seen["sigterm_default"]
    nothing_recorded(run)


def test_fleet_step_runs_a_command_with_the_fleet_environment_and_its_exit_status(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    r = fleet("step", str(suite), "env", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    # stdout is the step's alone; fleet's own lines (and the unfinished dependency) on stderr.
    lines = r.stdout.splitlines()
    assert lines[0] == "step=env attempt=1 omp=1"  # one core (the default), one thread
    assert lines[1] == str(run / "steps/env")
    assert int(lines[2].split(":")[1]) in usable_cores()
    assert "dependency 'rec' has not succeeded" in r.stderr
    r = fleet("step", str(suite), "three", cwd=tmp_path, timeout=60)
    assert r.returncode == 3 and "three failing" in r.stderr and "three failed: exit status 3" in r.stderr
    nothing_recorded(run)


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="no mpiexec on this machine")
def test_fleet_step_runs_an_mpi_step_through_the_launcher_a_local_fleet_renders(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "m"
run_dir = "run"
[[steps]]
id = "m"
command = ["sh", "-c", "echo rank ${PMI_RANK:-$OMPI_COMM_WORLD_RANK} of ${PMI_SIZE:-$OMPI_COMM_WORLD_SIZE} $CASE"]
mpi = true
ranks = 2
env = { CASE = "ocean" }
""")
    r = fleet("step", str(suite), "m", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    # (the step's env reaches every rank through the launcher's environment)
    assert sorted(r.stdout.splitlines()) == ["rank 0 of 2 ocean", "rank 1 of 2 ocean"]
    nothing_recorded(tmp_path / "run", fleet_dirs=True)


def ignores_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(mask & (1 << (signal.SIGINT - 1)))


def _cwd(proc: psutil.Process) -> str | None:
    try:
        return proc.cwd()
    except psutil.Error:
        return None


@pytest.mark.parametrize("kind", ["command", "call"])
def test_ctrl_c_stops_the_step_and_fleet_step_says_so_with_its_status(tmp_path, kind):
    how = ('command = "touch started; sleep 30"' if kind == "command"
           else 'call = "fleet_steps:nap"\nargs = { seconds = 30 }')
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "int"
run_dir = "run"
[[steps]]
id = "long"
{how}
""")
    p = spawn("step", str(suite), "long", cwd=tmp_path)
    try:
        workdir = str(tmp_path / "run/steps/long")
        # fleet step ignores SIGINT once the step exists, and the step is past its set-up
        # (a call step's child is in its work directory; a command's shell made its file).
        wait_for(lambda: ignores_sigint(p.pid) and any(_cwd(c) == workdir for c in psutil.Process(p.pid).children())
                 and (kind == "call" or os.path.exists(workdir + "/started")), what="the step to start")
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C does: the terminal's whole group
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, err
    assert "long terminated: killed by SIGINT" in err


def test_fleet_step_refuses_an_unknown_step_naming_it(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE)
    r = fleet("step", str(suite), "nope", cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "no step 'nope'" in r.stderr and not (tmp_path / "run").exists()


def test_fleet_step_record_writes_a_marker_that_a_later_fleet_run_skips(tmp_path):
    suite = write_suite(tmp_path / "s.toml", SUITE.split('[[steps]]\nid = "three"')[0])
    r = fleet("step", str(suite), "rec", "--record", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    done = json.loads((run / "steps/rec/.fleet/done.json").read_text())
    assert done["outcome"] == "succeeded" and done["fleet"].startswith("step-")
    [attempt] = (run / "steps/rec/.fleet").glob("attempt.*.json")
    assert json.loads(attempt.read_text())["outcome"] == "succeeded"
    assert not (run / "events.jsonl").exists()
    r = fleet("run", str(suite), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 steps, 1 already done" in r.stdout
    ran = {e.step for e in records(run) if isinstance(e, E.Exit)}
    assert ran == {"env"}
    assert_nothing_left(run)


CHAIN = """
[suite]
name = "chain"
run_dir = "run"
[[steps]]
id = "a"
command = "echo a > a.txt"
[[steps]]
id = "b"
command = "cat ../a/a.txt > b.txt"
deps = ["a"]
[[steps]]
id = "c"
command = "cat ../b/b.txt > c.txt"
deps = ["b"]
[[steps]]
id = "other"
command = "true"
"""


def test_fleet_run_only_refuses_an_unselected_dependency_that_has_not_succeeded(tmp_path):
    suite = write_suite(tmp_path / "s.toml", CHAIN)
    r = fleet("run", str(suite), "--only", "c", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "step 'c': field 'deps': depends on 'b', which is not selected and has not succeeded" in r.stderr
    r = fleet("run", str(suite), "--only", "c,zz,yy", cwd=tmp_path)
    assert r.returncode == 2 and "has no step 'zz', 'yy'" in r.stderr
    assert not list((tmp_path / "run").glob("steps/*/*.txt"))


BY_FILES = """
[suite]
name = "files"
run_dir = "run"
[[steps]]
id = "a"
task = "0"
command = "echo a > a.txt"
outputs = ["steps/a/a.txt"]
[[steps]]
id = "b"
task = "1"
command = "cat ../a/a.txt"
inputs = ["./steps/a/a.txt"]
[[steps]]
id = "c"
task = "1"
command = "cat ../a/a.txt"
deps = ["a"]
inputs = ["steps/a/a.txt"]
"""


def test_a_refused_dependency_is_named_by_the_field_it_comes_from_deps_or_inputs(tmp_path):
    suite = write_suite(tmp_path / "s.toml", BY_FILES)
    run = tmp_path / "run"
    r = fleet("run", str(suite), "--only", "b,c", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("error: ")] == [
        f"error: {suite}: step 'b': field 'inputs': './steps/a/a.txt' is an output of 'a', which is not selected "
        f"and has not succeeded in {run} (add it to --only, or use --with-deps)",
        f"error: {suite}: step 'c': field 'deps': depends on 'a', which is not selected "
        f"and has not succeeded in {run} (add it to --only, or use --with-deps)"], r.stderr
    r = fleet("run", str(suite), "--shard", "1/2", "--no-wait-foreign", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("error: ")] == [
        f"error: {suite}: step 'b': field 'inputs': './steps/a/a.txt' is an output of 'a', which shard 0/2 runs "
        f"(--no-wait-foreign)",
        f"error: {suite}: step 'c': field 'deps': depends on 'a', which shard 0/2 runs (--no-wait-foreign)"], r.stderr
    assert not list(run.glob("steps/*"))


def test_fleet_run_only_with_deps_runs_the_selection_and_its_ancestors_and_then_a_step_alone(tmp_path):
    suite = write_suite(tmp_path / "s.toml", CHAIN)
    run = tmp_path / "run"
    r = fleet("run", str(suite), "--only", "b", "--with-deps", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert {e.step for e in records(run) if isinstance(e, E.Exit)} == {"a", "b"}
    # c alone: b succeeded on disk, so it is waited for through its marker, not run.
    r = fleet("run", str(suite), "--only", "c", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 steps, 1 already done" in r.stdout
    exits = [e.step for e in records(run) if isinstance(e, E.Exit)]
    assert sorted(exits) == ["a", "b", "c"]
    assert (run / "steps/c/c.txt").read_text() == "a\n"
    # The whole suite now runs only what never ran, c's marker counting against b's.
    r = fleet("run", str(suite), cwd=tmp_path)
    assert r.returncode == 0 and "4 steps, 3 already done" in r.stdout, r.stdout + r.stderr
    assert_nothing_left(run)


def python_examples(md: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", md.read_text(), re.S)


def test_the_python_api_examples_in_the_docs_run_against_a_fleet_that_is_up(tmp_path):
    examples = python_examples(DOCS / "python-api.md")
    assert len(examples) >= 4
    run = tmp_path / "run"
    fleet("up", "--local", "--run-dir", str(run), cwd=tmp_path, check=True)
    try:
        for i, code in enumerate(examples):
            p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**env(), "FLEET_RUN_DIR": str(run)},
                               capture_output=True, text=True, timeout=180, start_new_session=True)
            assert p.returncode == 0, f"example {i + 1}:\n{code}\n{p.stdout}\n{p.stderr}"
            if "HELLO" in code:
                assert p.stdout.strip() == "HELLO"
            if "refused" in code:
                assert "refused:" in p.stdout and "nowhere" in p.stdout
        api = run / ".fleet/api"
        assert stat.S_IMODE(api.stat().st_mode) == 0o700
        assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in api.iterdir())
        assert not (run / "fleet.json").exists(), "the last example stops the fleet"
    finally:
        fleet("down", "--run-dir", str(run), cwd=tmp_path)
    assert_nothing_left(run)


def test_the_python_api_submits_waits_reads_status_and_says_what_it_refuses(tmp_path):
    import fleet as F
    from fleetharness import fleet as cli
    run = tmp_path / "run"
    with pytest.raises(F.FleetError, match="no fleet is up"):
        F.connect(run)
    cli("up", "--local", "--run-dir", str(run), cwd=tmp_path, check=True)
    try:
        f = F.connect(run)
        with pytest.raises(ValueError, match="step 'n': field 'args'"):
            f.submit([{"id": "n", "call": "steps:record", "args": {"x": None}}])
        updates = []
        sub = f.submit([{"id": "ok", "command": "true"}, {"id": "no", "command": "exit 4"}], name="mixed")
        assert (sub.steps, sub.skipped) == (2, 0)
        assert f.wait(sub, timeout=60, on_progress=updates.append) == {"ok": "succeeded", "no": "failed"}
        assert updates[-1].outcomes == {"ok": "succeeded", "no": "failed"}
        assert f.status()["counts"].get("succeeded") == 1
        # An ended step is named back as ended; an unknown id cancels nothing and says so.
        assert f.cancel(["ok"]).ended == ["ok"]
        assert f.cancel(["ok", "nosuch"]).unknown == ["nosuch"]
        slow = f.submit([{"id": "slow", "command": "sleep 60"}, {"id": "after", "command": "true", "deps": ["slow"]}],
                        name="slow")
        wait_for(lambda: f.status()["counts"].get("running") == 1, 30, "the slow step to run")
        reply = f.cancel(every=True)
        assert (reply.running, reply.waiting) == (["slow"], ["after"]), reply
        assert f.wait(slow, timeout=60) == {"slow": "cancelled", "after": "cancelled"}
        # A fleet stopped under a wait: the error says it was stopped (its fleet_down record).
        last = f.submit([{"id": "last", "command": "sleep 60"}], name="last")
        wait_for(lambda: f.status()["counts"].get("running") == 1, 30, "the last step to run")
        cli("down", "--run-dir", str(run), cwd=tmp_path, check=True)  # (another process: f stays open)
        with pytest.raises(F.FleetError, match="went down before the submission finished: it was stopped"):
            f.wait(last, timeout=60)
        f.close()  # used after close (or down()): said so, not pyzmq's "not a socket"
        with pytest.raises(F.FleetError, match="connection to the coordinator at .* is closed"):
            f.status()
    finally:
        cli("down", "--run-dir", str(run), cwd=tmp_path)
    assert_nothing_left(run)
