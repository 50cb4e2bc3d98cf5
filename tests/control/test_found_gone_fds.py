"""A coordinator short of file descriptors (fleet.control.foundgone.read, fleet.wire.fdlimit):
real `fleet run` processes, their open-file limit set for real (setrlimit before the
fleet starts, prlimit on the running coordinator).

Before 2026-12-07 (evening) a coordinator that hit its limit (EMFILE: a fleet of ~1,000
nodes under the common soft limit of 1,024) took the failed open of its gone record for
being found gone by another fleet: it stopped its steps, recorded nothing and went
down, alone on its run directory. The evidence is the fleet's exit, its records and its
log, never seconds."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from fleetharness import assert_nothing_left, env, finish, wait_for, write_suite

HB = ["--heartbeat", "0.5", "--heartbeat-timeout", "2"]


def suite(tmp_path: Path, n: int, go: Path) -> Path:
    """n steps that each run until `go` exists."""
    return write_suite(tmp_path / "s.toml", f"""[suite]
name = "fds"
run_dir = "run"
[[steps]]
id = "w/{{i}}"
array = "0-{n - 1}"
command = "while [ ! -e {go} ]; do sleep 0.05; done"
""")


def start(tmp_path: Path, *args: str, soft: int | None = None) -> subprocess.Popen:
    """`fleet` in its own process group, its soft open-file limit set to `soft` first."""
    def limit():
        if soft is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=tmp_path, env=env(), preexec_fn=limit,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def lease(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / ".fleet" / "lease").read_text())
    except (OSError, ValueError):
        return {}


def started_steps(run_dir: Path) -> int:
    return sum(1 for p in (run_dir / "steps" / "w").glob("*/log")) if (run_dir / "steps" / "w").exists() else 0


def soft_limit(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/limits").read_text().splitlines() if x.startswith("Max open files"))
    return int(line.split()[3])


def test_a_coordinator_out_of_file_descriptors_does_not_take_itself_for_found_gone_and_its_steps_end_well(
        tmp_path):
    go = tmp_path / "go"
    s = suite(tmp_path, 3, go)
    run_dir = tmp_path / "run"
    p = start(tmp_path, "run", str(s), "--nodes", "1", "--stale-after", "4", *HB)
    try:
        wait_for(lambda: lease(run_dir).get("pid") and started_steps(run_dir) >= 1, 60, "a step running")
        pid = lease(run_dir)["pid"]
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        # Not one descriptor more: any open() of the coordinator's fails with EMFILE.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")), hard))
        lease_file = run_dir / ".fleet" / "lease"
        seen = [lease_file.stat().st_mtime_ns]

        def refreshed_twice_or_ended() -> bool:  # each refresh first looks for its gone record
            m = lease_file.stat().st_mtime_ns if lease_file.exists() else 0
            if m != seen[-1]:
                seen.append(m)
            return len(seen) >= 3 or p.poll() is not None
        wait_for(refreshed_twice_or_ended, 60, "two refreshes of the lease at the limit")
        assert p.poll() is None, finish(p, 30)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (hard, hard))
        go.touch()
        rc, out, err = finish(p, 90)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.communicate(timeout=30)
    log = (run_dir / "coordinator.log").read_text()
    assert rc == 0, (out, err, log[-3000:])
    assert "found gone" not in log and "found gone" not in err, log[-3000:]
    assert all((run_dir / "steps" / "w" / str(i) / ".fleet" / "done.json").exists() for i in range(3))
    assert not (run_dir / ".fleet" / "gone").exists()
    assert_nothing_left(run_dir)


def test_a_coordinator_raises_its_soft_open_file_limit_for_its_nodes_and_says_so(tmp_path):
    go = tmp_path / "go"
    go.touch()
    s = suite(tmp_path, 1, go)
    run_dir = tmp_path / "run"
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    from fleet.wire import fdlimit
    need = fdlimit.for_nodes(2)
    assert hard == resource.RLIM_INFINITY or hard >= need, "this machine's hard limit leaves nothing to raise"
    p = start(tmp_path, "run", str(s), "--nodes", "2", soft=64)
    try:
        wait_for(lambda: lease(run_dir).get("pid") or p.poll() is not None, 60, "the coordinator up")
        pid = lease(run_dir).get("pid")
        limit = soft_limit(pid) if pid and Path(f"/proc/{pid}").exists() else None
        rc, out, err = finish(p, 90)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.communicate(timeout=30)
    assert rc == 0, (out, err)
    assert limit in (None, need), limit  # (None: it had ended before /proc was read; the log says it)
    assert f"open files: soft limit raised from 64 to {need}" in (run_dir / "coordinator.log").read_text()
