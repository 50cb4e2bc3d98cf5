"""The whole fleet on one machine: real coordinator, agents, zygotes, ZeroMQ and fork."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, fleet, records, spawn, wait_for, write_suite

from fleet.wire import events as E


def exits(run_dir: Path) -> dict[str, E.Exit]:
    return {e.step: e for e in records(run_dir) if isinstance(e, E.Exit)}


def test_independent_steps_overlap_and_land_on_both_pretend_nodes(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "overlap"
run_dir = "run"
[[steps]]
id = "nap/{i}"
array = "1-4"
call = "fleet_steps:nap"
args = { seconds = 0.6 }
""")
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ex = exits(tmp_path / "run")
    assert sorted(ex) == ["nap/1", "nap/2", "nap/3", "nap/4"]
    assert {e.node for e in ex.values()} == {"node1", "node2"}
    # Overlap from recorded times: some pair of steps ran at the same moment.
    spans = sorted((e.work_start, e.work_end) for e in ex.values())
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans
    # Each step had exactly the one core of its node, disjoint between nodes.
    cores = {json.loads((tmp_path / "run/steps" / s / "nap.json").read_text())["cores"][0]: e.node
             for s, e in ex.items()}
    assert len(cores) == 2
    # The startup figure is the decision-to-work gap, kept apart from the work itself.
    for e in ex.values():
        assert e.decided_at <= e.first_at <= e.work_start <= e.work_end <= e.ended_at
        assert e.work_s >= 0.55
        assert e.startup_s == pytest.approx(e.work_start - e.decided_at, abs=1e-5)
    assert_nothing_left(tmp_path / "run")


