"""A fleet another fleet found gone on a shared run directory (fleet.control.foundgone,
fleet.control.gonefence): real `fleet run` processes on one run directory, a fleet
suspended for real (SIGSTOP of its coordinator and every process below it, as a
suspended job is) or killed (SIGKILL of its coordinator).

Every step writes its runs to a file, one line per event, appended (O_APPEND: the
lines are in the order they happened): `start STEP FLEET`, `end STEP FLEET`, and, for a
step that traps SIGTERM, `term` and `stopped`. The evidence is that file and the run
directory's records, in order and counts, never in seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from fleetharness import assert_nothing_left, env, finish, wait_for, write_suite

HB = ["--heartbeat", "0.5", "--heartbeat-timeout", "2"]  # a lost fleet's steps stop 4 s after it (gonefence)
STEP = """#!/bin/sh
# One step's runs, appended to $RUNS: start, end; trapped (TRAP set), SIGTERM takes $TRAP s.
echo "start $FLEET_STEP $FLEET_ID" >> "$RUNS"
if [ -n "$TRAP" ]; then
  trap 'echo "term $FLEET_STEP $FLEET_ID" >> "$RUNS"; sleep $TRAP; echo "stopped $FLEET_STEP $FLEET_ID" >> "$RUNS"; exit 1' TERM
fi
sleep "$DUR" & wait $!
echo "end $FLEET_STEP $FLEET_ID" >> "$RUNS"
"""


@pytest.fixture
def bg(started):
    """`fleet` commands in the background, each in its own process group (conftest's `started`)."""
    return lambda *args: started(*args)


def suite(tmp_path: Path, n: int, dur: float, trap: float | None = None) -> tuple[Path, Path, Path]:
    """A suite of n steps running STEP (each `dur` s): (its file, its run directory, the runs file)."""
    step = tmp_path / "step.sh"
    step.write_text(STEP)
    step.chmod(0o755)
    runs = tmp_path / "runs"
    trapped = f', TRAP = "{trap}"' if trap is not None else ""
    s = write_suite(tmp_path / "s.toml", f"""[suite]
name = "gone"
run_dir = "run"
[[steps]]
id = "t/{{i}}"
array = "0-{n - 1}"
command = ["{step}"]
env = {{ RUNS = "{runs}", DUR = "{dur}"{trapped} }}
""")
    return s, tmp_path / "run", runs


def lines(runs: Path) -> list[list[str]]:
    return [ln.split() for ln in runs.read_text().splitlines()] if runs.exists() else []


def lease(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / ".fleet" / "lease").read_text())
    except (OSError, ValueError):
        return {}


def running_in(runs: Path, fleet: str) -> set[str]:
    """Steps the fleet started whose run there has not ended (by the runs file)."""
    out: set[str] = set()
    for ln in lines(runs):
        if ln[2] == fleet and ln[0] == "start":
            out.add(ln[1])
        elif ln[2] == fleet and ln[0] in ("end", "stopped"):
            out.discard(ln[1])
    return out


def handed(run_dir: Path, fleet: str) -> set[str]:
    """Steps the fleet's journal says it started or handed to its node ahead (to start
    there once a running one ends: fleet.core.window), not ended."""
    from fleet.wire import records
    return {s for j in records.read_journals(run_dir, only=[f"{fleet}.jsonl"]).each for s in j.running}


def tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def freeze(pid: int) -> list[psutil.Process]:
    """SIGSTOP the process and everything below it (as a suspended job): its
    coordinator first, so nothing new starts; then what may have started meanwhile."""
    frozen: dict[int, psutil.Process] = {}
    for _ in range(2):
        for p in tree(pid):
            if p.pid not in frozen:
                try:
                    p.send_signal(signal.SIGSTOP)
                    frozen[p.pid] = p
                except psutil.Error:
                    pass
    return list(frozen.values())


def thaw(frozen: list[psutil.Process]) -> None:
    for p in frozen:
        try:
            p.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass


def taken(runs: Path, gone: str, steps: set[str]) -> bool:
    """Another fleet started one of the steps the gone fleet had started."""
    return any(ln[0] == "start" and ln[2] not in (gone, "-") and ln[1] in steps for ln in lines(runs))


def logged(run_dir: Path, text: str) -> bool:
    try:
        return text in (run_dir / "coordinator.log").read_text()
    except FileNotFoundError:
        return False


