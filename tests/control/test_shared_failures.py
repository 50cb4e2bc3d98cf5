"""Fleets and shards sharing a run directory when steps fail: a step another fleet
failed or blocked settles the wait with that outcome, so every `fleet run` ends (real
`fleet run` processes, each bounded by a timeout, on one run directory; the crashfuzz
audit's F1 and F2)."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, events, finish, fleet, wait_for, write_suite
from test_job_fleets import job


@pytest.fixture
def bg(started):
    """`fleet` commands in the background (conftest's `started`; env: more environment)."""
    return lambda *args, env=None: started(*args, extra_env=env)


def outcomes(out: str) -> dict[str, str]:
    """step -> outcome, from `fleet run`'s "[k/n]  outcome  step" lines, and its
    unnumbered "outcome  step ... (shard I/N's step)" lines of other shards' steps."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"\[\s*\d+/\d+\]\s+(\S+)\s+([^\s:]+)", line)
        if m is None and line.endswith("'s step)"):
            m = re.match(r"\s*(\S+)\s+([^\s:]+)", line)
        if m is not None:
            got[m[2]] = m[1]
    return got


def recorded(run_dir: Path, step: str) -> str | None:
    """The step's outcome on record: its marker's, else its final record's."""
    d = run_dir / "steps" / step / ".fleet"
    for name in ("done.json", "final.json"):
        try:
            return json.loads((d / name).read_text())["outcome"]
        except FileNotFoundError:
            continue
    return None


def starts(run_dir: Path, step: str) -> int:
    return sum(e["kind"] == "started" and e.get("step") == step for e in events(run_dir))


def test_two_fleets_of_a_suite_with_failing_steps_both_end_with_every_outcome_recorded(tmp_path, bg):
    # The audit's suite: 60 steps, about a third fail, some deps; two fleets started
    # together. Each found steps held by the other that it had failed already, and
    # both waited for ever (4 seeds of 4).
    r = random.Random(1)
    lines = ['[suite]', 'name = "two"', 'run_dir = "run"', '']
    for i in range(60):
        lines += ['[[steps]]', f'id = "s{i}"', f'command = "sleep 0.{r.randint(0, 3)}; exit {int(r.random() < 0.3)}"']
        if i > 3 and r.random() < 0.3:
            lines.append(f'deps = ["s{r.randint(0, i - 1)}"]')
    s = write_suite(tmp_path / "s.toml", "\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    a = bg("run", str(s), "--nodes", "2")
    wait_for(lambda: (run_dir / ".fleet" / "lease").exists(), 30, "fleet A to take the lease")
    b = bg("run", str(s), "--nodes", "2")
    ra, rb = finish(a, 120), finish(b, 120)
    assert ra[0] == 1 and rb[0] == 1, ra + rb
    got = {f"s{i}": recorded(run_dir, f"s{i}") for i in range(60)}
    assert None not in got.values(), got
    assert "failed" in got.values() and "blocked" in got.values() and "succeeded" in got.values(), got
    for out in (ra[1], rb[1]):  # each fleet says an end for every step, and the ends on record
        said = outcomes(out)
        assert len(said) == 60, out
        # (a step it says succeeded has a success on record, one it says failed or blocked has not)
        assert all((v == "succeeded") == (got[k] == "succeeded") for k, v in said.items() if v != "skipped"), \
            (out, got)
    assert_nothing_left(run_dir)


def test_a_fleet_takes_the_failure_of_a_step_the_fleet_holding_it_recorded_before_it_looked(tmp_path, bg):
    run_dir = tmp_path / "run"
    s = write_suite(tmp_path / "s.toml", """
[suite]
name = "held"
run_dir = "run"
[[steps]]
id = "w"
command = "until test -e ../../go; do sleep 0.1; done"
[[steps]]
id = "x"
command = "exit 3"
deps = ["w"]
[[steps]]
id = "y"
command = "true"
deps = ["x"]
[[steps]]
id = "hold"
command = "until test -e ../../end; do sleep 0.1; done"
""")

    def seen(kind: str, step: str) -> bool:
        return any(e["kind"] == kind and e.get("step") == step for e in events(run_dir))

    a = bg("run", str(s))
    wait_for(lambda: seen("started", "w") and seen("started", "hold"), 60, "fleet A to start w and hold")
    b = bg("run", str(s), "--run-dir", str(run_dir))
    wait_for(lambda: seen("elsewhere", "w"), 60, "fleet B to find w held by A")
    (run_dir / "go").touch()  # A runs w's dependent x, which fails, before B finds x held (B waits for w's marker)
    wait_for(lambda: sum(e["kind"] == "elsewhere" and e.get("step") == "x" for e in events(run_dir)), 60,
             "fleet B to find x held by A")
    # B settles x with A's failure at once, A still live (before, it waited for A to end, then ran x again).
    wait_for(lambda: recorded(run_dir, "y") == "blocked" and seen("exit", "x") and
             any(e["kind"] == "exit" and e.get("step") == "x" and e.get("by") for e in events(run_dir)), 60,
             "fleet B to take x's failure in A")
    (run_dir / "end").touch()
    ra, rb = finish(a, 60), finish(b, 60)
    assert ra[0] == 1 and rb[0] == 1, ra + rb
    assert outcomes(ra[1]) == {"w": "succeeded", "x": "failed", "y": "blocked", "hold": "succeeded"}, ra[1]
    assert outcomes(rb[1]) == {"w": "skipped", "x": "failed", "y": "blocked", "hold": "skipped"}, rb[1]
    assert "x: failed in fleet" in rb[1] and "exit status 3" in rb[1], rb[1]
    assert starts(run_dir, "x") == 1 and starts(run_dir, "y") == 0, events(run_dir)
    assert recorded(run_dir, "x") == "failed" and recorded(run_dir, "y") == "blocked"
    assert_nothing_left(run_dir)


def test_shards_started_together_end_when_one_blocks_a_step_the_other_waits_for(tmp_path, bg):
    # 1 (shard 1's) fails; 2 (shard 0's) is blocked there, never claimed; 3 (shard 1's)
    # waits for 2. Before, nothing told shard 1 that 2 ended: it waited for ever.
    s = write_suite(tmp_path / "s.toml", SHARD_SUITE)
    run_dir = tmp_path / "run"
    zero, one = bg("run", str(s), "--shard", "0/2"), bg("run", str(s), "--shard", "1/2")
    r0, r1 = finish(zero, 60), finish(one, 60)
    _both_said_it(run_dir, r0, r1)


SHARD_SUITE = """
[suite]
name = "shardrep"
run_dir = "run"
[[steps]]
id = "1"
command = "exit 1"
[[steps]]
id = "2"
command = "true"
deps = ["1"]
[[steps]]
id = "3"
command = "true"
deps = ["2"]
"""


def test_a_shard_that_finds_another_shards_step_failed_by_a_live_fleet_ends_and_so_does_that_fleet(tmp_path, bg):
    # Shard 1 fails 1 and waits for 2 (shard 0's) before shard 0 is up: shard 0 found 1
    # ended at its submission, by a fleet live then, and waited for that fleet to end,
    # which waited for shard 0: both for ever (seen in CI-like load on the test above).
    s = write_suite(tmp_path / "s.toml", SHARD_SUITE)
    run_dir = tmp_path / "run"
    one = bg("run", str(s), "--shard", "1/2")
    wait_for(lambda: recorded(run_dir, "1") == "failed", 60, "shard 1 to record 1 failed")
    zero = bg("run", str(s), "--shard", "0/2")
    r0, r1 = finish(zero, 60), finish(one, 60)
    _both_said_it(run_dir, r0, r1)


def test_a_shard_waits_for_a_step_an_idle_long_lived_fleet_failed_in_an_earlier_round_and_takes_its_rerun(
        tmp_path, bg):
    # Job 111 keeps a `fleet up` for shard 1; round 1 fails 1 there. Round 2: shard 0 (job
    # 222, its own fleet) comes before shard 1's second `fleet run` reaches that fleet,
    # idle then. Briefly (2026-12-07) shard 0 took round 1's failure as this round's,
    # blocked 2 and ended, and 1 then succeeded (the review's F1).
    s = write_suite(tmp_path / "s.toml", SHARD_SUITE.replace('command = "exit 1"', 'command = "test -e ../../ok"')
                    .replace('[[steps]]\nid = "3"\ncommand = "true"\ndeps = ["2"]\n', ""))
    run_dir = tmp_path / "run"
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(111))
    try:
        r = fleet("run", str(s), "--run-dir", str(run_dir), "--shard", "1/2", cwd=tmp_path, timeout=90,
                  environ=job(111))
        assert r.returncode == 1 and outcomes(r.stdout) == {"1": "failed"}, r
        (run_dir / "ok").touch()
        zero = bg("run", str(s), "--run-dir", str(run_dir), "--shard", "0/2", env=job(222))
        wait_for(lambda: any(e["kind"] == "submitted" and e.get("shard") == "0/2" for e in events(run_dir)), 60,
                 "shard 0's submission")
        # Give shard 0 several looks (its claims period is 2 s) at 1 while the fleet up is
        # idle: it must wait. (Under a load that delays them past this, the test proves less,
        # never fails the right code.)
        deadline = time.monotonic() + 8
        while zero.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert zero.poll() is None, finish(zero, 30)
        r = fleet("run", str(s), "--run-dir", str(run_dir), "--shard", "1/2", cwd=tmp_path, timeout=90,
                  environ=job(111))
        assert r.returncode == 0 and outcomes(r.stdout) == {"1": "succeeded"}, r
        r0 = finish(zero, 90)
        assert r0[0] == 0 and outcomes(r0[1]) == {"1": "succeeded", "2": "succeeded"}, r0
        assert [recorded(run_dir, k) for k in "12"] == ["succeeded", "succeeded"]
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(111))
    assert_nothing_left(run_dir)


