"""fleet.context() and ctx.submit belong to a call step's own process: in a process it
forked (a multiprocessing worker) they raise, saying so. Through the real CLI, a real
fleet and a real fork pool."""

from __future__ import annotations

import json
import sys

import pytest

from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def test_a_forked_worker_of_a_call_step_is_told_the_context_is_the_step_s_and_submits_nothing(tmp_path):
    # (a worker got the parent's context, and two workers' ctx.submit failed with
    # FileNotFoundError: each one's first submission cleared the other's files)
    suite = write_suite(tmp_path / "w.toml", '[suite]\nname = "w"\nrun_dir = "run"\n'
                        '[[steps]]\nid = "w"\ncall = "context_steps:in_workers"\n')
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "run"
    assert r.returncode == 0, r.stdout + r.stderr
    seen = json.loads((run_dir / "steps/w/seen.json").read_text())
    assert seen["step_context_is_ctx"] is True  # the step's own process still has it
    assert len(seen["workers"]) == 2
    for said in seen["workers"]:
        context, submit = said
        assert context.startswith("context: RuntimeError: fleet.context() is only available in the call step's "
                                  "own process (pid "), said
        assert "a multiprocessing worker" in context, said
        assert submit.startswith("submit: RuntimeError: ctx.submit is only available in the call step's own "
                                 "process"), said
    assert not (run_dir / "steps/w/.fleet/submit").exists() or not any((run_dir / "steps/w/.fleet/submit").iterdir())
    assert [e["step"] for e in events(run_dir) if e["kind"] == "exit"] == ["w"]  # no child came of it
    assert_nothing_left(run_dir)
