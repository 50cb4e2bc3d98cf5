"""The pipes between an agent and its zygote never hold both up: a turn that hands a
node more launches than the pipe holds, while the zygote writes back more reports than
the other pipe holds, just works (fleet.node.zygotepipe; the limits audit's F3: on a
node of 128 cores, 128 quick steps of 400-character ids, the agent and its zygote each
blocked in its write to the other, and every step of the node ended lost).

A 2-core node reaches those sizes here with pipes of one page (FLEET_TEST_PIPE_BYTES)
and a deep window: 60 steps of ~1,600-character ids handed to it at once, each ending
at once and starting the next. Through the real CLI."""

from __future__ import annotations

import sys

import pytest

from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")

STEPS = 60
LONG = "/".join(["p" * 200] * 8)  # (path parts under NAME_MAX: a step's directory is named by its id)


def test_many_launches_and_many_quick_exits_at_once_over_one_page_pipes_all_succeed(tmp_path):
    tag = str(tmp_path)
    write_suite(tmp_path / "s.toml", f"""
[suite]
name = "pipes"
run_dir = "run"

[[steps]]
id = "{LONG}/s{{i}}"
array = "0-{STEPS - 1}"
command = "true # {tag}"
""")
    r = fleet("run", "s.toml", "--nodes", "1", "--window", str(STEPS), "--window-depth", str(STEPS),
              cwd=tmp_path, timeout=150, environ={"FLEET_TEST_PIPE_BYTES": "4096"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ev = events(tmp_path / "run")
    exits = [e for e in ev if e["kind"] == "exit"]
    assert sorted(e["step"] for e in exits) == sorted(f"{LONG}/s{i}" for i in range(STEPS))
    assert all(e["outcome"] == "succeeded" and e["attempt"] == 1 for e in exits), \
        [(e["step"][-4:], e["outcome"], e["attempt"]) for e in exits if e["outcome"] != "succeeded"]
    assert sum(e["kind"] == "queued" for e in ev) > STEPS // 2  # (handed ahead: the turn's launches were many)
    assert_nothing_left(tmp_path / "run", tag)
