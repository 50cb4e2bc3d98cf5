"""The control channel: CURVE on both coordinator sockets, the 0600 connection file,
and protocol versions checked at join. Real `fleet up`, real ZeroMQ peers.

Every "gets nothing" test has a twin that uses the very same raw peer with the right
keys and does get an answer, so silence means refusal, not a broken test peer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import zmq

from fleet.wire import messages as P
from fleet.control.client import Client

import rawpeer as R
from fleetharness import events, fleet, spawn, wait_for

SILENCE_S = 3.0  # how long a refused peer waits for an answer that must not come


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    """One fleet for the tests that must leave it unchanged (each checks that it did)."""
    base = tmp_path_factory.mktemp("sec")
    run_dir = base / "run"
    conn = R.up(run_dir, base)
    yield base, run_dir, conn
    R.down(run_dir, base)
    R.assert_gone(run_dir)


def snapshot(conn, run_dir: Path) -> dict:
    """Everything a refused peer could have changed, as the coordinator and its event log say."""
    st = R.status(conn)
    keep = ("pid", "up_since", "counts", "submissions", "running", "running_total", "failures", "dropped")
    # The agents' own memory samples (fleet.control.nodememory) change with time, not with a peer.
    nodes = [{k: v for k, v in n.items() if k != "memory_used"} for n in st["nodes"]]
    return {**{k: st[k] for k in keep}, "nodes": nodes,
            "events": [e["kind"] for e in events(run_dir) if e["kind"] != "node_memory"]}


def marker_suite(base: Path, name: str) -> tuple[Path, Path]:
    """A suite whose only step leaves a file: proof, if it appears, that a submit got through."""
    marker = base / f"{name}.marker"
    suite = base / f"{name}.toml"
    suite.write_text(f'[suite]\nname = "{name}"\n[[steps]]\nid = "mark"\ncommand = ["touch", "{marker}"]\n')
    return suite, marker


# -- the client socket -------------------------------------------------------------------------

def test_the_connection_files_keys_complete_the_handshake_and_get_answers(up):
    base, run_dir, conn = up
    c = Client(conn)
    try:
        st = c.ask(P.Status(), timeout=10).status
    finally:
        c.close()
    assert [n["node"] for n in st["nodes"]] == ["node1", "node2"] and st["pid"] == conn.pid
    # The raw peer the refusal tests use, given the right keys, is answered too.
    s = R.dealer(conn.client, R.client_keys(conn))
    try:
        s.send(P.encode(P.Status()))
        reply = R.first_reply(s, 10)
    finally:
        s.close(0)
    assert isinstance(reply, P.StatusReply) and reply.status["pid"] == conn.pid


CLIENT_PEERS = {
    "no keys at all": lambda conn, run_dir: None,
    "a client key pair of its own": lambda conn, run_dir: R.random_keys(conn.server_key),
    "the client keys but a wrong server key": lambda conn, run_dir: (R.random_keys()[0], conn.client_public,
                                                                     conn.client_secret),
    "the agents' key pair": lambda conn, run_dir: R.agent_keys(run_dir),
}


@pytest.mark.parametrize("peer", list(CLIENT_PEERS))
def test_a_client_peer_without_the_client_keys_gets_no_answer_and_changes_nothing(up, peer):
    base, run_dir, conn = up
    keys = CLIENT_PEERS[peer](conn, run_dir)
    suite, marker = marker_suite(base, f"intruder-{list(CLIENT_PEERS).index(peer)}")
    before = snapshot(conn, run_dir)
    s = R.dealer(conn.client, keys)
    try:
        # What an intruder would want: to look, to run a command as the fleet's owner, to stop it.
        for msg in (P.Status(), P.Submit(str(suite)), P.Progress(1, 0), P.Down()):
            try:
                s.send(P.encode(msg), flags=zmq.NOBLOCK)
            except zmq.Again:
                pass  # no handshake, no pipe: the message cannot even leave (also a refusal)
        got = R.recv_within(s, SILENCE_S)
    finally:
        s.close(0)
    assert got == [], f"a peer with {peer} was answered: {got!r}"
    assert not marker.exists(), f"a peer with {peer} ran a command on the fleet"
    after = snapshot(conn, run_dir)
    assert after == before, f"a peer with {peer} changed the fleet:\n{R.dump(before)}\n{R.dump(after)}"


# -- the agent socket --------------------------------------------------------------------------

def intruder_join(node: str = "intruder") -> bytes:
    return P.encode(P.Join(node=node, host="elsewhere", cores=[0, 1], gpus=[], memory=2**30, pid=1,
                           zygote_pid=1, preload=[]))


AGENT_PEERS = {
    "no keys at all": lambda conn, run_dir: None,
    "an agent key pair of its own": lambda conn, run_dir: R.random_keys(conn.server_key),
    "the client key pair from the connection file": lambda conn, run_dir: R.client_keys(conn),
}


@pytest.mark.parametrize("peer", list(AGENT_PEERS))
def test_a_pretend_agent_without_the_agent_keys_is_not_admitted(up, peer):
    base, run_dir, conn = up
    keys = AGENT_PEERS[peer](conn, run_dir)
    before = snapshot(conn, run_dir)
    s = R.dealer(conn.agents, keys, identity=b"intruder")
    try:
        try:
            s.send(intruder_join(), flags=zmq.NOBLOCK)
            s.send(P.encode(P.Heartbeat("intruder")), flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # no handshake, no pipe: nothing can leave
        got = R.recv_within(s, SILENCE_S)
    finally:
        s.close(0)
    assert got == [], f"a pretend agent with {peer} was answered: {got!r}"
    after = snapshot(conn, run_dir)
    assert "intruder" not in [n["node"] for n in after["nodes"]]
    assert after == before, f"a pretend agent with {peer} changed the fleet:\n{R.dump(before)}\n{R.dump(after)}"


def test_the_agent_keys_reach_the_agent_socket_where_a_taken_node_name_is_rejected(up):
    """The positive twin of the test above: the same pretend agent, keyed, is heard."""
    base, run_dir, conn = up
    before = snapshot(conn, run_dir)
    s = R.dealer(conn.agents, R.agent_keys(run_dir))
    try:
        s.send(intruder_join("node1"))
        reply = R.first_reply(s, 10)
    finally:
        s.close(0)
    assert isinstance(reply, P.Reject) and "node1" in reply.reason, reply
    assert snapshot(conn, run_dir) == before


# -- protocol versions -------------------------------------------------------------------------

def test_a_join_of_another_protocol_version_gets_a_clear_error_naming_both_versions(up):
    base, run_dir, conn = up
    before = snapshot(conn, run_dir)
    s = R.dealer(conn.agents, R.agent_keys(run_dir))
    try:
        body = {f: getattr(P.Join("v2node", "h", [0], [], 1, 1, 1, []), f) for f in
                ("node", "host", "cores", "gpus", "memory", "pid", "zygote_pid", "preload")}
        s.send(R.raw({**body, "v": P.VERSION + 1, "type": "join"}))
        reply = R.first_reply(s, 10)
    finally:
        s.close(0)
    assert isinstance(reply, P.Error), reply
    assert f"protocol version {P.VERSION + 1}" in reply.reason and f"speaks {P.VERSION}" in reply.reason, reply.reason
    after = snapshot(conn, run_dir)
    assert "v2node" not in [n["node"] for n in after["nodes"]]
    assert after["counts"] == before["counts"] and after["nodes"] == before["nodes"]
    assert after["dropped"].get("bad:VersionMismatch", 0) == before["dropped"].get("bad:VersionMismatch", 0) + 1
    log = wait_for(lambda: (t := (run_dir / "coordinator.log").read_text()) and f"protocol version {P.VERSION + 1}" in t and t,
                   10, "the coordinator to log the mismatch")
    assert f"this fleet speaks {P.VERSION}" in log


def test_a_client_request_of_another_protocol_version_gets_a_clear_error(up):
    base, run_dir, conn = up
    s = R.dealer(conn.client, R.client_keys(conn))
    try:
        s.send(R.raw({"v": 0, "type": "status"}))
        reply = R.first_reply(s, 10)
    finally:
        s.close(0)
    assert isinstance(reply, P.Error) and "protocol version 0" in reply.reason and f"speaks {P.VERSION}" in reply.reason


# An agent and its zygote are one install of fleet, so one protocol version: an agent of
# another version is pretended by changing it in both processes.
SITECUSTOMIZE = """
import os, sys
if os.environ.get("FLEET_TEST_AGENT_PROTOCOL") and (
        "fleet.node.agent" in sys.orig_argv or "fleet.node.zygote" in sys.orig_argv):
    import fleet.wire.messages
    fleet.wire.messages.VERSION = int(os.environ["FLEET_TEST_AGENT_PROTOCOL"])
