"""A node's window through the real CLI (fleet.core.window, fleet.node.queued): steps
handed to a node ahead of time start there the moment the step they wait for ends,
before the coordinator has even heard of that end; a lost node's queued steps run
elsewhere without using an attempt; a cancelled queued step never runs. Nothing is
left running afterwards."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from fleetharness import assert_nothing_left, events, fleet, finish, spawn, wait_for, write_suite

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "2"]


def steps(tag: str, *specs: tuple[str, str], retries: int = 0) -> str:
    text = f'[suite]\nname = "window"\nrun_dir = "run"\n'
    for sid, command in specs:
        text += f'[[steps]]\nid = "{sid}"\ncommand = "{command} # {tag}"\nretries = {retries}\n'
    return text


def by(kind: str, ev: list[dict]) -> dict[str, dict]:
    return {e["step"]: e for e in ev if e["kind"] == kind}


def cancel_when_queued(tmp_path: Path, run_dir: Path, gate: Path, step: str, ready) -> tuple[int, str]:
    """`fleet run s.toml` on the fleet up in run_dir; once ready(events) holds, `fleet
    cancel` of `step`, then `gate` opened; the run's exit code and output. The fleet is
    brought down after, whatever happened."""
    try:
        p = spawn("run", "s.toml", cwd=tmp_path)
        wait_for(lambda: ready(events(run_dir)), 60, f"{step} queued")
        r = fleet("cancel", step, "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        wait_for(lambda: step in by("cancelled", events(run_dir)), 30, f"{step} cancelled")
        gate.touch()
        code, out, _ = finish(p, timeout=60)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    return code, out


def test_a_queued_step_starts_on_its_node_before_the_coordinator_hears_its_predecessor_ended(tmp_path):
    tag = str(tmp_path)
    # q0 and q1 last a while: a node that frees while the other's predecessor still runs
    # would take that queued step back (fleet.core.windowback), which is not this test's.
    # p0 and p1 end at the same nominal time, but each on its own node: a loaded machine
    # may start one of them late, so "a while" is 2 s (0.5 s was all the skew it took).
    write_suite(tmp_path / "s.toml", steps(tag, ("p0", "sleep 1"), ("p1", "sleep 1"), ("q0", "sleep 2"),
                                           ("q1", "sleep 2")))
    r = fleet("run", "s.toml", "--nodes", "2", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    ev = events(tmp_path / "run")
    queued, started, exits = by("queued", ev), by("started", ev), by("exit", ev)
    assert {s: q["after"] for s, q in queued.items()} == {"q0": "p0", "q1": "p1"}
    for s, q in queued.items():
        pred = exits[q["after"]]
        assert started[s]["node"] == q["node"] == pred["node"]
        # The node started it after reaping its predecessor (both the node's clock) ...
        assert started[s]["at"] >= pred["ended_at"], (started[s], pred)
        # ... and before the coordinator received that exit: nobody could have decided it then.
        assert started[s]["at"] < pred["t"], (started[s], pred)
        assert exits[s]["outcome"] == "succeeded" and exits[s]["attempt"] == 1
    assert_nothing_left(tmp_path / "run", tag)


def test_with_a_window_of_zero_nothing_is_queued(tmp_path):
    tag = str(tmp_path)
    write_suite(tmp_path / "s.toml", steps(tag, ("p0", "true"), ("q0", "true")))
    r = fleet("run", "s.toml", "--nodes", "1", "--window", "0", *HB, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    ev = events(tmp_path / "run")
    assert not by("queued", ev) and set(by("exit", ev)) == {"p0", "q0"}


def test_a_lost_nodes_queued_step_runs_elsewhere_as_its_next_attempt_without_using_a_retry(tmp_path):
    # Its node may have started it unheard (fleet.core.unsure): before 2026-12-07 it ran again as attempt 1.
    tag = str(tmp_path)
    write_suite(tmp_path / "s.toml", steps(tag, ("long", "sleep 60"), ("short", "sleep 4"), ("q", "true")))
    p = spawn("run", "s.toml", "--nodes", "2", *HB, cwd=tmp_path)
    run_dir = tmp_path / "run"
    try:
        q = wait_for(lambda: by("queued", events(run_dir)).get("q"), 60, "q queued")
        assert q["after"] == "long", q  # the first started, the first a step is queued behind
        agent = next(e["pid"] for e in events(run_dir) if e["kind"] == "node_joined" and e["node"] == q["node"])
        os.kill(agent, signal.SIGKILL)  # its zygote stops its steps; the coordinator hears nothing more
        code, out, err = finish(p, timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    ev = events(run_dir)
    assert code != 0  # `long` was lost (no retries)
    back = by("unqueued", ev)["q"]
    assert (back["attempt"], back["may_have_started"]) == (1, True) and "may have started" in back["reason"], back
    assert by("exit", ev)["long"]["outcome"] == "lost"
    ends = [e for e in ev if e["kind"] == "exit" and e["step"] == "q"]
    assert [(e["outcome"], e["attempt"]) for e in ends] == [("succeeded", 2)], ends
    assert ends[0]["node"] != q["node"]
    assert not [e for e in ev if e["kind"] == "retry" and e["step"] == "q"]
    assert_nothing_left(run_dir, tag)


def test_a_cancelled_queued_step_is_dropped_by_its_node_and_never_runs(tmp_path):
    tag = str(tmp_path)
    gate = tmp_path / "gate"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    write_suite(tmp_path / "s.toml", steps(tag, ("first", wait), ("second", wait), ("q", f"touch {tmp_path}/q-ran")))
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, check=True, timeout=60)
    code, out = cancel_when_queued(tmp_path, run_dir, gate, "q",
                                   lambda ev: "q" in by("queued", ev) and "first" in by("started", ev))
    ev = events(run_dir)
    assert code != 0, out  # one step cancelled
    assert by("exit", ev)["first"]["outcome"] == by("exit", ev)["second"]["outcome"] == "succeeded"
    assert "q" not in by("started", ev) and "q" not in by("exit", ev)
    assert not Path(f"{tmp_path}/q-ran").exists()
    assert_nothing_left(run_dir, tag)


def test_reports_of_queued_steps_that_come_before_the_coordinator_handled_their_predecessors_exit_are_kept(tmp_path):
    """A coordinator whose turns end after half a millisecond leaves events in its
    inbox from turn to turn: a queued step's Started and Exited then often arrive
    while its predecessor's exit still waits there. Dropped as stale, they left the
    step running forever; now they are handled in order and the suite ends."""
    import subprocess
    import sys
    from fleetharness import env
    run_dir = tmp_path / "run"
    code = "import sys, fleet.control.coordinator as C; C.TURN_S = 0.0005; sys.exit(C.main(sys.argv[1:]))"
    coord = subprocess.Popen([sys.executable, "-c", code, "--run-dir", str(run_dir), "--nodes", "2",
                              "--machine", "local", "--heartbeat", "0.2", "--timeout", "5"],
                             cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        wait_for(lambda: (run_dir / "fleet.json").exists(), 60, "the fleet to come up")
        text = '[suite]\nname = "early"\n[[steps]]\nid = "s/{i}"\narray = "0-299"\ncall = "fleet_steps:nap"\n' \
               'args = { seconds = 0 }\n'
        write_suite(tmp_path / "s.toml", text)
        r = fleet("run", "s.toml", "--run-dir", str(run_dir), cwd=tmp_path, timeout=240)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        try:
            coord.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(coord.pid, signal.SIGKILL)
            coord.wait()
    ev = events(run_dir)
    assert len(by("exit", ev)) == 300 and len(by("queued", ev)) > 0
    assert_nothing_left(run_dir)
