"""Two fleets on one run directory (two batch jobs' fleets: fleet.control.jobfleets)
share coordinator.log and the agents' logs: every line fleet writes there says which
fleet it is from (fleet.wire.logtag), and what points at the log names that fleet's
lines. Real fleets (local ones, each in a job faked by its environment), real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from fleetharness import assert_nothing_left, env, events, fleet, wait_for, write_suite

TAG = re.compile(r"\[([^\]\s]+-\d+-[0-9a-f]{6})\] ")


def job(n: int) -> dict:
    """The environment of a command of Slurm job n, whose fleets are local ones."""
    return {"SLURM_JOB_ID": str(n), "FLEET_MACHINE": "local"}


def fleet_ids(run_dir: Path) -> list[str]:
    return [e["fleet"] for e in events(run_dir) if e["kind"] == "fleet_starting"]


def tags(path: Path) -> list[str]:
    """The fleet each line of path says it is from ("" for a line that says none)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = TAG.search(line)
        out.append(m.group(1) if m and m.start() < 30 else "")
    return out


def test_two_fleets_on_one_run_directory_tag_each_line_of_the_shared_logs_and_a_lost_one_points_at_its_own(
        tmp_path):
    # Before: two fleets' lines interleaved in coordinator.log and agents/node1.log with
    # nothing saying whose they were, and "see coordinator.log" named the whole file.
    run_dir = tmp_path / "run"
    flag = tmp_path / "flag"
    waits = write_suite(tmp_path / "w.toml", '[suite]\nname = "w"\n[[steps]]\nid = "w"\n'
                                             f'command = "for i in $(seq 600); do test -e {flag} && exit 0; sleep 0.1; '
                                             f'done; exit 1"\n')
    quick = write_suite(tmp_path / "q.toml", '[suite]\nname = "q"\n[[steps]]\nid = "q"\ncommand = "true"\n')
    # Job 391: a fleet run that embeds its own fleet; job 392: fleet up, a suite, fleet down.
    first = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(waits), "--run-dir", str(run_dir)],
                             cwd=tmp_path, env={**env(), **job(391)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        wait_for(lambda: any(e["kind"] == "started" for e in events(run_dir)), 60, "job 391's step running")
        fleet("up", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90, environ=job(392))
        ran = fleet("run", str(quick), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90, environ=job(392))
        assert ran.returncode == 0, (ran.stdout, ran.stderr)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90, environ=job(392))
        # Job 391's coordinator is killed: fleet run names its lines of the shared log.
        [embedded] = run_dir.glob("fleet-*.json")
        pid = json.loads(embedded.read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        out, err = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate(timeout=30)
    assert first.returncode == 5, (out, err)
    mine = f"[{socket.gethostname()}-{pid}-"
    assert f"{run_dir / 'coordinator.log'} (its lines tagged {mine}...])" in err, err
    ids = fleet_ids(run_dir)
    assert len(ids) == 2 and ids[0].startswith(mine[1:]), ids
    for log in (run_dir / "coordinator.log", run_dir / "agents" / "node1.log"):
        said = tags(log)
        assert set(said) == set(ids), (log, set(said), ids, log.read_text())  # every line tagged, both fleets'
    assert_nothing_left(run_dir)
