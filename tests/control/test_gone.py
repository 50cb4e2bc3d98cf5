"""fleet.control.gone: why a followed fleet is gone, read from the end of a real
events.jsonl (the follower's side of the kill tests in test_faults and test_cli_paths)."""

from __future__ import annotations

import json

from fleet.control import gone


def _write(path, records, pad: int = 0):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        for i in range(pad):  # another fleet's records after them
            f.write(json.dumps({"t": 2.0, "kind": "exit", "fleet": "other-7-aa", "step": f"s/{i}"}) + "\n")


def test_a_fleet_that_wrote_fleet_down_was_stopped_and_one_that_did_not_was_killed(tmp_path):
    ours = {"t": 1.0, "kind": "fleet_starting", "fleet": "hostA-42-abcdef", "pid": 42}
    _write(tmp_path / "events.jsonl", [ours, {"t": 1.5, "kind": "fleet_down", "fleet": "hostA-42-abcdef"}], pad=3)
    assert gone.why(tmp_path, "hostA", 42).startswith("it was stopped")
    _write(tmp_path / "events.jsonl", [ours, {"t": 1.5, "kind": "start", "fleet": "hostA-42-abcdef"}], pad=3)
    said = gone.why(tmp_path, "hostA", 42)
    assert "killed or crashed" in said and "pid 42 on hostA" in said and str(tmp_path / "coordinator.log") in said
    # A fleet of another pid (or host) sharing the run directory is not ours: the
    # prefix is the whole host-pid- (pid 4 is not pid 42).
    assert gone.why(tmp_path, "hostA", 4) == "" and gone.why(tmp_path, "hostB", 42) == ""


def test_only_the_tail_is_read_and_a_record_beyond_it_is_not_guessed_at(tmp_path, monkeypatch):
    monkeypatch.setattr(gone, "TAIL", 4096)
    _write(tmp_path / "events.jsonl", [{"t": 1.0, "kind": "fleet_down", "fleet": "hostA-42-abcdef"}], pad=200)
    assert (tmp_path / "events.jsonl").stat().st_size > 4096
    assert gone.why(tmp_path, "hostA", 42) == ""
    assert gone.why(tmp_path / "missing", "hostA", 42) == ""


def test_a_fleet_that_stopped_itself_says_why_and_is_not_taken_for_one_that_was_stopped(tmp_path):
    ours = {"t": 1.0, "kind": "fleet_starting", "fleet": "hostA-42-abcdef", "pid": 42}
    why = "every node was lost: every agent is gone; the fleet stopped itself"
    _write(tmp_path / "events.jsonl", [ours, {"t": 1.5, "kind": "fleet_down", "fleet": "hostA-42-abcdef",
                                              "reason": why}], pad=3)
    assert gone.how(tmp_path, "hostA", 42) == (gone.ITSELF, why)
