"""`fleet simulate` and the allocation's end, through the real command line in a fresh
process: the end and the drain point as a live fleet takes them, and the figures it
prints (text and JSON) always numbers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fleetharness import completed

ONE = '[suite]\nname = "one"\n[[steps]]\nid = "one"\ncommand = "x"\nestimate = 100\n'


def fleet(tmp_path: Path, text: str, *args: str, timeout: float = 60):
    """`fleet simulate SUITE ARGS` on the suite `text`, in tmp_path."""
    (tmp_path / "s.toml").write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    return completed([sys.executable, "-m", "fleet", "simulate", "s.toml", *args], timeout, cwd=tmp_path, env=env,
                     text=True)


def test_a_step_admitted_because_it_ends_exactly_at_the_drain_point_ends_there_and_is_not_interrupted(tmp_path):
    # A live coordinator handles the exits a loop turn brings before it drains
    # (fleet.control.coordinator: messages, then Drain.tick): an end at the drain point is an end.
    r = fleet(tmp_path, ONE, "--nodes", "1", "--cores-per-node", "1", "--walltime", "105", "--drain-before", "5",
              "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["drain_s"] == 100.0 and out["steps"]["one"]["end_s"] == 100.0
    assert out["interrupted"] == {} and out["not_started"] == []


def test_a_wide_step_in_the_comparisons_is_half_a_node_or_more_rounded_up(tmp_path):
    two = ONE.replace('estimate = 100', 'estimate = 100\ncores = 2')
    for cores, wide in (("5", 3), ("4", 2)):
        r = fleet(tmp_path, two, "--nodes", "2", "--cores-per-node", cores, "--compare-reservations", "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["wide_cores"] == wide, (cores, got)
        assert got["with"]["wide_waits"]["steps"] == (1 if cores != "5" else 0), (cores, got)
