"""A coordinator killed with -9 while its (local) agents start: every agent, zygote,
watcher and step ends within seconds, not at the agents' join timeout (120 s).

An agent asks to die with its parent (PR_SET_PDEATHSIG) only once its interpreter
started and its imports ran; a coordinator killed before that sends it nothing. So a
local agent is told its coordinator's pid (--parent-pid) and stops at once if, having
asked, its parent is another (fleet.node.agent.main). Real `fleet run --nodes 2`, the
coordinator SIGKILLed at several moments of its agents' start; what is left is read from
the process table: every process whose environment carries this test's tag."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fleetharness import env, events, write_suite
from tagged import kill_tagged, tagged

TAG_VAR = "KILLED_EARLY_TAG"  # (the test's own: every process of its fleet inherits it)
LEFT_WITHIN_S = 20.0  # well under the agents' 120 s join timeout, their only end before the fix

SUITE = '''[suite]
name = "early"
run_dir = "{run_dir}"

[[steps]]
id = "s/{{i}}"
array = "1-4"
command = "sleep 30"
'''


def _started(tag: str, module: str) -> bool:
    """Whether a process of this test's fleet runs ``module`` (its command line read first: cheap)."""
    for p in psutil.process_iter(["cmdline"]):
        try:
            if module in " ".join(p.info["cmdline"] or []) and p.environ().get(TAG_VAR) == tag:
                return True
        except psutil.Error:
            continue
    return False


def _tagged(tag: str) -> dict[int, str]:
    return tagged(TAG_VAR, tag)


def _an_agent_started(run_dir: Path, tag: str) -> bool:
    return _started(tag, "fleet.node.agent")


def _a_zygote_started(run_dir: Path, tag: str) -> bool:
    return _started(tag, "fleet.node.zygote")


def _a_node_joined(run_dir: Path, tag: str) -> bool:
    return (run_dir / "events.jsonl").exists() and any(e["kind"] == "node_joined" for e in events(run_dir))


@pytest.mark.parametrize("moment", [_an_agent_started, _a_zygote_started, _a_node_joined],
                         ids=["an_agent_started", "a_zygote_started", "a_node_joined"])
def test_a_coordinator_killed_with_minus_9_as_its_agents_start_leaves_no_process_of_its_fleet(tmp_path, moment):
    tag = os.urandom(8).hex()
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "suite.toml", SUITE.format(run_dir=run_dir))
    p = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--nodes", "2"], cwd=tmp_path,
                         env={**env(), TAG_VAR: tag}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        # Looked at as often as can be: the first moment lasts as long as an agent's imports.
        deadline = time.monotonic() + 60
        while not moment(run_dir, tag):
            assert p.poll() is None and time.monotonic() < deadline, f"no {moment.__name__}: {p.communicate()[0]}"
            time.sleep(0.002)
        coordinator = [pid for pid, cmd in _tagged(tag).items() if "fleet.control.coordinator" in cmd]
        assert len(coordinator) == 1, _tagged(tag)
        os.kill(coordinator[0], signal.SIGKILL)
        out, _ = p.communicate(timeout=60)
        deadline = time.monotonic() + LEFT_WITHIN_S
        while (left := _tagged(tag)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"left {LEFT_WITHIN_S} s after the coordinator's SIGKILL:\n" + "\n".join(
            f"{pid} {cmd}" for pid, cmd in left.items()) + f"\nfleet run said:\n{out}"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
        kill_tagged(TAG_VAR, tag)  # (this test's fleet's alone: they carry its tag)
