"""What a step may ask for as it goes on, through the real `fleet` CLI (real fork, real
ZeroMQ, real files): a stage is a name of at most 1024 bytes (protocol.STAGE_MAX), never
empty. Step functions live in tests/stage_steps.py."""

from __future__ import annotations

import json
import re
import os
import sys
from pathlib import Path

import msgpack
import pytest

from fleet.node import childreport, protocol, stepcontext
from fleetharness import assert_nothing_left, exits, fleet, run_named, write_suite

LIMIT = 1024  # bytes: the documented longest stage (protocol.STAGE_MAX)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def run(tmp_path: Path, body: str, name: str = "st", timeout: float = 150.0):
    return run_named(tmp_path, body, name, timeout)


def seen(run_dir: Path, step: str) -> list[dict]:
    path = run_dir / "seen.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [x for x in map(json.loads, lines) if x["step"] == step]


def test_a_stage_over_the_limit_fails_the_step_with_the_limit_named_and_one_at_the_limit_runs(tmp_path):
    # (1.5 MB from a call step used to block the child in its write to the zygote for good;
    # the step's timeout only bounds the old code's hang)
    r, run_dir = run(tmp_path, f"""
[[steps]]
id = "huge"
call = "stage_steps:next_stage"
args = {{ size = 1500000 }}
timeout = 60

[[steps]]
id = "cmd"
command = "head -c 2000000 /dev/zero | tr '\\\\0' y > \\"$FLEET_NEXT_STAGE\\"; exit 2"
protocol = "steps"
timeout = 60

[[steps]]
id = "most"
call = "stage_steps:next_stage"
args = {{ size = {LIMIT} }}
""")
    assert r.returncode == 1, r.stdout + r.stderr
    for step, size in (("huge", "1,500,000"), ("cmd", "2,000,000")):
        ends = exits(run_dir, step)
        assert [e["outcome"] for e in ends] == ["failed"], ends
        assert f"stage of {size} bytes" in ends[0]["reason"], ends
        assert f"at most {LIMIT} bytes" in ends[0]["reason"], ends
    assert "fleet.Next() was given a stage" in (run_dir / "steps/huge/log").read_text()  # (its traceback)
    assert [e["outcome"] for e in exits(run_dir, "most")] == ["next", "succeeded"]
    assert [x["stage_len"] for x in seen(run_dir, "most")] == [0, LIMIT]
    assert_nothing_left(run_dir)


def test_no_end_record_is_written_longer_than_a_pipe_write_is_atomic(tmp_path):
    # A stage set round fleet.Next's check: the record keeps its scalars and says why
    # (the step then fails on its exit status, never blocks in the write). Both ends
    # non-blocking: a record too long for the pipe is an error here, not a hang.
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    stepcontext.control.update(outcome="next", stage="y" * 2_000_000, submitted=3)
    try:
        childreport.report_end(w, 1.0, 2.0, 3.0, list(range(3000)), True, "next stage 'yyy'")
        data = os.read(r, 1 << 20)
    finally:
        stepcontext.control.clear()
        os.close(r)
        os.close(w)
    assert len(data) <= childreport._REPORT_MAX
    record = msgpack.unpackb(data)
    assert record["phase"] == "end" and record["work_end"] == 3.0 and record["control"] == {"submitted": 3}
    assert "its end record was 2,000," in record["error"] and record["error"].startswith("next stage 'yyy'")
    assert protocol.outcome(_call_launch(tmp_path), 2, record) == "failed"


def _call_launch(tmp_path: Path):
    from fleet.wire.messages import Launch
    return Launch(step="s", attempt=1, kind="call", call="m:f", args={}, command=None, cores=(), gpus=(),
                  memory=0, workdir=str(tmp_path), log=str(tmp_path / "log"), run_dir=str(tmp_path))


def test_fleet_next_with_an_empty_or_blank_stage_fails_the_step_as_exit_2_naming_none_does(tmp_path):
    # (it used to send the step back to its first stage, for ever)
    r, run_dir = run(tmp_path, """
[[steps]]
id = "empty"
call = "stage_steps:next_blank"
retries = 1

[[steps]]
id = "blank"
call = "stage_steps:next_blank"
args = { stage = "  " }

[[steps]]
id = "after"
command = "true"
deps = ["empty"]
""")
    assert r.returncode == 1, r.stdout + r.stderr
    for step, tries in (("empty", 2), ("blank", 1)):
        ends = exits(run_dir, step)
        assert [e["outcome"] for e in ends] == ["failed"] * tries, ends  # (its retry fails the same way)
        assert all("fleet.Next() with no stage named" in e["reason"] for e in ends), ends
        assert [x["phase"] for x in seen(run_dir, step)] == [0] * tries
    assert not exits(run_dir, "after")
    assert_nothing_left(run_dir)


def test_the_context_holds_tuples_in_fleet_step_as_in_fleet_run(tmp_path):
    suite = write_suite(tmp_path / "k.toml", """
[suite]
name = "k"
run_dir = "k"

[[steps]]
id = "kinds"
call = "stage_steps:kinds"
""")
    r = fleet("step", str(suite), "kinds", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    got = seen(tmp_path / "k", "kinds")
    assert len(got) == 2, got  # fleet step's, then fleet run's
    want = dict(cores="tuple", gpus="tuple", placement="tuple", slot=["str", "tuple", "tuple", "int"],
                inputs="tuple", outputs="tuple", hashable=True)
    for x in got:
        assert {k: x[k] for k in want} == want, got
    assert_nothing_left(tmp_path / "k")


def test_a_step_that_restarts_whatever_it_finds_fails_after_twenty_restarts_naming_the_loop(tmp_path):
    # (it used to restart ~30 times a second for ever, an attempt-<n> directory each)
    r, run_dir = run(tmp_path, """
[[steps]]
id = "call"
call = "stage_steps:restart_always"
retries = 2

[[steps]]
id = "sh"
command = "echo some work > work.txt; test $(ls -d attempt-* 2>/dev/null | wc -l) -gt 25 || exit 4"
protocol = "steps"

[[steps]]
id = "after"
command = "true"
deps = ["call"]
""", timeout=240)
    assert r.returncode == 1, r.stdout + r.stderr
    for step in ("call", "sh"):
        ends = exits(run_dir, step)
        assert [e["outcome"] for e in ends] == ["restart"] * 21 + ["failed"], ends  # not retried
        assert "restart again after 20 restarts in this run" in ends[-1]["reason"], ends
        kept = sorted(p.name for p in (run_dir / "steps" / step).glob("attempt-*"))
        assert kept == sorted(f"attempt-{n}" for n in range(1, 21)), kept
    assert [x["restarts"] for x in seen(run_dir, "call")] == list(range(21))
    assert re.search(r"failed +call: it asked to restart again after 20", r.stdout), r.stdout
    assert not exits(run_dir, "after")
    assert_nothing_left(run_dir)