"""


def site_of_version(base: Path) -> Path:
    """A directory whose sitecustomize makes agents and zygotes speak FLEET_TEST_AGENT_PROTOCOL."""
    site = base / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return site


def test_a_real_agent_of_another_protocol_version_stops_at_once_naming_both_versions(up):
    base, run_dir, conn = up
    before = snapshot(conn, run_dir)
    tests = Path(__file__).parents[1]
    env = dict(os.environ, FLEET_CURVE=" ".join(R.agent_keys(run_dir)), FLEET_TEST_AGENT_PROTOCOL=str(P.VERSION + 1),
               PYTHONPATH=os.pathsep.join([str(site_of_version(base)), str(tests / "harness"), str(tests),
                                           str(tests.parent)]))
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "fleet.node.agent", "--connect", conn.agents,
                          "--node", "v2agent", "--cores", "0", "--memory", str(2**30), "--join-timeout", "60"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise AssertionError("an agent of another protocol version kept running (it hears only errors it "
                             "cannot read, and each keeps it alive):\n" + out)
    took = time.monotonic() - t0
    assert took < 20, f"it took {took:.1f} s to give up"
    assert f"protocol version {P.VERSION}" in out and f"speaks {P.VERSION + 1}" in out, out
    assert "Traceback" not in out, out
    after = snapshot(conn, run_dir)
    assert "v2agent" not in [n["node"] for n in after["nodes"]] and after["counts"] == before["counts"]
    assert R.status(conn)["pid"] == conn.pid
    # Its zygote went with it (an orphan would be adopted by this test process: see conftest).
    def orphaned_zygotes():
        out = []
        for c in psutil.Process().children():
            try:
                os.waitpid(c.pid, os.WNOHANG)
                if "fleet.node.zygote" in " ".join(c.cmdline()) and c.status() != psutil.STATUS_ZOMBIE:
                    out.append(c.pid)
            except (psutil.Error, ChildProcessError):
                pass
        return out
    wait_for(lambda: not orphaned_zygotes(), 15, "the mismatched agent's zygote to exit")


def test_fleet_up_with_agents_of_another_protocol_version_fails_fast_naming_both_versions(tmp_path, monkeypatch):
    site = site_of_version(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("FLEET_TEST_AGENT_PROTOCOL", str(P.VERSION + 1))
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    r = fleet("up", "--run-dir", str(run_dir), "--nodes", "2", "--timeout", "90", cwd=tmp_path, timeout=120)
    took = time.monotonic() - t0
    try:
        assert r.returncode != 0, r.stdout
        assert f"protocol version {P.VERSION + 1}" in r.stderr and f"speaks {P.VERSION}" in r.stderr, r.stderr
        assert took < 30, f"fleet up took {took:.0f} s to say so (the join timeout, not the mismatch)"
        assert not (run_dir / "fleet.json").exists()
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    R.assert_gone(run_dir)


# -- the connection file ---------------------------------------------------------------------------

def test_the_connection_file_is_0600_in_a_directory_only_its_owner_can_write_and_holds_the_keys(up):
    base, run_dir, conn = up
    st = (run_dir / "fleet.json").stat()
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.getuid()
    assert run_dir.stat().st_mode & 0o022 == 0, f"run dir mode {run_dir.stat().st_mode & 0o777:04o}"
    assert conn.server_key and conn.client_public and conn.client_secret and conn.version == P.VERSION
    assert conn.pid and conn.host and conn.started and conn.client.startswith("tcp://127.0.0.1:")
    # The agents' keys are not in it: a client key pair is all it gives.
    agent_public = R.agent_keys(run_dir)[1]
    assert agent_public not in (run_dir / "fleet.json").read_text()


def test_a_second_fleet_up_in_the_same_run_dir_refuses_and_leaves_the_first_alone(up):
    base, run_dir, conn = up
    before = snapshot(conn, run_dir)
    text = (run_dir / "fleet.json").read_text()
    r = fleet("up", "--run-dir", str(run_dir), "--nodes", "2", cwd=base, timeout=60)
    assert r.returncode != 0 and "already up" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    # Whose fleet it is, before the hint that would stop it (it may be another job's, at work).
    message = " ".join(r.stderr.split())
    assert f"already up in {run_dir}: coordinator pid {conn.pid} on {conn.host}, up since " in message, message
    assert conn.job == "" and " job " not in message.split(". If")[0], message  # (this test is no batch job)
    assert "stop it (fleet down --run-dir" in message and "only if nothing needs it any more" in message, message
    assert (run_dir / "fleet.json").read_text() == text
    assert snapshot(conn, run_dir) == before


def test_two_fleet_ups_racing_for_one_run_dir_leave_exactly_one_fleet(tmp_path):
    """Both find no connection file and start a coordinator; the file is created
    exclusively, so one wins; the other must stop (not run on, unreachable) and say so."""
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    ups = [spawn("up", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path) for _ in range(2)]
    try:
        results = []
        for p in ups:
            out, err = p.communicate(timeout=90)
            results.append((p.returncode, out, err))
        took = time.monotonic() - t0
        codes = sorted(r[0] for r in results)
        assert codes[0] == 0, results
        conn = R.conn_of(run_dir)
        # Every coordinator this run dir ever had, but the winner, is gone.
        coords = {e["pid"] for e in events(run_dir) if e["kind"] == "fleet_starting"}
        if codes == [0, 0]:
            # The second found the first's file before starting a coordinator of its own.
            assert len(coords) == 1 and all(f"pid {conn.pid}" in r[1] for r in results), results
        elif "still coming up" in results[0][2] + results[1][2]:
            # The second found the first's coordinator coming up (holding the lease): it
            # started none of its own, and named that one.
            loser = next(r for r in results if r[0] != 0)
            assert f"a fleet still coming up, coordinator pid {conn.pid}" in loser[2], loser
            assert len(coords) == 1, coords
        else:
            loser = next(r for r in results if r[0] != 0)
            assert "already up" in loser[2] and "Traceback" not in loser[2], loser
            assert f"coordinator pid {conn.pid} on {conn.host}" in " ".join(loser[2].split()), loser
            assert len(coords) == 2, coords
            # The loser stopped by itself, saying why (not killed after a wait by its `fleet up`).
            assert [e["reason"] for e in events(run_dir) if e["kind"] == "fleet_failed"] == [
                "another fleet is up in this run directory"], events(run_dir)
            assert took < 20, f"the race took {took:.0f} s to settle"
            wait_for(lambda: not R.living_pids(coords - {conn.pid}), 30, "the losing coordinator to stop")
        assert R.status(conn)["pid"] == conn.pid
        assert (run_dir / "fleet.json").exists()
    finally:
        for p in ups:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_a_connection_file_copy_that_others_can_read_or_write_is_refused_naming_its_mode(up, tmp_path, mode):
    base, run_dir, conn = up
    copy = tmp_path / "fleet.json"
    shutil.copyfile(run_dir / "fleet.json", copy)
    os.chmod(copy, mode)
    r = fleet("status", "--connection", str(copy), "--json", cwd=tmp_path, timeout=60)
    assert r.returncode != 0, r.stdout
    assert f"mode {mode:04o}" in r.stderr and "0600" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and f"mode {mode:04o}" in json.loads(r.stdout)["error"]


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_a_private_copy_of_the_connection_file_reaches_the_fleet(up, tmp_path, mode):
    base, run_dir, conn = up
    copy = tmp_path / "fleet.json"
    shutil.copyfile(run_dir / "fleet.json", copy)
    os.chmod(copy, mode)
    r = fleet("status", "--connection", str(copy), "--json", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f'"pid": {conn.pid}' in r.stdout


# `fleet down` is the exception since 2026-12-06: it stops such a fleet, through its lease,
# warning that its keys were exposed (test_connection_file_trouble.py).
@pytest.mark.parametrize("command", ["status", "up", "run"])
def test_every_command_but_down_refuses_a_run_dirs_connection_file_that_others_can_read(up, command):
    base, run_dir, conn = up
    suite, marker = marker_suite(base, "refused")
    args = {"status": ["status", "--run-dir", str(run_dir)],
            "up": ["up", "--run-dir", str(run_dir)], "run": ["run", str(suite), "--run-dir", str(run_dir)]}[command]
    path = run_dir / "fleet.json"
    os.chmod(path, 0o644)
    try:
        r = fleet(*args, cwd=base, timeout=60)
    finally:
        os.chmod(path, 0o600)
    assert r.returncode != 0, r.stdout
    assert "mode 0644" in r.stderr and "0600" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert not marker.exists()
    assert R.status(conn)["pid"] == conn.pid  # still up, untouched
