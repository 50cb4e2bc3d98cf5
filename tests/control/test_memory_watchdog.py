"""The agent's RSS watchdog (FLEET_MEMLIMIT=watchdog), through the real CLI: it holds
a step to its `memory` whatever the step's processes do with process groups and
sessions, counts the memory a step's processes share among themselves once, and
gives every limited step's exit a `memory_peak`, a step shorter than a sample too."""

from __future__ import annotations

import time
from pathlib import Path

from fleetharness import assert_nothing_left, fleet, records, tagged, write_suite

from fleet.wire import events as E

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
MIB = 1 << 20
HOG = "python3 -c 'import time; b = bytes([1]) * (300 << 20); time.sleep({hold})'"


def exits(run_dir: Path) -> dict[str, E.Exit]:
    return {e.step: e for e in records(run_dir) if isinstance(e, E.Exit)}


def gone(tag: str, within: float = 10.0) -> list[str]:
    """The processes carrying ``tag`` still there after ``within`` seconds (none: [] at once)."""
    deadline = time.monotonic() + within
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_the_watchdog_counts_and_kills_every_process_group_of_a_steps_session_and_the_sessions_it_made(
        tmp_path, monkeypatch):
    """`timeout` runs its command in a group of its own, a shell's `&` under `timeout`
    leaves a group behind, and a library's subprocess.run(start_new_session=True) makes
    a session of its own: each hog is seen, its step ends out_of_memory, and what it left
    in those groups and sessions is gone when the step ends, not only with the fleet."""
    monkeypatch.setenv("FLEET_MEMLIMIT", "watchdog")
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "sessions"
run_dir = "run"
[[steps]]
id = "under_timeout"
command = "timeout 60 {HOG.format(hold=58.125)}"
memory = "100MiB"
[[steps]]
id = "left_a_group"
command = "timeout 60 sleep 57.375 & {HOG.format(hold=56.625)}; wait"
memory = "100MiB"
[[steps]]
id = "new_session"
call = "memory_steps:hog_in_new_session"
args = {{mib = 300, hold = 55.875}}
memory = "100MiB"
""")
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=180)
        left = {tag: gone(tag) for tag in ("58.125", "57.375", "56.625", "55.875")}  # the fleet still up
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    got = exits(run_dir)
    for step in ("under_timeout", "left_a_group", "new_session"):
        e = got[step]
        assert e.outcome == "out_of_memory", e
        assert e.memory_peak and e.memory_peak > 100 * MIB and "watchdog" in e.reason, e
    assert left == dict.fromkeys(left, []), left
    assert_nothing_left(run_dir)


def test_the_watchdog_counts_once_the_memory_a_steps_processes_share_among_themselves(tmp_path, monkeypatch):
    """A call step that touches 90 MiB and then forks 3 children that each touch 30 MiB
    of their own uses 180 MiB (as a cgroup counts it), past its 150 MiB, though each
    child's private memory leaves out the 90 MiB they share with their parent; the
    modules they share with the zygote still do not count (the preload)."""
    monkeypatch.setenv("FLEET_MEMLIMIT", "watchdog")
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "shared"
run_dir = "run"
preload = ["numpy"]
[[steps]]
id = "forks"
call = "memory_steps:fork_sharing"
args = {mib = 90, children = 3, child_mib = 30, hold = 20.0}
memory = "150MiB"
[[steps]]
id = "within"
call = "memory_steps:fork_sharing"
args = {mib = 60, children = 2, child_mib = 20, hold = 2.0}
memory = "150MiB"
""")
    r = fleet("run", str(suite), "--nodes", "1", *HB, cwd=tmp_path, timeout=180)
    run_dir = tmp_path / "run"
    got = exits(run_dir)
    assert got["forks"].outcome == "out_of_memory", r.stdout + r.stderr
    assert got["forks"].memory_peak > 150 * MIB, got["forks"]
    within = got["within"]  # 100 MiB of its own; its RSS, with the preload's, counted 3 times, passed 150
    assert within.outcome == "succeeded" and within.memory_peak and within.memory_peak < 150 * MIB, within
    assert_nothing_left(run_dir)


def test_every_limited_step_has_a_memory_peak_under_the_watchdog_one_shorter_than_a_sample_too(
        tmp_path, monkeypatch):
    """Steps that end before the watchdog's first sample still carry a peak: the look
    the agent takes at each step when it hears it started, or its exit's rusage."""
    monkeypatch.setenv("FLEET_MEMLIMIT", "watchdog")
    steps = "".join(f"""
[[steps]]
id = "call{i}"
call = "memory_steps:brief"
args = {{seconds = 0.0, mib = 8}}
memory = "30MiB"
[[steps]]
id = "command{i}"
command = "sleep 0.2"
memory = "30MiB"
""" for i in range(3))
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "short"
run_dir = "run"
preload = ["numpy"]
{steps}""")
    r = fleet("run", str(suite), "--nodes", "1", *HB, cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "run"
    assert r.returncode == 0, r.stdout + r.stderr
    got = exits(run_dir)
    assert len(got) == 6, got
    for e in got.values():
        assert e.outcome == "succeeded" and e.memory_peak, e
    assert_nothing_left(run_dir)


def test_a_step_past_its_memory_between_two_samples_is_told_so_with_its_real_peak_and_the_report_notes_it(
        tmp_path, monkeypatch):
    """Steps that hold 150 MiB a second (sampled: within their 200 MiB), touch 80 MiB
    more and end at once: the watchdog's samples, every 0.25 s, mostly miss the spike.
    One a sample caught ends out_of_memory; every other keeps its success (it ended by
    itself, its work done), with its exit's rusage as its peak (past 200 MiB) and a
    reason that says so, and the report names it. Before 2026-12-07 such a step said
    `succeeded` with its largest sample, ~150 MiB, as its peak: "within its memory"."""
    monkeypatch.setenv("FLEET_MEMLIMIT", "watchdog")
    spike = "import time; a = b'a' * (150 << 20); time.sleep(1); b = b'b' * (80 << 20)"
    steps = "".join(f"""
[[steps]]
id = "command{i}"
command = ["python3", "-c", "{spike}"]
memory = "200MiB"
[[steps]]
id = "call{i}"
call = "memory_steps:spike_when"
args = {{mib = 150, go = "", more = 80}}
memory = "200MiB"
""" for i in range(3))
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "spikes"
run_dir = "run"
{steps}""")
    r = fleet("run", str(suite), "--nodes", "1", *HB, cwd=tmp_path, timeout=180)
    run_dir = tmp_path / "run"
    got = exits(run_dir)
    assert len(got) == 6, r.stdout + r.stderr
    unseen = sorted(step for step, e in got.items() if e.outcome == "succeeded")
    assert unseen, got  # (a sample catches a spike of a few ms now and then: not all six)
    for step, e in got.items():
        if e.outcome == "out_of_memory":
            assert e.memory_peak > 200 * MIB and "watchdog" in e.reason, e
            continue
        assert e.outcome == "succeeded" and e.memory_peak >= 230 * MIB, e
        assert "of its memory 200MiB: passed it between two of the watchdog's samples" in e.reason, e
        assert f"succeeded  {step}: used " in r.stdout, r.stdout  # fleet run's line says it too
    report = fleet("report", str(run_dir), cwd=tmp_path, timeout=60)
    assert (f"note: {len(unseen)} attempt(s) used more than their memory and were not stopped "
            "(the watchdog's samples missed it") in report.stdout, report.stdout
    assert all(f"{step} (attempt 1)" in report.stdout for step in unseen), report.stdout
    assert_nothing_left(run_dir)
