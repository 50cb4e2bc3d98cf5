"""Random generators a preload seeded in the zygote, in the call steps forked from it:
through a real embedded fleet (fork, ZeroMQ, files)."""

from __future__ import annotations

import json

import pytest

from fleetharness import assert_nothing_left, fleet, records, write_suite
from fleet.wire import events as E

STEPS = 4


def test_call_steps_forked_from_a_zygote_that_preloaded_numpy_random_each_draw_their_own_numbers(tmp_path):
    pytest.importorskip("numpy.random")
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "rnd"\nrun_dir = "run"\npreload = ["numpy.random"]\n'
                        f'[[steps]]\nid = "r{{i}}"\narray = "1-{STEPS}"\ncall = "preload_draws:draw"\n')
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "run"
    assert len([e for e in records(run) if isinstance(e, E.NodeJoined)]) == 1  # one zygote forked them all
    draws = [tuple(json.loads((run / "steps" / f"r{i}" / "draws.json").read_text())) for i in range(1, STEPS + 1)]
    assert len(set(draws)) == STEPS, draws  # before: the same three numbers in every step
    assert_nothing_left(run)
