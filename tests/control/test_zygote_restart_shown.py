"""A node's zygote restarted by its agent is shown where a user looks: `fleet status`
names the node and how many times (its nodes part), `fleet report` (text, HTML and
--json) too. Before 2026-12-07 only the agent log, coordinator.log and events.jsonl said it."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest
from fleetharness import assert_nothing_left, events, finish, fleet, spawn, wait_for, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def of(kind: str, run_dir) -> list[dict]:
    return [e for e in events(run_dir) if e["kind"] == kind]


def test_a_restarted_zygote_is_named_by_fleet_status_and_by_the_report(tmp_path):
    flag = tmp_path / "go"
    # Steps that end once the test says so: status is asked while the fleet still runs.
    body = "".join(f'\n[[steps]]\nid = "s{i}"\ncommand = "while [ ! -e {flag} ]; do sleep 0.1; done"\n'
                   f'cores = 1\nretries = 1\n' for i in range(3))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\nrun_dir = "run"\n' + body)
    run_dir = tmp_path / "run"
    p = spawn("run", str(suite), "--nodes", "1", cwd=tmp_path)
    try:
        joined = wait_for(lambda: of("node_joined", run_dir), 60, "the node to join")[0]
        wait_for(lambda: of("started", run_dir), 60, "a step running")
        os.kill(joined["zygote_pid"], signal.SIGKILL)
        wait_for(lambda: of("zygote_restarted", run_dir), 60, "the zygote's restart")
        st = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert st.returncode == 0, st.stdout + st.stderr
        assert "its fork server (zygote) restarted 1 time(s)" in st.stdout, st.stdout
        js = json.loads(fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
        assert js["nodes_summary"]["zygote_restarts"] == 1, js["nodes_summary"]
        assert [n.get("zygote_restarts") for n in js["nodes"]] == [1], js["nodes"]
        flag.touch()
        rc, out, err = finish(p, 120)
    finally:
        flag.touch()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
    assert rc == 0, out + err
    text = fleet("report", str(run_dir), cwd=tmp_path, timeout=60).stdout
    assert "its fork server (zygote) restarted 1 time(s), the last was killed by SIGKILL" in text, text
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert [r["how"] for r in rep["nodes"]["node1"]["zygote_restarts"]] == ["was killed by SIGKILL"], rep["nodes"]
    page = tmp_path / "r.html"
    fleet("report", str(run_dir), "--html", str(page), cwd=tmp_path, timeout=60)
    assert "restarted 1 time(s), the last was killed by SIGKILL" in page.read_text(), "not on the page"
    assert_nothing_left(run_dir)
