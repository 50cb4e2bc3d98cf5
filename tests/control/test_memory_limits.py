"""A step's `memory` is a limit, through the real CLI: a step that allocates past it ends
out_of_memory naming its peak, under each mechanism this machine has (a cgroup v1
memory controller here, where a child cgroup may be made; the agent's RSS watchdog
everywhere, forced with FLEET_MEMLIMIT=watchdog), while a neighbour on the same node
keeps running and succeeds. The step's cgroups are gone afterwards, nothing is left
running, and `fleet status` and the report show each node's memory and its mechanism."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, cgroup1_unwritable, fleet, records, write_suite

from fleet.wire import events as E

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


MECHANISMS = [
    pytest.param("cgroup1", "cgroup v1", id="cgroup1",
                 marks=pytest.mark.skipif(cgroup1_unwritable() is not None,
                                          reason=f"no writable cgroup v1 memory controller: {cgroup1_unwritable()}")),
    pytest.param("watchdog", "RSS watchdog", id="watchdog"),
]
HOGS = {
    "command": 'command = ["python3", "-c", "import time; b = b\'\\\\x01\' * (256 << 20); time.sleep(60)"]',
    "call": 'call = "memory_steps:hog"\nargs = {mib = 256}',
}


def exit_of(run_dir: Path, step: str) -> E.Exit:
    [e] = [e for e in records(run_dir) if isinstance(e, E.Exit) and e.step == step]
    return e


@pytest.mark.parametrize("kind", ["command", "call"])
@pytest.mark.parametrize("mechanism,described", MECHANISMS)
def test_a_step_past_its_memory_ends_out_of_memory_naming_its_peak_while_its_neighbour_runs_on(
        tmp_path, monkeypatch, mechanism, described, kind):
    monkeypatch.setenv("FLEET_MEMLIMIT", mechanism)
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "memory"
run_dir = "run"
[[steps]]
id = "hog"
{HOGS[kind]}
memory = "64MB"
retries = 2
[[steps]]
id = "neighbour"
command = "sleep 3 && echo fine"
memory = "64MB"
""")
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        status = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    hog, neighbour = exit_of(run_dir, "hog"), exit_of(run_dir, "neighbour")  # one attempt: never retried
    assert hog.outcome == "out_of_memory", hog
    assert hog.reason.startswith("out of memory: used ") and "of its memory 61MiB" in hog.reason, hog.reason
    assert hog.memory_peak and hog.memory_peak >= 60 << 20, hog
    assert f"{described}" in hog.reason or mechanism == "watchdog" and "watchdog" in hog.reason, hog.reason
    assert hog.neighbours is None  # its own declaration, not a neighbour's doing
    assert neighbour.outcome == "succeeded" and neighbour.work_start < hog.ended_at < neighbour.ended_at
    [joined] = [e for e in records(run_dir) if isinstance(e, E.NodeJoined)]
    assert joined.memlimit.startswith(described), joined
    assert "out_of_memory" in r.stdout, r.stdout
    assert "; limits: " + described in status.stdout and ", used " in status.stdout, status.stdout
    report = fleet("report", str(run_dir), cwd=tmp_path, timeout=60)
    assert "out_of_memory" in report.stdout and "limits: " + described in report.stdout, report.stdout
    assert " in use at most" in report.stdout, report.stdout
    assert_nothing_left(run_dir)
    if mechanism == "cgroup1":  # the agent's cgroup, and its steps' in it, are removed
        root = joined.memlimit.partition("(")[2].rstrip(")")
        assert root.endswith(f"fleet.{joined.pid}") and not os.path.exists(root), root


def test_only_a_declared_memory_is_a_limit_not_the_share_a_step_without_one_is_given(tmp_path):
    from fleet.control import launching
    from fleet.core.decisions import Start
    from fleet.core.resources import Slot
    from fleet.core.suite import parse_suite
    from fleet.site.profiles import Profile

    steps = [{"id": "declared", "command": "true", "memory": "1GiB"}, {"id": "share", "command": "true"},
             {"id": "ranks", "command": ["./a.out"], "mpi": True, "ranks": 1, "memory": "1GiB"}]
    suite = parse_suite({"steps": steps}, tmp_path / "suite.toml")
    profile = Profile(name="local", path="")
    for spec, limit in zip(suite.steps, (1 << 30, 0, 0)):
        msg = launching.launch(profile, spec, Start(spec.id, 1, (Slot("n1", (0,), (), 1 << 30),)), tmp_path)
        assert (msg.memory, msg.memory_limit) == (1 << 30, limit), spec.id


def test_the_watchdog_does_not_count_against_a_forked_step_what_it_shares_with_its_zygote(tmp_path, monkeypatch):
    """A forked step's RSS includes the preloaded modules it shares with its zygote (tens
    of MiB here); only its own (private) memory counts against its declaration."""
    monkeypatch.setenv("FLEET_MEMLIMIT", "watchdog")
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "shared"
run_dir = "run"
preload = ["numpy", "scipy.linalg"]
[[steps]]
id = "small"
call = "memory_steps:hog"
args = {mib = 1, hold = 2.0}
memory = "20MB"
""")
    r = fleet("run", str(suite), "--nodes", "1", *HB, cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "run"
    assert r.returncode == 0, r.stdout + r.stderr
    small = exit_of(run_dir, "small")
    assert small.outcome == "succeeded" and small.maxrss_kb << 10 > 20_000_000, small  # its RSS passed 20 MB
    assert small.memory_peak and small.memory_peak < 20_000_000, small  # its own memory did not
    assert_nothing_left(run_dir)
