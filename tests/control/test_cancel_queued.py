"""`fleet cancel` of steps handed to their node ahead of time (fleet.core.window) behind
running ones, through the real CLI: a step not yet started never starts, its code never
runs, whether the cancel names every step (`--all`) or a waiting parent (its children
with it). Until 2026-12-07 the running step was told to stop before its node heard that
the step queued behind it was dropped: it ended at once on its SIGTERM, its node started
the queued one, and that one's code ran after the cancel. Step functions in
tests/children_steps.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from children_steps import cancel_steps, ran
from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "3"]
# Steps that wait between the running ones and the queued ones in the cancel's order:
# ending them takes the coordinator a while, so that a node told to stop its running
# step first had every chance to start the queued one (each round failed so before the fix).
WAITING = 1000


def usable() -> int:
    """The cores the local fleet splits between its pretend nodes: as many steps run, and
    as many more are queued behind them (a node's window is its cores)."""
    from fleet.node.probe import usable_cores
    return len(usable_cores())


def toml_steps(steps: list[dict]) -> str:
    """Step tables (children_steps.cancel_steps) as a suite's TOML."""
    out = ""
    for s in steps:
        out += f'[[steps]]\nid = "{s["id"]}"\n'
        if "call" in s:
            out += f'call = "{s["call"]}"\nargs = {{gate = "{s["args"]["gate"]}"}}\npriority = {s.get("priority", 3)}\n'
        else:
            out += f'command = "{s["command"]}"\ndeps = {json.dumps(s["deps"])}\n'
    return out


def cancel_when_queued(tmp_path: Path, run_dir: Path, name: str, body: str, prefix: str, n: int,
                       *cancel: str) -> tuple[int, str, set]:
    """`fleet run` of the suite `name` of steps `body` on the fleet up in run_dir; once n of
    its gated steps (`prefix`r.., `prefix`q..) run and n more are queued behind them,
    `fleet cancel *cancel`; the run's exit code and output, and the steps queued then."""
    suite = write_suite(tmp_path / f"{name}.toml", f'[suite]\nname = "{name}"\nrun_dir = "run"\n' + body)
    p = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)

    def queued_behind() -> set | None:
        mine = [e for e in events(run_dir) if e.get("step", "").startswith((prefix + "r", prefix + "q"))]
        started = {e["step"] for e in mine if e["kind"] == "started"}
        queued: set = set()
        for e in mine:  # (a queued step may be taken back, and queued again)
            if e["kind"] == "queued":
                queued.add(e["step"])
            elif e["kind"] in ("unqueued", "start"):
                queued.discard(e["step"])
        return queued if len(queued) == len(started) == n else None

    try:
        queued = wait_for(queued_behind, 120, f"{n} steps of {name} running and {n} queued behind them")
        r = fleet("cancel", *cancel, "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        code, out, err = finish(p, timeout=120)
    return code, out + err, queued


def test_a_cancelled_step_queued_on_its_node_behind_a_running_one_never_starts_nor_runs_its_code(tmp_path):
    n = usable()
    run_dir = tmp_path / "run"
    gate = str(tmp_path / "never")  # (never made: the running steps end only by the cancel)
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, check=True, timeout=60)
    rounds = []
    try:
        for k in range(2):  # the whole fleet: `fleet cancel --all`
            body = toml_steps(cancel_steps(f"a{k}", gate, n, WAITING))
            rounds.append(cancel_when_queued(tmp_path, run_dir, f"all{k}", body, f"a{k}", n, "--all"))
        # A waiting parent, named alone: its children, running and queued, end with it.
        body = (f'[[steps]]\nid = "p"\ncall = "children_steps:cancel_family"\n'
                f'args = {{gate = "{gate}", running = {n}, waiting = {WAITING}}}\n')
        rounds.append(cancel_when_queued(tmp_path, run_dir, "fam", body, "p/", n, "p"))
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    for code, out, _ in rounds:
        assert code != 0, out  # (cancelled steps)
    queued = set().union(*(q for _, _, q in rounds))
    assert len(queued) == 3 * n, queued
    ev = events(run_dir)
    ran_after = [x["step"] for x in ran(run_dir) if x["what"] == "started" and x["step"] in queued]
    assert not ran_after, f"cancelled steps queued on their nodes ran their code: {ran_after}"
    assert not [e["step"] for e in ev if e["kind"] in ("start", "started") and e["step"] in queued]
    dropped = {e["step"]: e["reason"] for e in ev if e["kind"] == "cancelled" and e["step"] in queued}
    assert set(dropped) == queued and set(dropped.values()) == {"cancelled before it started"}, dropped
    assert_nothing_left(run_dir)
