"""`ctx.children` lists the children the parent's current run submitted, not those of
its earlier runs in the same fleet: a parent submitted again on a live fleet, retried
after it failed in phase 0, or restarted (`fleet.Restart()`), starts over at phase 0 and
sees only what it submits from then on. Until 2026-12-07 a live fleet listed every
child the parent had ever submitted, and the user guide's sweep failed on a child of an
earlier run (`RuntimeError: bad children: ['ren2/x-c0']`), where a fresh fleet passed.
Real `fleet` runs under a timeout; step functions in tests/children_steps.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from children_steps import ran
from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def suite(path: Path, name: str, body: str) -> Path:
    return write_suite(path, f'[suite]\nname = "{name}"\nrun_dir = "run"\n' + body)


def parent(sid: str, **args) -> str:
    return f'[[steps]]\nid = "{sid}"\ncall = "children_steps:sweeps_as"\nretries = {args.pop("retries", 0)}\n' \
        f'args = {{{", ".join(f"{k} = {v!r}".replace("True", "true") for k, v in args.items())}}}\n'


def seen(run_dir: Path, step: str) -> list[dict]:
    """What each phase 1 of `step` found in ctx.children, in order."""
    return [x["children"] for x in ran(run_dir) if x["step"] == step and x["what"] == "resumed"]


def outcomes(run_dir: Path, step: str) -> list[str]:
    return [e["outcome"] for e in events(run_dir) if e["kind"] == "exit" and e["step"] == step]


def test_on_a_live_fleet_a_parent_submitted_again_sees_only_the_children_of_its_new_run(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite(tmp_path / "x.toml", "ren", parent("ren", tag="x", fail="x"))),
                  "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 1 and "bad children: ['ren/x-c0']" in r.stdout + r.stderr + \
            (run_dir / "steps/ren/log").read_text(), r.stdout + r.stderr
        r = fleet("run", str(suite(tmp_path / "y.toml", "ren", parent("ren", tag="y", fail="x"))),
                  "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert seen(run_dir, "ren") == [
        {"ren/x-c0": "failed", "ren/x-c1": "succeeded", "ren/x-c2": "succeeded"},
        {"ren/y-c0": "succeeded", "ren/y-c1": "succeeded", "ren/y-c2": "succeeded"}]
    assert outcomes(run_dir, "ren") == ["wait", "failed", "wait", "succeeded"]
    assert_nothing_left(run_dir)


def test_a_retried_or_restarted_parent_sees_only_the_children_its_current_run_submitted(tmp_path):
    # The retry's attempt 2 starts again at phase 0 (attempt 1 failed there, after
    # submitting a1-c0, which fails); the restarted one saw r0-c0 fail before it restarted.
    body = parent("retried", retried=True, fail="a1", retries=1) + parent("restarted", restarted=True, fail="r0")
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite(tmp_path / "s.toml", "again", body)), "--run-dir", str(run_dir), "--nodes", "2",
              cwd=tmp_path, timeout=180)
    # Only the two children made to fail failed: both parents succeeded.
    assert r.returncode == 1 and "suite 'again': 2 failed, 12 succeeded" in r.stdout, r.stdout + r.stderr
    assert outcomes(run_dir, "restarted") == ["wait", "restart", "wait", "succeeded"]
    assert seen(run_dir, "retried") == [{f"retried/a2-c{i}": "succeeded" for i in range(3)}]
    assert seen(run_dir, "restarted") == [
        {"restarted/r0-c0": "failed", "restarted/r0-c1": "succeeded", "restarted/r0-c2": "succeeded"},
        {f"restarted/r1-c{i}": "succeeded" for i in range(3)}]
    # The retry waited for attempt 1's children too (they ran, and a1-c0 failed).
    assert outcomes(run_dir, "retried/a1-c0") == ["failed"] and outcomes(run_dir, "retried") == [
        "failed", "wait", "succeeded"]
    assert_nothing_left(run_dir)