def audit(run_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleet", "audit", str(run_dir)], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=120)


def assert_recorded_only_successes(run_dir: Path, n: int, cwd: Path) -> None:
    """Every step's marker on disk, no final.json (the fleet found gone wrote none: before
    2026-12-07 it wrote `terminated`, `lost` and `unrunnable` ones and removed the other
    fleet's markers with them), and the audit agrees."""
    steps = [f"t/{i}" for i in range(n)]
    finals = {s: json.loads(p.read_text()) for s in steps if (p := run_dir / "steps" / s / ".fleet" / "final.json")
              .exists()}
    assert not finals, finals
    assert all((run_dir / "steps" / s / ".fleet" / "done.json").exists() for s in steps)
    a = audit(run_dir, cwd)
    assert a.returncode == 0 and f"{n} succeeded" in a.stdout, a.stdout + a.stderr


def assert_no_line_after_the_seal(run_dir: Path, fleet: str) -> None:
    """The gone fleet's journal: nothing written after the fleet that took its steps sealed it."""
    text = (run_dir / ".fleet" / "journal" / f"{fleet}.jsonl").read_text().splitlines()
    seals = [i for i, ln in enumerate(text) if '"sealed"' in ln]
    assert seals, text
    assert not [ln for ln in text[seals[0] + 1:] if ln.strip()], text[seals[0]:]


def test_a_sharing_fleet_suspended_until_another_found_it_gone_stops_when_resumed_and_records_nothing(
        tmp_path, bg):
    # The audit's case: two fleets share a run directory, the lease holder's whole job is
    # suspended until the other finds it gone and runs its steps; resumed, it went on and
    # wrote `terminated`/`lost` records over the other fleet's successes (and removed
    # their markers).
    s, run_dir, runs = suite(tmp_path, 24, 1.0)
    a = bg("run", str(s), "--nodes", "1", "--stale-after", "5", *HB)
    wait_for(lambda: lease(run_dir).get("pid"), 60, "fleet A to take the lease")
    fa, pa = lease(run_dir)["fleet"], lease(run_dir)["pid"]
    b = bg("run", str(s), "--nodes", "1", "--stale-after", "5", *HB)
    wait_for(lambda: lease(run_dir).get("shared") and running_in(runs, fa), 60, "the run directory shared, A running")
    frozen = freeze(pa)
    try:
        ran, ahead = running_in(runs, fa), handed(run_dir, fa)
        wait_for(lambda: taken(runs, fa, ran), 90, "fleet B to run A's steps")
        fb = next(ln[2] for ln in lines(runs) if ln[2] != fa)
    finally:
        thaw(frozen)
    with open(runs, "a") as f:
        f.write("resumed - -\n")
    ra, rb = finish(a, 120), finish(b, 180)
    assert rb[0] == 0, rb
    assert ra[0] == 1 and f"this fleet was found gone by fleet {fb}" in ra[2], ra
    assert f"[{fa}] fleet.control.coordinator ERROR this fleet was found gone by fleet {fb}" in \
        (run_dir / "coordinator.log").read_text()
    # Resumed, it started nothing more: what its node held ahead may start there as the
    # node resumes (before anything can tell it), nothing else.
    after = lines(runs)[[ln[0] for ln in lines(runs)].index("resumed"):]
    assert {ln[1] for ln in after if ln[0] == "start" and ln[2] == fa} <= ahead, (after, ahead)
    assert_recorded_only_successes(run_dir, 24, tmp_path)
    assert_no_line_after_the_seal(run_dir, fa)
    assert_nothing_left(run_dir)


def test_a_lone_lease_holder_suspended_while_another_fleet_takes_its_lease_over_stops_when_resumed(tmp_path, bg):
    # Before 2026-12-07 the resumed holder went on as the lone lease holder, starting
    # steps without claims while the other fleet ran the same steps.
    s, run_dir, runs = suite(tmp_path, 16, 1.0)
    a = bg("run", str(s), "--nodes", "1", "--stale-after", "5", *HB)
    wait_for(lambda: lease(run_dir).get("pid") and running_in(runs, lease(run_dir)["fleet"]), 60, "fleet A running")
    fa, pa = lease(run_dir)["fleet"], lease(run_dir)["pid"]
    frozen = freeze(pa)
    try:
        ran, ahead = running_in(runs, fa), handed(run_dir, fa)
        b = bg("run", str(s), "--nodes", "1", "--stale-after", "5", *HB)
        wait_for(lambda: lease(run_dir).get("fleet") not in (None, fa), 90, "fleet B to take the lease over")
        fb = lease(run_dir)["fleet"]
        wait_for(lambda: taken(runs, fa, ran), 90, "fleet B to run A's steps")
    finally:
        thaw(frozen)
    with open(runs, "a") as f:
        f.write("resumed - -\n")
    ra, rb = finish(a, 120), finish(b, 180)
    assert rb[0] == 0, rb
    assert ra[0] == 1 and f"this fleet was found gone by fleet {fb}" in ra[2], ra  # (it took the lease over)
    after = lines(runs)[[ln[0] for ln in lines(runs)].index("resumed"):]
    assert {ln[1] for ln in after if ln[0] == "start" and ln[2] == fa} <= ahead, (after, ahead)
    # Each step started once, but for those the frozen fleet had started or handed to its
    # node (they ran on, or started, as the node resumed).
    starts = [ln[1] for ln in lines(runs) if ln[0] == "start"]
    assert {x for x in starts if starts.count(x) > 1} <= ahead, starts
    assert_recorded_only_successes(run_dir, 16, tmp_path)
    assert_nothing_left(run_dir)


def _starts_after_its_stop(runs: Path, gone: str, steps: set[str]) -> list[str]:
    """The gone fleet's steps another fleet started before the gone fleet's run of them
    ended (its `stopped` or `end` line): none may be."""
    order = lines(runs)
    bad = []
    for step in steps:
        ended = next((i for i, ln in enumerate(order) if ln[1] == step and ln[2] == gone
                      and ln[0] in ("stopped", "end")), len(order))
        bad += [f"{step} at line {i}, its run in {gone} ended at line {ended}" for i, ln in enumerate(order)
                if ln[0] == "start" and ln[1] == step and ln[2] != gone and i < ended]
    return bad


def agents_of(pid: int) -> list[psutil.Process]:
    return [p for p in tree(pid) if "fleet.node.agent" in " ".join(p.cmdline())]


def kill_with_its_agents_deaf(run_dir: Path, runs: Path, pid: int, fleet: str, ran: set[str]) -> None:
    """SIGKILL the coordinator `pid` while its agents hear nothing (SIGSTOP: as an agent on
    another host hears of its coordinator's death only at its fence), its steps running
    on; let them hear it (SIGCONT) once another fleet either started one of those steps
    (before 2026-12-07, at once) or said it waits for them (fleet.control.gonefence).
    Then the agents stop the steps, and each one's `stopped` line says when."""
    deaf = agents_of(pid)
    for p in deaf:
        p.send_signal(signal.SIGSTOP)
    try:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: taken(runs, fleet, ran) or logged(run_dir, f"fleet {fleet} is gone: the "), 90,
                 "another fleet to find it gone")
    finally:
        thaw(deaf)


