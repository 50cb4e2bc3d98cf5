"""Two fleets on one run directory with different definitions of the same steps: each
runs every step with its own definition, one fleet at a time, and both end (real `fleet
run` processes on one run directory, each bounded by a timeout). Before 2026-12-07 each
fleet claimed some of the steps, then waited for the other's for ever: neither ended."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, events, finish, two_fleets_gated, wait_for, write_suite

pytestmark = pytest.mark.xdist_group("shared_definitions")

STEPS = 24


def suite(tmp_path: Path, name: str, word: str) -> Path:
    """Steps that wait for the file tmp_path/go, then take a second (`word`: the definition)."""
    return write_suite(tmp_path / f"{name}.toml", f"""
[suite]
name = "{name}"
run_dir = "run"

[[steps]]
id = "s{{i}}"
array = "1-{STEPS}"
command = "until test -e {tmp_path / 'go'}; do sleep 0.05; done; sleep 1; echo {word}"
""")


def runs(run_dir: Path) -> dict[str, list[tuple[str, float, float]]]:
    """step -> [(fleet, began, ended)] of every attempt that ran, from the events."""
    began: dict[tuple, float] = {}
    out: dict[str, list] = defaultdict(list)
    for e in events(run_dir):
        key = (e.get("fleet"), e.get("step"), e.get("attempt"))
        if e["kind"] == "started":
            began[key] = e["at"]
        elif e["kind"] == "exit" and key in began:
            out[e["step"]].append((e["fleet"], began.pop(key), e["ended_at"]))
    assert not began, f"started with no exit: {began}"
    return out


def said_ended(run_dir: Path, step: str) -> bool:
    """Has a batch of the claims log said the step ended (fleet.control.claimlog)?"""
    for path in (run_dir / ".fleet" / "claims").glob("*.json"):
        try:
            if step in (json.loads(path.read_text()).get("ended") or ()):
                return True
        except (OSError, ValueError):
            continue
    return False


def test_two_fleets_of_different_definitions_each_run_every_step_in_turn_and_both_end(tmp_path, started):
    a, b = suite(tmp_path, "a", "one"), suite(tmp_path, "b", "two")
    run_dir = tmp_path / "run"
    # A's steps wait until B has started one too: both fleets hold steps the other must
    # take, however late B comes up (A could otherwise run and hold them all first).
    pa, pb = two_fleets_gated(run_dir, tmp_path / "go", lambda: started("run", str(a), "--nodes", "1"),
                              lambda: started("run", str(b), "--nodes", "1"))
    ra, rb = finish(pa, 150), finish(pb, 150)
    assert ra[0] == 0 and rb[0] == 0, ra + rb
    ran = runs(run_dir)
    assert sorted(ran) == sorted(f"s{i}" for i in range(1, STEPS + 1)), ran
    fleets = {f for attempts in ran.values() for f, _, _ in attempts}
    assert len(fleets) == 2, fleets
    for step, attempts in ran.items():
        # Each fleet ran it once, with its own definition, never both at once.
        assert sorted(f for f, _, _ in attempts) == sorted(fleets), (step, attempts)
        (_, b0, e0), (_, b1, e1) = sorted(attempts, key=lambda r: r[1])
        assert e0 <= b1, (step, attempts)
    # Each fleet took steps the other held and ran first (what waited for ever before).
    taken = [e for e in events(run_dir) if e["kind"] == "reclaim"]
    assert {e["fleet"] for e in taken} == fleets, taken
    for e in taken:
        # Taken as run under another definition, or (the other fleet having run it and
        # ended first) as its holder gone: nothing else frees a step a live fleet holds.
        other = (fleets - {e["fleet"]}).pop()
        assert e["reason"] in (f"fleet {other} ran another definition of it: run here with this one",
                               f"its holder {other} is gone"), e
    for i in range(1, STEPS + 1):  # the marker is the definition of the fleet that ran it last
        marker = json.loads((run_dir / "steps" / f"s{i}" / ".fleet" / "done.json").read_text())
        last = max(ran[f"s{i}"], key=lambda r: r[1])[0]
        assert marker["fleet"] == last, (i, marker, ran[f"s{i}"])
    assert_nothing_left(run_dir)


def test_a_long_lived_fleet_on_a_shared_run_directory_runs_its_ended_step_again_when_forced(tmp_path, started):
    # A step whose end a fleet said in the claims log may be taken by another fleet, so
    # the fleet names it again before running it again itself (`fleet run --force` on a
    # `fleet up`): it runs again, here, once, and is not taken for done.
    from fleetharness import exits, fleet
    from test_job_fleets import job, waiting
    run_dir, flag = tmp_path / "run", tmp_path / "flag"
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60,
          environ=job(391))
    try:
        beside = started("run", str(waiting(tmp_path / "b.toml", "b", 1, flag)), "--run-dir", str(run_dir),
                         extra_env=job(392))  # another job's fleet on the run directory: it is shared from now on
        wait_for(lambda: any(e["kind"] == "started" and e["step"] == "b/1" for e in events(run_dir)), 60,
                 "the other job's fleet to start its step")
        mine = write_suite(tmp_path / "x.toml", '[suite]\nname = "x"\n[[steps]]\nid = "x"\ncommand = "true"\n')
        first = fleet("run", str(mine), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90, environ=job(391))
        wait_for(lambda: said_ended(run_dir, "x"), 30, "the fleet to say in the claims log that x ended")
        again = fleet("run", str(mine), "--run-dir", str(run_dir), "--force", cwd=tmp_path, timeout=90,
                      environ=job(391))
        flag.touch()
        rb = finish(beside, 90)
    finally:
        down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert first.returncode == 0 and again.returncode == 0 and rb[0] == 0, (first.stdout, again.stdout, rb)
    assert "succeeded  x" in again.stdout, again.stdout
    ran = exits(run_dir, "x")
    assert [e["returncode"] for e in ran] == [0, 0] and len({e["fleet"] for e in ran}) == 1, ran
    # It was named again in the claims log by its fleet, after that fleet said it ended.
    batches = [json.loads(f.read_text()) for f in sorted((run_dir / ".fleet" / "claims").glob("[0-9]*.json"))]
    ended = next(i for i, b in enumerate(batches) if "x" in (b.get("ended") or ()))
    assert any("x" in (b.get("steps") or ()) and b["fleet"] == batches[ended]["fleet"]
               for b in batches[ended + 1:]), batches
    assert down.returncode == 0, down.stderr
    assert_nothing_left(run_dir)


def logged(tmp_path: Path, name: str, word: str, seconds: float, log: Path, first_fails: Path | None = None) -> Path:
    """A suite of one step `x` that writes a line to `log` as it starts ("S word FLEET") and
    ends; with `first_fails`, its first run (the file not there yet) fails."""
    fail = f"test -e {first_fails} || {{ touch {first_fails}; exit 1; }}; " if first_fails else ""
    return write_suite(tmp_path / f"{name}.toml", f"""