def test_a_shard_takes_a_failure_of_this_round_a_busy_long_lived_fleet_recorded_before_it_came(tmp_path, bg):
    # As the live-fleet case above, shard 1 run by job 111's `fleet up`, busy with it (its
    # submission waits for 2): the failure is of this round, and both end.
    s = write_suite(tmp_path / "s.toml", SHARD_SUITE)
    run_dir = tmp_path / "run"
    fleet("up", "--local", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60, environ=job(111))
    try:
        one = bg("run", str(s), "--run-dir", str(run_dir), "--shard", "1/2", env=job(111))
        wait_for(lambda: recorded(run_dir, "1") == "failed", 60, "shard 1 to record 1 failed")
        zero = bg("run", str(s), "--run-dir", str(run_dir), "--shard", "0/2", env=job(222))
        r0, r1 = finish(zero, 60), finish(one, 60)
        assert r0[0] == 1 and r1[0] == 1, r0 + r1
        assert outcomes(r0[1]) == {"1": "failed", "2": "blocked"}, r0[1]
        assert outcomes(r1[1]) == {"1": "failed", "2": "failed", "3": "blocked"}, r1[1]
        assert [recorded(run_dir, k) for k in "123"] == ["failed", "blocked", "blocked"]
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, environ=job(111))
    assert_nothing_left(run_dir)


def _both_said_it(run_dir: Path, r0, r1) -> None:
    assert r0[0] == 1 and r1[0] == 1, r0 + r1
    assert outcomes(r0[1]) == {"1": "failed", "2": "blocked"}, r0[1]
    assert outcomes(r1[1]) == {"1": "failed", "2": "failed", "3": "blocked"}, r1[1]
    assert "2: blocked in fleet" in r1[1], r1[1]
    assert [recorded(run_dir, k) for k in "123"] == ["failed", "blocked", "blocked"]
    assert starts(run_dir, "1") == 1 and starts(run_dir, "2") == starts(run_dir, "3") == 0
    assert_nothing_left(run_dir)