def test_a_killed_fleets_running_steps_start_again_only_once_its_own_runs_of_them_have_stopped(tmp_path, bg):
    # The audit's case: steps take 1.5 s to stop on SIGTERM; the other fleet started them
    # again within a second of the kill, in the same work directory. A lost node's steps
    # wait for its fence (fleet.core.fencing); a gone fleet's now too.
    s, run_dir, runs = suite(tmp_path, 4, 30.0, trap=1.5)
    a = bg("run", str(s), "--nodes", "1")
    wait_for(lambda: lease(run_dir).get("pid"), 60, "fleet A to take the lease")
    fa, pa = lease(run_dir)["fleet"], lease(run_dir)["pid"]
    b = bg("run", str(s), "--nodes", "2")  # (room for A's steps at once)
    wait_for(lambda: lease(run_dir).get("shared") and running_in(runs, fa), 60, "A running, the directory shared")
    ran = running_in(runs, fa)
    kill_with_its_agents_deaf(run_dir, runs, pa, fa, ran)
    wait_for(lambda: taken(runs, fa, ran), 120, "fleet B to run A's steps")
    os.killpg(b.pid, signal.SIGTERM)  # (its steps take 30 s: enough is seen)
    finish(a, 60), finish(b, 120)
    assert all(any(ln[:3] == ["stopped", x, fa] for ln in lines(runs)) for x in ran), lines(runs)
    assert not _starts_after_its_stop(runs, fa, ran), lines(runs)
    assert_nothing_left(run_dir)


def test_a_dead_lease_holders_running_steps_wait_for_its_runs_to_stop_in_the_fleet_that_takes_its_lease_over(
        tmp_path, bg):
    # The same at a take-over: the holder, alone, killed while another fleet waits for its
    # lease (its coordinator held up first, so that it does not let that one in); the
    # waiting fleet takes the lease at once (its pid is gone) and adopts what it ran.
    s, run_dir, runs = suite(tmp_path, 4, 30.0, trap=1.5)
    a = bg("run", str(s), "--nodes", "1", "--heartbeat-timeout", "30")  # (its agents wait long for it)
    wait_for(lambda: lease(run_dir).get("pid") and running_in(runs, lease(run_dir)["fleet"]), 60, "fleet A running")
    fa, pa = lease(run_dir)["fleet"], lease(run_dir)["pid"]
    ran = running_in(runs, fa)
    os.kill(pa, signal.SIGSTOP)
    try:
        b = bg("run", str(s), "--nodes", "2")
        wait_for(lambda: list((run_dir / ".fleet" / "fleets").glob("*.json")), 60, "fleet B to wait for the lease")
        kill_with_its_agents_deaf(run_dir, runs, pa, fa, ran)
    finally:
        try:
            os.kill(pa, signal.SIGCONT)  # (killed by now, unless the test failed before)
        except ProcessLookupError:
            pass
    wait_for(lambda: lease(run_dir).get("fleet") not in (None, fa), 60, "fleet B to take the lease over")
    wait_for(lambda: taken(runs, fa, ran), 120, "fleet B to run A's steps")
    os.killpg(b.pid, signal.SIGTERM)
    finish(a, 60), finish(b, 120)
    assert all(any(ln[:3] == ["stopped", x, fa] for ln in lines(runs)) for x in ran), lines(runs)
    assert not _starts_after_its_stop(runs, fa, ran), lines(runs)
    assert_nothing_left(run_dir)
