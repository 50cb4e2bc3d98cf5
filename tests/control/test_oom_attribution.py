"""Whose OOM it was, through the real CLI and the kernel's real OOM killer (cgroup v1
here): a step the kernel took while inside its own memory, because the fleet's parent
cgroup ran out, is terminated, names its neighbours and is retried (not out_of_memory:
raising its memory would not help); and a step whose process the kernel killed at its
own limit, while the step itself exited 0, stays succeeded, its exit record and the
report saying what was killed. tests/node/test_oom_attribution.py has the same
judgement on written cgroup files, cgroup v2's among them."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, cgroup1_unwritable, completed, env, fleet, records, write_suite
from memory_steps import GROWER

from fleet.node import memlimit
from fleet.wire import events as E

pytestmark = pytest.mark.skipif(cgroup1_unwritable() is not None,
                                reason=f"no writable cgroup v1 memory controller: {cgroup1_unwritable()}")
HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]


@contextlib.contextmanager
def parent_cgroup(limit: int):
    """A v1 memory cgroup with `limit`, below this process's own; afterwards whatever is
    still in it (or in cgroups made below it) is killed and all of it removed."""
    own = memlimit._own_cgroup(v2=False)
    path = os.path.join(own, f"fleet-test-oom.{os.getpid()}")
    os.mkdir(path)
    try:
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        yield path
    finally:
        deadline = time.monotonic() + 30
        while os.path.exists(path) and time.monotonic() < deadline:
            for d, _, _ in os.walk(path, topdown=False):
                memlimit.kill_members(d)
                memlimit.remove(d)
            time.sleep(0.05)
        assert not os.path.exists(path), f"{path} could not be removed"


def exits(run_dir: Path, step: str) -> list[E.Exit]:
    return [e for e in records(run_dir) if isinstance(e, E.Exit) and e.step == step]


def test_a_step_the_kernel_took_inside_its_own_memory_when_a_parent_cgroup_ran_out_is_terminated_and_retried(tmp_path):
    ready = tmp_path / "hogged"
    grower = [sys.executable, "-c", GROWER, str(ready), "800"]  # after the victim's 320 MiB, 50 MiB a process
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "parent-oom"
run_dir = "run"
[[steps]]
id = "victim"
call = "memory_steps:hog_then_say"
args = {{mib = 320, ready = {json.dumps(str(ready))}, hold = 10}}
memory = "340MiB"
retries = 1
[[steps]]
id = "grower"
command = {json.dumps(grower)}
""")
    run_dir = tmp_path / "run"
    with parent_cgroup(700 << 20) as parent:
        # The fleet (coordinator, agent, its steps) runs in the parent: 700 MiB for all of
        # it (and 350 MiB, half the node, for the grower, declaring none). The grower's
        # processes take what the victim left, and the OOM killer the largest process:
        # the victim (320 MiB), within its own 340 MiB.
        argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(parent, "cgroup.procs"),
                sys.executable, "-m", "fleet", "run", str(suite), "--nodes", "1", *HB]
        r = completed(argv, timeout=150, cwd=tmp_path, env={**env(), "FLEET_MEMLIMIT": "cgroup1"}, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    first, *again = exits(run_dir, "victim")
    assert first.outcome == "terminated", first  # before: out_of_memory, final
    assert first.memory_peak and first.memory_peak < 339 << 20, first
    assert first.oom_kills == 1, first
    assert first.reason.startswith("killed by SIGKILL; the kernel's OOM killer took 1 process of it within its "
                                   "memory 340MiB"), first.reason
    assert "the node or a parent cgroup ran out; running beside it on " in first.reason, first.reason
    assert [n["step"] for n in first.neighbours] == ["grower"], first
    assert [e.attempt for e in again] == [2], again  # retried
    assert any(isinstance(e, E.Retry) and e.step == "victim" for e in records(run_dir))
    assert_nothing_left(run_dir)


def test_a_step_that_exits_0_after_the_kernel_killed_a_process_of_it_at_its_limit_succeeds_and_says_so(tmp_path):
    two = "python3 -c \\\"b=b'x'*(100<<20);import time;time.sleep(4)\\\""
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "child-oom"
run_dir = "run"
[[steps]]
id = "pair"
command = "{two} & {two} & wait; wait"
memory = "128MiB"
""")
    r = fleet("run", str(suite), "--nodes", "1", *HB, cwd=tmp_path, timeout=120,
              environ={"FLEET_MEMLIMIT": "cgroup1"})
    assert r.returncode == 0, r.stdout + r.stderr
    # fleet run says it too (before 2026-12-06 its line was a bare "succeeded  pair").
    assert "]  succeeded  pair: the kernel killed " in r.stdout, r.stdout
    run_dir = tmp_path / "run"
    [pair] = exits(run_dir, "pair")
    assert pair.outcome == "succeeded", pair
    assert pair.oom_kills and pair.oom_kills >= 1, pair  # before: nothing said
    assert pair.reason.startswith("the kernel killed "), pair.reason
    assert "of it at its memory 128MiB (cgroup v1 memory.limit_in_bytes; used 128MiB)" in pair.reason, pair.reason
    report = fleet("report", str(run_dir), cwd=tmp_path, timeout=60)
    assert ("note: 1 attempt(s) succeeded though the kernel's OOM killer took a process of theirs "
            "(their exit records' reason says which and where): pair (attempt 1)") in report.stdout, report.stdout
    assert_nothing_left(run_dir)
