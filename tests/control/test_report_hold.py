"""An agent's report hold (fleet.control.liveness.report_hold, fleet.node.agent): a busy
node's step reports wait for the hold after its last send and reach the coordinator
together; a report after a quiet spell goes at once. Proved from the records' times:
each `exit` line has the node's end time (`ended_at`) and the coordinator's read time
(`t`), on one clock here."""

from __future__ import annotations

import os

from fleetharness import assert_nothing_left, events, fleet, write_suite

from fleet.control.liveness import REPORT_HOLD_MAX_S, report_hold

HOLD = 1.0
CORES = len(os.sched_getaffinity(0))  # the one pretend node's
BURST = 6 * CORES  # one-core steps of 0.2 s: six waves


def suite(tag: str) -> str:
    text = '[suite]\nname = "hold"\nrun_dir = "run"\n'
    for i in range(BURST):
        text += f'[[steps]]\nid = "burst/{i}"\ncommand = "sleep 0.2 # {tag}"\n'
    deps = ", ".join(f'"burst/{i}"' for i in range(BURST))
    # Its start is reported at most HOLD after the burst's last exit; it ends 2.5 s after
    # its start, so its exit comes after more than HOLD without a report sent.
    return text + f'[[steps]]\nid = "lone"\ncommand = "sleep 2.5 # {tag}"\ndeps = [{deps}]\n'


def groups(times: list[float], gap: float = 0.1) -> list[list[float]]:
    """The times in runs where each is within `gap` of the one before."""
    out: list[list[float]] = []
    for t in sorted(times):
        if out and t - out[-1][-1] <= gap:
            out[-1].append(t)
        else:
            out.append([t])
    return out


def test_a_busy_nodes_reports_reach_the_coordinator_together_and_a_report_after_quiet_goes_at_once(tmp_path):
    tag = str(tmp_path)
    write_suite(tmp_path / "s.toml", suite(tag))
    r = fleet("run", "s.toml", "--nodes", "1", "--report-hold", str(HOLD), "--heartbeat", "2",
              "--heartbeat-timeout", "20", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    ev = events(tmp_path / "run")
    exits = {e["step"]: e for e in ev if e["kind"] == "exit"}
    assert len(exits) == BURST + 1 and {e["outcome"] for e in exits.values()} == {"succeeded"}
    burst = [exits[f"burst/{i}"] for i in range(BURST)]
    ended = [e["ended_at"] for e in burst]
    # The node's cores ended the steps in waves over more than a second (a heartbeat,
    # every 2 s here, carries what is held too) ...
    spread = max(ended) - min(ended)
    assert spread > 1.0, ended
    # ... but the coordinator read them in batches at most one a HOLD (without the hold:
    # one a wave, 0.2 s apart).
    read = groups([e["t"] for e in burst])
    assert len(read) <= spread // HOLD + 1, (spread, read)
    # Reports were held: some exit was read at least half a hold after its step ended.
    assert max(e["t"] - e["ended_at"] for e in burst) >= HOLD / 2, burst
    # After more than a hold without a report, the lone step's exit was not held.
    lone = exits["lone"]
    assert lone["t"] - lone["ended_at"] < HOLD, lone
    assert_nothing_left(tmp_path / "run", tag)


def test_the_hold_grows_with_the_allocation_up_to_its_bound_a_small_fleet_holds_nothing_and_an_asked_hold_is_kept():
    assert report_hold(2) == report_hold(9) == 0.0 < report_hold(10)
    assert report_hold(100) < report_hold(1000) <= REPORT_HOLD_MAX_S
    assert report_hold(1_000_000) == REPORT_HOLD_MAX_S
    assert report_hold(1000, 0.0) == 0.0 and report_hold(2, 0.3) == 0.3