def test_a_failure_blocks_its_dependents_and_nothing_else(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "fail"
run_dir = "run"
[[steps]]
id = "bad"
command = ["sh", "-c", "echo failing >&2; exit 7"]
[[steps]]
id = "child"
call = "fleet_steps:produce"
deps = ["bad"]
[[steps]]
id = "grandchild"
call = "fleet_steps:produce"
deps = ["child"]
[[steps]]
id = "bystander"
call = "fleet_steps:produce"
outputs = ["by.json"]
[[steps]]
id = "after-bystander"
call = "fleet_steps:combine"
inputs = ["by.json"]
""")
    r = fleet("run", str(suite), cwd=tmp_path)
    assert r.returncode == 1
    ev = records(tmp_path / "run")
    outcome = {e.step: e.outcome for e in ev if isinstance(e, E.Exit)}
    blocked = {e.step: e.because for e in ev if isinstance(e, E.Blocked)}
    assert outcome == {"bad": "failed", "bystander": "succeeded", "after-bystander": "succeeded"}
    assert blocked == {"child": "bad", "grandchild": "bad"}
    assert exits(tmp_path / "run")["bad"].returncode == 7
    assert "failing" in (tmp_path / "run/steps/bad/log").read_text()
    assert "bad" in r.stdout and "exit status 7" in r.stdout


def test_a_rerun_resumes_from_what_succeeded_and_force_reruns_everything(tmp_path):
    flag = tmp_path / "flag"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "rerun"
run_dir = "run"
[[steps]]
id = "first"
call = "fleet_steps:count_runs"
[[steps]]
id = "flaky"
call = "fleet_steps:fail_unless_flag"
args = {{ flag = "{flag}" }}
deps = ["first"]
[[steps]]
id = "last"
call = "fleet_steps:count_runs"
deps = ["flaky"]
""")
    run_dir = tmp_path / "run"
    assert fleet("run", str(suite), cwd=tmp_path).returncode == 1
    assert (run_dir / "runs.txt").read_text().split() == ["first"]
    flag.write_text("go")
    r = fleet("run", str(suite), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # "first" was not run again; "flaky" and "last" were.
    assert (run_dir / "runs.txt").read_text().split() == ["first", "last"]
    assert "skipped" in r.stdout
    r = fleet("run", str(suite), "--force", cwd=tmp_path)
    assert r.returncode == 0
    assert (run_dir / "runs.txt").read_text().split() == ["first", "last", "first", "last"]


def test_a_step_killed_by_a_signal_is_terminated_and_names_its_neighbours(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "kill"
run_dir = "run"
[[steps]]
id = "victim"
call = "fleet_steps:kill_self"
args = { after = 0.5 }
[[steps]]
id = "neighbour"
call = "fleet_steps:nap"
args = { seconds = 1.5 }
memory = "100MB"
""")
    # One node of two cores: both steps run there at once.
    r = fleet("run", str(suite), cwd=tmp_path)
    assert r.returncode == 1
    e = exits(tmp_path / "run")["victim"]
    assert e.outcome == "terminated" and e.signal == signal.SIGKILL
    assert [n["step"] for n in e.neighbours] == ["neighbour"]
    assert e.neighbours[0]["memory"] == 100_000_000
    assert "SIGKILL" in e.reason and "neighbour" in e.reason
    assert "terminated" in r.stdout and "SIGKILL" in r.stdout


def test_the_zygote_refuses_a_preload_that_starts_a_thread_and_fleet_up_says_why(tmp_path):
    r = fleet("up", "--run-dir", str(tmp_path / "run"), "--preload", "preload_starts_thread",
              cwd=tmp_path, timeout=60)
    assert r.returncode != 0
    assert "threads" in r.stderr and "preload_starts_thread" in r.stderr, r.stderr
    assert not (tmp_path / "run/fleet.json").exists()
    assert_nothing_left(tmp_path / "run")


def test_serial_and_concurrent_runs_give_identical_outputs_and_logs(tmp_path):
    text = """
[suite]
name = "same"
run_dir = "RUN"
[[steps]]
id = "part/{i}"
array = "1-4"
call = "fleet_steps:produce"
args = { n = "{i}0", seconds = 0.5 }
outputs = ["parts/{i}.json"]
[[steps]]
id = "sum"
call = "fleet_steps:combine"
inputs = ["parts/1.json", "parts/2.json", "parts/3.json", "parts/4.json"]
outputs = ["total.json"]
[[steps]]
id = "cmd"
command = "echo command-step; cat parts/1.json"
workdir = "."
deps = ["part/1"]
"""
    for mode in ("serial", "concurrent"):
        suite = write_suite(tmp_path / f"{mode}.toml", text.replace("RUN", mode))
        extra = ["--serial"] if mode == "serial" else ["--nodes", "2"]
        assert fleet("run", str(suite), *extra, cwd=tmp_path).returncode == 0

    def body(p: Path) -> bytes:
        # A log's attempt headers carry the time and the fleet: all else is the same.
        data = p.read_bytes()
        if p.name != "log":
            return data
        return b"".join(l for l in data.splitlines(keepends=True) if not l.startswith(b"==== fleet: "))

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): body(p) for p in sorted(root.rglob("*"))
                if p.is_file() and ".fleet" not in p.parts and p.parent.name != "agents"
                and p.name not in ("events.jsonl", "coordinator.log")}

    serial, concurrent = files(tmp_path / "serial"), files(tmp_path / "concurrent")
    assert serial.keys() == concurrent.keys()
    assert serial == concurrent
    assert "steps/sum/log" in serial and b"total" in serial["steps/sum/log"]
    # Serial really was one at a time; concurrent really overlapped.
    def spans(run):
        return sorted((e.work_start, e.ended_at) for e in records(tmp_path / run) if isinstance(e, E.Exit))
    s, c = spans("serial"), spans("concurrent")
    assert all(b[0] >= a[1] for a, b in zip(s, s[1:]))
    assert any(b[0] < a[1] for a, b in zip(c, c[1:])), c  # (the parts take 0.5 s, on two one-core nodes)


def _start_fleet(tmp_path: Path, nodes: int = 2) -> Path:
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", str(nodes), cwd=tmp_path, check=True, timeout=60)
    return run_dir


def _long_suite(tmp_path: Path, tag: str) -> Path:
    return write_suite(tmp_path / "long.toml", f"""
[suite]
name = "long"
[[steps]]
id = "py"
call = "fleet_steps:sleep_forever"
[[steps]]
id = "cmd"
command = "sleep 300 # {tag}"
""")


def _wait_running(run_dir: Path, n: int) -> None:
    wait_for(lambda: len([e for e in records(run_dir) if isinstance(e, E.Started)]) >= n, 30, f"{n} started steps")


def test_fleet_down_stops_the_coordinator_agents_and_running_steps(tmp_path):
    run_dir = _start_fleet(tmp_path)
    tag = f"tag-{os.getpid()}-down"
    runner = spawn("run", str(_long_suite(tmp_path, tag)), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        _wait_running(run_dir, 2)
        r = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0
        runner.wait(timeout=30)
        assert runner.returncode == 1  # its steps did not succeed
        assert not (run_dir / "fleet.json").exists()
        assert_nothing_left(run_dir, tag)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_fleet_run_with_an_embedded_fleet_leaves_nothing_behind(tmp_path, sig):
    tag = f"tag-{os.getpid()}-{sig.name}"
    suite = _long_suite(tmp_path, tag)
    runner = spawn("run", str(suite), "--nodes", "2", cwd=tmp_path)
    run_dir = tmp_path / "runs" / "long"
    try:
        _wait_running(run_dir, 2)
        os.kill(runner.pid, sig)
        runner.wait(timeout=30)
        assert runner.returncode == 130
        assert_nothing_left(run_dir, tag)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_coordinator_that_is_terminated_or_killed_takes_every_agent_and_step_with_it(tmp_path, sig):
    run_dir = _start_fleet(tmp_path)
    tag = f"tag-{os.getpid()}-coord-{sig.name}"
    runner = spawn("run", str(_long_suite(tmp_path, tag)), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        _wait_running(run_dir, 2)
        coord = next(e.pid for e in records(run_dir) if isinstance(e, E.FleetStarting))
        os.kill(coord, sig)
        assert_nothing_left(run_dir, tag, timeout=20)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=30)