[suite]
name = "{name}"
[[steps]]
id = "x"
command = "echo S {word} $FLEET_ID >> {log}; {fail}sleep {seconds}; echo E {word} $FLEET_ID >> {log}"
""")


@pytest.fixture
def shared_up(tmp_path, started):
    """A `fleet up` of Slurm job 391 on tmp_path/run (env: `environ` of the call), made
    shared by job 392's `fleet run` of a step waiting for tmp_path/flag; yields the run
    directory; then the flag is made, that run ends and the fleet goes down."""
    from fleetharness import fleet
    from test_job_fleets import job, waiting
    run_dir, flag, beside = tmp_path / "run", tmp_path / "flag", []

    def up(**environ):
        fleet("up", "--local", "--nodes", "1", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60,
              environ={**job(391), **environ})
        beside.append(started("run", str(waiting(tmp_path / "b.toml", "b", 1, flag)), "--run-dir", str(run_dir),
                              extra_env=job(392)))
        wait_for(lambda: any(e["kind"] == "started" and e["step"] == "b/1" for e in events(run_dir)), 60,
                 "the other job's fleet to start its step")
        return run_dir

    yield up
    flag.touch()
    for p in beside:
        finish(p, 90)
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(391))
    assert_nothing_left(run_dir)


SLOW_MARKERS = {"FLEET_TEST_MARKER_SLEEP_MS": "3000"}  # (a parallel filesystem's late marker, made long)


def test_a_step_its_holder_succeeded_after_failing_is_not_failed_here_on_its_earlier_final_record(
        tmp_path, started, shared_up):
    # The holder says a step ended before its marker is written: the waiting fleet read the
    # holder's final record of the earlier failure, took it for this end and failed the step
    # (before 2026-12-07), though the holder's run of it succeeded.
    from fleetharness import fleet
    from test_job_fleets import job
    log, once = tmp_path / "runs.log", tmp_path / "once"
    run_dir = shared_up(**SLOW_MARKERS)
    x = logged(tmp_path, "x", "a", 4, log, first_fails=once)
    assert fleet("run", str(x), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90, environ=job(391)).returncode == 1
    wait_for(lambda: (run_dir / "steps" / "x" / ".fleet" / "final.json").exists(), 30, "the failure's final record")
    again = started("run", str(x), "--run-dir", str(run_dir), extra_env=job(391))
    wait_for(lambda: log.read_text().count("S a") == 2, 60, "the fleet up to run x again")
    same = started("run", str(x), "--run-dir", str(run_dir), extra_env=job(393))  # the same definition
    ra, rs = finish(again, 90), finish(same, 90)
    assert ra[0] == 0 and rs[0] == 0, (ra, rs)
    assert "skipped    x" in rs[1] or "succeeded  x" in rs[1], rs[1]
    assert log.read_text().count("S a") == 2, log.read_text()  # (nobody ran it a third time)


def test_a_forced_step_waiting_for_another_definitions_run_is_not_skipped_for_its_own_old_marker(
        tmp_path, started, shared_up):
    # `fleet run --force` on a fleet up whose step another fleet (another definition) runs:
    # it waited, then took its own old marker for that fleet's end and said the step
    # skipped (before 2026-12-07); its definition never ran again.
    from fleetharness import fleet
    from test_job_fleets import job
    log = tmp_path / "runs.log"
    run_dir = shared_up()
    xa = logged(tmp_path, "xa", "a", 0, log)
    assert fleet("run", str(xa), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90, environ=job(391)).returncode == 0
    wait_for(lambda: said_ended(run_dir, "x"), 30, "the fleet up to say in the claims log that x ended")
    other = started("run", str(logged(tmp_path, "xc", "c", 3, log)), "--run-dir", str(run_dir),
                    extra_env={**job(393), **SLOW_MARKERS})
    wait_for(lambda: "S c" in log.read_text(), 60, "the other definition to run x")
    forced = fleet("run", str(xa), "--run-dir", str(run_dir), "--force", cwd=tmp_path, timeout=90, environ=job(391))
    rc = finish(other, 90)
    assert forced.returncode == 0 and rc[0] == 0, (forced.stdout, forced.stderr, rc)
    assert log.read_text().count("S a") == 2 and "skipped" not in forced.stdout, (log.read_text(), forced.stdout)
