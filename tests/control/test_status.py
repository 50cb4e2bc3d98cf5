"""`fleet status` (--json, text, --watch, --via, --ssh through a real sshd) and how
`fleet run` reports progress on a terminal and elsewhere. Real fleets, real processes.

The --ssh tests start Debian's openssh-server on a spare port of 127.0.0.1 with a host
key and an authorized key generated for the test; they skip, saying why, where sshd is
not installed or cannot start. The authorized key carries a forced command that runs
the client's command from a directory of the test (the "login node's home"), so a
relative --run-dir names a file that exists only on the far side of ssh: that is how
the fetch of a remote connection file is tested on one machine.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

import rawpeer as R
from fleetharness import env as fleet_env, events, fleet, records, spawn, wait_for

from fleet.control.client import Client, find
from fleet.wire import events as E
from fleet.wire import messages as P


# -- helpers -----------------------------------------------------------------------------------

def read_until(fd: int, pred, timeout: float, what: str) -> bytes:
    """Read fd (a pipe or a pty master) until pred(everything so far) holds."""
    buf = b""
    deadline = time.monotonic() + timeout
    while not pred(buf):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; got:\n{buf.decode(errors='replace')}")
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the pty's other side is closed
                chunk = b""
            if not chunk:
                if pred(buf):
                    break
                raise AssertionError(f"end of output while waiting for {what}; got:\n{buf.decode(errors='replace')}")
            buf += chunk
    return buf


def kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait(timeout=30)


def status_json(*args: str, cwd: Path) -> dict:
    r = fleet("status", *args, "--json", cwd=cwd, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def idle_fleet(tmp_path_factory):
    """A fleet with nothing to do, for the tests that only look. Its run dir is
    HOME/run, where HOME is the pretend login node's home of the sshd tests."""
    base = tmp_path_factory.mktemp("status")
    home = base / "home"
    home.mkdir()
    run_dir = home / "run"
    conn = R.up(run_dir, base)
    yield base, run_dir, conn
    R.down(run_dir, base)
    R.assert_gone(run_dir)


# -- during a run and after ------------------------------------------------------------------

def test_status_json_during_a_run_lists_running_steps_with_node_cores_and_elapsed_and_after_counts_all(tmp_path):
    run_dir = tmp_path / "run"
    R.up(run_dir, tmp_path)
    suite = R.call_suite(tmp_path / "s.toml", "watched", 6, 4.0)  # long enough to be seen twice under load
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        wait_for(lambda: len([e for e in records(run_dir) if isinstance(e, E.Started)]) >= 2, 60, "two running steps")
        st = status_json("--run-dir", str(run_dir), cwd=tmp_path)
        assert st["counts"].get("running") == 2 and st["running_total"] == 2, st["counts"]
        assert sum(st["counts"].values()) == 6 and st["counts"].get("succeeded", 0) <= 2, st["counts"]
        assert sorted(r["node"] for r in st["running"]) == ["node1", "node2"], st["running"]
        for r in st["running"]:
            assert re.fullmatch(r"nap/[1-6]", r["step"]) and r["cores"] == 1 and r["attempt"] == 1
            assert 0 <= r["elapsed_s"] < 30
        assert [(n["node"], n["alive"], n["cores_busy"], n["cores"]) for n in st["nodes"]] == [
            ("node1", True, 1, 1), ("node2", True, 1, 1)]
        [sub] = st["submissions"]
        assert sub["steps"] == 6 and sub["finished"] < 6 and sub["suite"].endswith("s.toml")
        assert st["up_since"] <= time.time() and st["pid"] > 0 and st["run_dir"] == str(run_dir.resolve())
        # The coordinator's own memory, as the kernel counts it, and its heap given back (fleet.control.heap).
        loop, seen = st["loop"], psutil.Process(st["pid"]).memory_info().rss
        assert 0 < loop["rss"] <= loop["peak_rss"] and abs(loop["rss"] - seen) < seen / 2, (loop, seen)
        assert loop["heap_trims"] >= 1 and loop["heap_trim_s"] >= 0, loop
        # Elapsed time moves on for a step that is still running (asked in this process: no
        # second command to start, while the steps' 4 s run out on a loaded machine).
        time.sleep(0.5)
        client = Client(find(run_dir))
        try:
            again = {r["step"]: r["elapsed_s"] for r in client.ask(P.Status(), timeout=30).status["running"]}
        finally:
            client.close()
        assert any(again.get(r["step"], 0) > r["elapsed_s"] for r in st["running"]), (st["running"], again)

        out, err = runner.communicate(timeout=120)
        assert runner.returncode == 0, out + err
        st = status_json("--run-dir", str(run_dir), cwd=tmp_path)
        assert st["counts"] == {"succeeded": 6} and st["running"] == [] and st["running_total"] == 0
        assert [(s["steps"], s["finished"]) for s in st["submissions"]] == [(6, 6)]
        assert all(n["cores_busy"] == 0 and n["memory_held"] == 0 for n in st["nodes"])
        assert st["failures"] == []
    finally:
        kill_group(runner)
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)


def test_status_says_when_the_coordinator_reads_its_nodes_reports_late(tmp_path):
    """Steps that end while the coordinator is stopped are read late: status says how late."""
    run_dir = tmp_path / "run"
    R.up(run_dir, tmp_path)
    gate = tmp_path / "go"  # (the steps wait for it: made once the coordinator is stopped)
    suite = R.call_suite(tmp_path / "s.toml", "late", 4, 1.0, gate=gate)  # two run, two queued behind them
    client = Client(find(run_dir))
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    coordinator = None
    try:
        coordinator = psutil.Process(json.loads((run_dir / "fleet.json").read_text())["pid"])
        wait_for(lambda: len([e for e in records(run_dir) if isinstance(e, E.Started)]) >= 2, 60, "two running steps")
        age = client.ask(P.Status(), timeout=30).status["loop"]["report_age_s"]
        assert age is None or age < 2.0, age  # (none read yet, or read as they come)
        coordinator.suspend()
        gate.touch()  # every step ends only now, while it is stopped (queued ones start without it)

        def ended_long_ago() -> bool:  # (by the steps' own records of their ends: fleet_steps.nap)
            try:
                ends = [json.loads(p.read_text())["end"] for p in run_dir.glob("**/nap.json")]
            except (OSError, ValueError):  # (one being written)
                return False
            return len(ends) == 4 and time.time() - max(ends) >= 3.5
        wait_for(ended_long_ago, 60, "every step to end, the last 3.5 s ago, the coordinator stopped")
        coordinator.resume()
        wait_for(lambda: len([e for e in records(run_dir) if isinstance(e, E.Exit)]) == 4, 60, "the four exits")
        st = status_json("--run-dir", str(run_dir), cwd=tmp_path)
        assert st["loop"]["report_age_s"] >= 2.0, st["loop"]  # (the last one ended >= 3.5 s before it was read)
        text = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).stdout
        assert re.search(r"BEHIND: the last step end read came \d+\.\ds after the step ended", text), text
        out, err = runner.communicate(timeout=120)
        assert runner.returncode == 0, out + err
    finally:
        client.close()
        if coordinator is not None and coordinator.is_running():
            coordinator.resume()
        kill_group(runner)
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)


def test_plain_status_shows_nodes_steps_by_state_running_steps_suite_progress_and_failures(tmp_path):
    run_dir = tmp_path / "run"
    R.up(run_dir, tmp_path)
    suite = tmp_path / "s.toml"
    suite.write_text("""
[suite]
name = "texty"
[[steps]]
id = "broken"
command = ["sh", "-c", "exit 3"]
[[steps]]
id = "long/{i}"
array = "1-3"
call = "fleet_steps:nap"
args = { seconds = 30 }
deps = ["broken-done"]
[[steps]]
id = "broken-done"
command = ["true"]
""")
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        wait_for(lambda: len([e for e in records(run_dir) if isinstance(e, E.Started)]) >= 4, 60,
                 "the short steps and two long ones to start")
        wait_for(lambda: len([e for e in records(run_dir) if isinstance(e, E.Exit)]) >= 2, 60, "the short steps to end")
        r = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stderr
        text = r.stdout
        print(text)
        assert f"fleet in {run_dir.resolve()}: up " in text
        assert re.search(r"coordinator pid \d+, memory \S+ \(peak \S+\)\n", text), text
        assert re.search(r"node1 +cores +1/1 +gpus 0/0 +memory held \S+ of \S+(, used \S+)?(; limits: .+)?\n", text), text
        # The third long step is queued on a node behind a running one (fleet.core.window).
        assert re.search(r"steps: .*queued 1.*running 2.*succeeded 1.*failed 1", text), text
        assert re.search(r"suite .*s\.toml: 2/5 finished \(40%\)", text), text
        assert "running (2):" in text and re.search(r"long/[123] +on node[12] +1 core +\d+s", text), text
        assert re.search(r"recent failures:\n  failed +broken: ", text), text
        assert "\033" not in text  # no terminal control codes without --watch
    finally:
        kill_group(runner)
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)


def test_status_says_why_each_kind_of_ready_step_has_not_started(tmp_path):
    run_dir = tmp_path / "run"
    R.up(run_dir, tmp_path)  # two nodes of one core
    suite = R.call_suite(tmp_path / "s.toml", "why", 6, 30)
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        # Two run and two are handed to the nodes ahead (queued): two are left ready.
        st = wait_for(lambda: (s := json.loads(fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path,
                                                     timeout=60).stdout))["counts"].get("ready") == 2 and s, 60,
                      "two steps ready behind the running and queued ones")
        [head] = st["ready"]
        assert head["behind"] == 1 and head["cause"] == "cores" and head["reason"] == "needs 1 core, 0 free", head
        assert head["ready_s"] >= 0 and st["reservations"] == []
        # The two queued ones: one on each node, each behind the step running there.
        running = {r["step"]: r["node"] for r in st["running"]}
        assert len(st["queued"]) == 2 and {q["node"] for q in st["queued"]} == {"node1", "node2"}, st["queued"]
        assert all(running[q["after"]] == q["node"] for q in st["queued"]), (st["queued"], running)
        text = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).stdout
        assert "ready, not started (2), the first of each kind of step:" in text, text
        assert "queued on their nodes (2), each to start there when the step it is behind ends:" in text, text
        for q in st["queued"]:
            assert re.search(rf"\n  {re.escape(q['step'])} +on {q['node']} +after {re.escape(q['after'])}\n", text), text
        assert re.search(rf"\n  {re.escape(head['step'])} +ready \d+s  needs 1 core, 0 free  \(\+1 more like it\)\n",
                         text), text
    finally:
        kill_group(runner)
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)


def test_status_names_the_steps_held_back_because_they_would_end_after_the_drain_point(tmp_path):
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--walltime", "1h", "--drain-before", "10m",
          cwd=tmp_path, check=True, timeout=90)
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "late"\n[[steps]]\nid = "long/{i}"\narray = "1-7"\ncommand = "true"\n'
                     'estimate = 7200\n[[steps]]\nid = "quick"\ncommand = "true"\nestimate = 1\n')
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        a = wait_for(lambda: (s := _status(run_dir, tmp_path).get("allocation") or {}).get("held") == 7 and s,
                     60, "the seven long steps held back")
        assert [h["step"] for h in a["held_steps"]] == [f"long/{i}" for i in range(1, 8)]
        assert re.fullmatch(r"expected to take 7200 s \(estimate\), \d+ s left before the drain point",
                            a["held_steps"][0]["reason"]), a
        text = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).stdout
        assert "  7 steps held back, not started: expected to end after the drain point\n    long/1: expected to take 7200 s" in text, text
        assert "    long/5: " in text and "long/6:" not in text and "    ... and 2 more\n" in text, text
    finally:
        kill_group(runner)
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)


def _status(run_dir: Path, cwd: Path) -> dict:
    return json.loads(fleet("status", "--run-dir", str(run_dir), "--json", cwd=cwd, timeout=60).stdout)


def test_plain_status_counts_repeated_submissions_of_one_suite_on_one_line(tmp_path):
    run_dir = tmp_path / "run"
    R.up(run_dir, tmp_path)
    suite = R.call_suite(tmp_path / "s.toml", "again", 2, 0.0)
    other = R.call_suite(tmp_path / "t.toml", "once", 1, 0.0)
    try:
        for s in (suite, other, suite, suite):  # the reruns skip what already succeeded
            r = fleet("run", str(s), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
        r = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = [l for l in r.stdout.splitlines() if l.startswith("  suite ")]
        assert lines == [f"  suite {suite.resolve()} (3 submissions): 6/6 finished (100%)",
                         f"  suite {other.resolve()}: 1/1 finished (100%)"], r.stdout
        assert len(status_json("--run-dir", str(run_dir), cwd=tmp_path)["submissions"]) == 4  # --json: each
    finally:
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)


def test_status_watch_on_a_terminal_redraws_in_place_until_interrupted(idle_fleet):
    base, run_dir, conn = idle_fleet
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "fleet", "status", "--run-dir", str(run_dir), "--watch",
                          "--interval", "0.2"], cwd=base, env=fleet_env(), stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=subprocess.PIPE, start_new_session=True)
    os.close(slave)
    try:
        clear = b"\033[H\033[2J"
        out = read_until(master, lambda b: b.count(clear) >= 3, 30, "three redraws")
        frames = [f for f in out.split(clear) if f.strip()]
        assert len(frames) >= 2 and all(b"nodes:" in f and b"node2" in f for f in frames[:2]), out
        assert out.startswith(clear)  # each frame replaces the last, from the top left
        os.kill(p.pid, signal.SIGINT)
        p.wait(timeout=15)
        err = p.stderr.read().decode()
        assert p.returncode == 0 and "Traceback" not in err, err
    finally:
        os.close(master)
        kill_group(p)


def test_status_watch_into_a_pipe_appends_plain_frames_until_interrupted(idle_fleet):
    base, run_dir, conn = idle_fleet
    p = spawn("status", "--run-dir", str(run_dir), "--watch", "--interval", "0.2", cwd=base)
    try:
        out = read_until(p.stdout.fileno(), lambda b: b.count(b"fleet in ") >= 3, 30, "three frames")
        assert b"\033" not in out  # no terminal codes where there is no terminal
        assert out.count(b"nodes:") >= 3
        os.kill(p.pid, signal.SIGINT)
        p.wait(timeout=15)
        err = p.stderr.read()
        assert p.returncode == 0 and "Traceback" not in err, err
    finally:
        kill_group(p)


def test_status_of_a_run_dir_with_no_fleet_says_so(tmp_path):
    r = fleet("status", "--run-dir", str(tmp_path), cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and "no fleet is up" in r.stderr and "Traceback" not in r.stderr


# -- fleet run: progress bar on a terminal, plain lines elsewhere ---------------------------------

PROGRESS_SUITE = 8


def test_fleet_run_without_a_terminal_prints_one_plain_line_per_step(tmp_path):
    suite = R.call_suite(tmp_path / "s.toml", "plain", PROGRESS_SUITE, 0.2, run_dir="run")
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stdout and "\033" not in r.stdout and "#" not in r.stdout
    lines = r.stdout.splitlines()
    assert lines[0] == f"suite 'plain': {PROGRESS_SUITE} steps"
    steps = [l for l in lines if re.fullmatch(r"\[ ?\d/8\]  succeeded  nap/\d", l)]
    assert len(steps) == PROGRESS_SUITE and [l[:5] for l in steps] == [f"[{i}/8]" for i in range(1, 9)], lines
    assert re.fullmatch(rf"suite 'plain': {PROGRESS_SUITE} succeeded in [\d.]+ s", lines[-1]), lines[-1]
    R.assert_gone(tmp_path / "run")


def test_fleet_run_on_a_terminal_shows_a_progress_bar_with_counts(tmp_path):
    suite = R.call_suite(tmp_path / "s.toml", "barred", PROGRESS_SUITE, 0.6, run_dir="run")
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--nodes", "2"], cwd=tmp_path,
                         env=fleet_env(), stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE,
                         start_new_session=True)
    os.close(slave)
    try:
        out = read_until(master, lambda b: b"succeeded in" in b and b.endswith(b"\n"), 120, "the run's summary")
        p.wait(timeout=60)
        err = p.stderr.read().decode()
    finally:
        os.close(master)
        kill_group(p)
    assert p.returncode == 0, err
    text = out.decode().replace("\r\n", "\n")  # the pty's own newline translation
    bars = re.findall(r"\r\[([#.]{30})\] (\d+)/8 done, (\d+) running, \d+ s", text)
    assert bars, text
    assert any(int(running) > 0 for _, _, running in bars), bars   # counts while steps run
    done = [int(d) for _, d, _ in bars]
    assert done == sorted(done) and done[-1] == PROGRESS_SUITE, done
    assert bars[-1][0] == "#" * 30 and any("#" not in b and d == "0" for b, d, _ in bars), bars
    # Successes only move the bar; the last line is the summary, on a line of its own.
    assert "succeeded  nap/" not in text
    assert re.search(rf"\n?suite 'barred': {PROGRESS_SUITE} succeeded in [\d.]+ s\n$", text), text[-200:]
    R.assert_gone(tmp_path / "run")


def test_fleet_run_on_a_terminal_prints_failures_on_lines_of_their_own(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "mixed"\nrun_dir = "run"\n[[steps]]\nid = "ok/{i}"\narray = "1-3"\n'
                     'command = ["true"]\n[[steps]]\nid = "bad"\ncommand = ["sh", "-c", "exit 5"]\n')
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite)], cwd=tmp_path, env=fleet_env(),
                         stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, start_new_session=True)
    os.close(slave)
    try:
        out = read_until(master, lambda b: re.search(rb"every step's reason: fleet report [^\r\n]*\r?\n", b), 120,
                         "the run's summary")
        p.wait(timeout=60)
    finally:
        os.close(master)
        kill_group(p)
    assert p.returncode == 1
    text = out.decode().replace("\r\n", "\n")
    assert re.search(r"\r\033\[K\[\d/4\]  failed     bad: .*5", text), text
    # The counts, then what did not succeed (fleet.control.notsucceeded), last.
    assert re.search(r"suite 'mixed': 1 failed, 3 succeeded in [\d.]+ s\ndid not succeed: 1 step:\n", text), text[-400:]
    assert text.endswith("every step's reason: fleet report " + str(tmp_path / "run") + "\n"), text[-400:]


# -- --via: a forwarded port -----------------------------------------------------------------------

class Forwarder:
    """A TCP port forwarder on 127.0.0.1 (what `ssh -L` gives), counting connections."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                a, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            b = socket.create_connection(self.target, timeout=5)
            for x, y in ((a, b), (b, a)):
                t = threading.Thread(target=self._pipe, args=(x, y), daemon=True)
                t.start()
                self.threads.append(t)

    def _pipe(self, x, y):
        x.settimeout(0.2)
        try:
            while not self.stop.is_set():
                try:
                    data = x.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                y.sendall(data)
        except OSError:
            pass
        finally:
            for s in (x, y):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.listener.close()
        for t in self.threads:
            t.join(timeout=5)


def test_status_via_a_forwarded_port_reaches_the_coordinator_through_it(idle_fleet):
    base, run_dir, conn = idle_fleet
    port = int(conn.client.rsplit(":", 1)[1])
    fw = Forwarder(("127.0.0.1", port))
    try:
        st = status_json("--run-dir", str(run_dir), "--via", f"127.0.0.1:{fw.port}", cwd=base)
        assert st["pid"] == conn.pid and [n["node"] for n in st["nodes"]] == ["node1", "node2"]
        assert fw.connections >= 1, "the answer did not come through the forwarded port"
    finally:
        fw.close()
    r = fleet("status", "--run-dir", str(run_dir), "--via", "no-port-here", cwd=base, timeout=60)
    assert r.returncode == 2 and "'no-port-here': give HOST:PORT" in r.stderr and "--via" in r.stderr


def test_status_via_a_port_where_nothing_listens_asks_whether_the_tunnel_is_up_and_leads_to_this_fleet(idle_fleet):
    base, run_dir, conn = idle_fleet
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    r = fleet("status", "--run-dir", str(run_dir), "--via", f"127.0.0.1:{dead}", cwd=base, timeout=60)
    assert r.returncode == 1 and "did not answer within 10 s" in r.stderr, r.stderr
    assert f"through --via 127.0.0.1:{dead}: is the tunnel up there" in r.stderr, r.stderr
    assert f"this fleet's coordinator, {conn.client.removeprefix('tcp://')} on {conn.host}" in r.stderr, r.stderr


# -- --ssh: a real sshd on 127.0.0.1 ------------------------------------------------------------------

SSHD = "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, idle_fleet):
    """A private sshd on 127.0.0.1:PORT, run as whoever runs the tests, in its own process
    group; yields (login, [--ssh-option values], its log, the pretend login node's home)."""
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen")):
        if not tool or not os.path.exists(tool):
            pytest.skip("openssh-server / openssh-client are not installed (apt-get install openssh-server "
                        f"openssh-client): {tool or 'ssh'} is missing")
    base, run_dir, conn = idle_fleet
    home = run_dir.parent
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    # The forced command is the pretend login node: the client's command, run from its home.
    forced = f'command="cd {home} && exec /bin/sh -c \\"$SSH_ORIGINAL_COMMAND\\""'
    (d / "authorized_keys").write_text(f"{forced} {(d / 'user_key.pub').read_text()}")
    os.chmod(d / "authorized_keys", 0o600)
    if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
        try:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        except OSError as e:
            pytest.skip(f"sshd cannot start: no /run/sshd and cannot make it: {e}")
    port = _free_port()
    config = d / "sshd_config"
    config.write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d / 'host_key'}
AuthorizedKeysFile {d / 'authorized_keys'}
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
PidFile {d / 'sshd.pid'}
LogLevel DEBUG1
""")
    log = d / "sshd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([SSHD, "-D", "-f", str(config), "-e"], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=out, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                pytest.skip(f"sshd could not start (exit {proc.returncode}): {log.read_text(errors='replace')[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.skip(f"sshd did not listen on 127.0.0.1:{port} within 15 s: "
                                f"{log.read_text(errors='replace')[-500:]}")
                time.sleep(0.05)
        user = subprocess.run(["id", "-un"], capture_output=True, text=True, timeout=10).stdout.strip()
        options = [f"-p {port} -i {d / 'user_key'} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no "
                   f"-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"]
        login = f"{user}@127.0.0.1"
        probe = subprocess.run(["ssh", "-o", "BatchMode=yes", *options[0].split(), login, "pwd"],
                               capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        if probe.returncode != 0 or probe.stdout.strip() != str(home):
            pytest.skip(f"cannot log in to the test's sshd as {user}: {probe.stderr.strip() or probe.stdout}")
        yield login, options, log, home
    finally:
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        for k in kids:  # per-connection sshd processes start sessions of their own
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
        kill_group(proc)


def _ssh_clients(options: list[str]) -> list[str]:
    """The ssh tunnels (-L) to the sshd these options name (its port): this test's, not
    another's running meanwhile (the tests run on two workers)."""
    port = re.search(r"-p (\d+)", options[0]).group(1)
    out = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["name"] == "ssh" and "-L" in cmd and f" -p {port} " in f" {' '.join(cmd)} ":
                out.append(" ".join(cmd))
        except psutil.Error:
            pass
    return out


def _forwarded_to(log: Path, port: int) -> bool:
    text = log.read_text(errors="replace")
    return bool(re.search(rf"direct_tcpip: originator \S+ port \d+, target 127\.0\.0\.1 port {port}\b", text)
                or re.search(rf"connect_to 127\.0\.0\.1 port {port}", text)), text[-2000:]


def test_status_ssh_with_a_local_connection_file_tunnels_through_sshd(idle_fleet, sshd):
    base, run_dir, conn = idle_fleet
    login, options, log, home = sshd
    before = _ssh_clients(options)
    st = status_json("--run-dir", str(run_dir), "--ssh", login, "--ssh-option", options[0], cwd=base)
    assert st["pid"] == conn.pid and [n["node"] for n in st["nodes"]] == ["node1", "node2"]
    port = int(conn.client.rsplit(":", 1)[1])
    ok, tail = _forwarded_to(log, port)
    assert ok, f"sshd did not forward to the coordinator's port {port}:\n{tail}"
    assert _ssh_clients(options) == before, "the ssh tunnel outlived fleet status"


def test_status_ssh_fetches_the_connection_file_from_the_login_node_when_it_is_not_here(idle_fleet, sshd, tmp_path):
    base, run_dir, conn = idle_fleet
    login, options, log, home = sshd
    here = tmp_path / "laptop"
    here.mkdir()
    assert not (here / "run").exists()  # "run/fleet.json" exists only in the login node's home
    before = _ssh_clients(options)
    sessions = log.read_text(errors="replace").count("forced-command")
    r = fleet("status", "--run-dir", "run", "--ssh", login, "--ssh-option", options[0], cwd=here, timeout=90)
    assert r.returncode == 0, r.stderr
    assert f"fleet in {run_dir.resolve()}" in r.stdout and "node2" in r.stdout
    assert f"coordinator pid {conn.pid}" in r.stdout
    # One ssh session ran a command on the login node (the fetch); the tunnel runs none.
    assert log.read_text(errors="replace").count("forced-command") > sessions
    ok, tail = _forwarded_to(log, int(conn.client.rsplit(":", 1)[1]))
    assert ok, tail
    assert _ssh_clients(options) == before
    # Nothing of the fleet's was left here.
    assert list(here.iterdir()) == []


def test_status_watch_through_ssh_ends_saying_the_fleet_is_down_once_its_file_is_gone_there(sshd, tmp_path):
    login, options, log, home = sshd
    run_dir = home / "run-watched"
    R.up(run_dir, tmp_path)
    here = tmp_path / "laptop"
    here.mkdir()
    p = spawn("status", "--run-dir", "run-watched", "--ssh", login, "--ssh-option", options[0], "--watch",
              "--interval", "0.2", cwd=here)
    try:
        read_until(p.stdout.fileno(), lambda b: b.count(b"fleet in ") >= 2, 60, "two frames")
        assert len(_ssh_clients(options)) == 1  # the watch's tunnel (what the other tests count)
        R.down(run_dir, tmp_path)
        # Its next request goes unanswered; the login node says why, and the watch ends.
        p.wait(timeout=60)
        err = p.stderr.read()
        assert p.returncode == 0, err
        assert f"the fleet is down (its connection file is gone from run-watched on {login})" in err \
            and "Traceback" not in err, err
    finally:
        kill_group(p)
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)
    assert _ssh_clients(options) == []


def test_status_ssh_finds_a_fleet_that_a_fleet_run_embedded_on_the_login_node_and_here(sshd, tmp_path):
    # (it looked for fleet.json alone: "no fleet is up" for what `fleet status` here showed)
    login, options, log, home = sshd
    run_dir = home / "run-embedded"
    suite = R.call_suite(tmp_path / "s.toml", "emb", 2, 60.0)
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path)
    here = tmp_path / "laptop"
    here.mkdir()
    try:
        wait_for(lambda: list(run_dir.glob("fleet-*.json")) and [e for e in events(run_dir) if e["kind"] == "started"],
                 60, "the embedded fleet running a step")
        for where, cwd in (("run-embedded", here), (str(run_dir), tmp_path)):  # fetched there; the file here
            st = status_json("--run-dir", where, "--ssh", login, "--ssh-option", options[0], cwd=cwd)
            assert st["counts"].get("running", 0) >= 1, st["counts"]
    finally:
        kill_group(runner)
    assert _ssh_clients(options) == []
    R.assert_gone(run_dir)


def test_sigterm_to_a_status_watch_through_ssh_takes_its_tunnel_down_with_it(idle_fleet, sshd):
    # (its ssh -N -L runs in a session of its own: SIGTERM or a closed terminal left it running)
    base, run_dir, conn = idle_fleet
    login, options, log, home = sshd
    p = spawn("status", "--run-dir", str(run_dir), "--ssh", login, "--ssh-option", options[0], "--watch",
              "--interval", "0.2", cwd=base)
    try:
        read_until(p.stdout.fileno(), lambda b: b.count(b"fleet in ") >= 2, 60, "two frames")
        assert len(_ssh_clients(options)) == 1
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(timeout=30) == 128 + signal.SIGTERM
        wait_for(lambda: _ssh_clients(options) == [], 15, "the tunnel gone")
    finally:
        kill_group(p)


def test_status_ssh_to_a_coordinator_that_does_not_answer_says_where_it_asked_and_what_ssh_said(idle_fleet, sshd,
                                                                                               tmp_path):
    # (it said only "the coordinator at tcp://127.0.0.1:LOCALPORT did not answer", a port of the tunnel's)
    base, run_dir, conn = idle_fleet
    login, options, log, home = sshd
    with socket.socket() as s:  # a port nothing listens on: a stale file's coordinator
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    stale = home / "stale"
    stale.mkdir()
    data = json.loads((run_dir / "fleet.json").read_text())
    data["client"] = f"tcp://127.0.0.1:{dead}"
    fd = os.open(stale / "fleet.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    here = tmp_path / "laptop"
    here.mkdir()
    talk = options[0].replace("LogLevel=ERROR", "LogLevel=INFO")  # (ssh's own default: it says why)
    r = fleet("status", "--run-dir", "stale", "--ssh", login, "--ssh-option", talk, cwd=here, timeout=90)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"asked through ssh {login}, forwarded to 127.0.0.1:{dead}" in r.stderr, r.stderr
    assert f"pid {conn.pid}" in r.stderr and "ssh said: " in r.stderr, r.stderr
    assert "open failed" in r.stderr or "Connection refused" in r.stderr, r.stderr
    assert _ssh_clients(options) == []


def test_status_ssh_refuses_a_remote_connection_file_that_others_can_read(idle_fleet, sshd, tmp_path):
    base, run_dir, conn = idle_fleet
    login, options, log, home = sshd
    os.chmod(run_dir / "fleet.json", 0o644)
    try:
        r = fleet("status", "--run-dir", "run", "--ssh", login, "--ssh-option", options[0], cwd=tmp_path, timeout=90)
    finally:
        os.chmod(run_dir / "fleet.json", 0o600)
    assert r.returncode != 0 and "mode 644" in r.stderr and "not 600" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_status_ssh_where_no_fleet_is_up_on_the_login_node_says_so(idle_fleet, sshd, tmp_path):
    login, options, log, home = sshd
    r = fleet("status", "--run-dir", "elsewhere", "--ssh", login, "--ssh-option", options[0], cwd=tmp_path,
              timeout=90)
    assert r.returncode == 1
    assert r.stderr == f"Error: no fleet is up in elsewhere on {login} (no fleet.json nor fleet-*.json there)\n", \
        r.stderr


def test_status_ssh_to_a_login_that_refuses_us_fails_clearly_and_leaves_no_ssh_behind(idle_fleet, sshd, tmp_path):
    base, run_dir, conn = idle_fleet
    login, options, log, home = sshd
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=30,
                   stdin=subprocess.DEVNULL)
    bad = re.sub(r"-i \S+", f"-i {stranger}", options[0])
    before = _ssh_clients(options)
    for args in (["--run-dir", str(run_dir)], ["--run-dir", "run"]):  # tunnel only; fetch first
        r = fleet("status", *args, "--ssh", login, "--ssh-option", bad, cwd=tmp_path, timeout=90)
        assert r.returncode != 0, r.stdout
        assert login in r.stderr and ("Permission denied" in r.stderr or "could not" in r.stderr
                                      or "cannot read" in r.stderr), r.stderr
        assert "Traceback" not in r.stderr
    assert _ssh_clients(options) == before


def test_status_watch_ends_at_once_saying_so_when_the_coordinator_is_killed(tmp_path):
    # (its connection file stays: the watch waited 10 s for an answer, then said only that)
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--heartbeat", "0.2", "--heartbeat-timeout", "2",
          cwd=tmp_path, check=True, timeout=60)
    pid = R.conn_of(run_dir).pid
    p = spawn("status", "--run-dir", str(run_dir), "--watch", "--interval", "0.2", cwd=tmp_path)
    try:
        read_until(p.stdout.fileno(), lambda b: b.count(b"fleet in ") >= 2, 30, "two frames")
        os.kill(pid, signal.SIGKILL)
        p.wait(timeout=30)
        err = p.stderr.read()
        assert p.returncode == 1 and f"the fleet is down (its coordinator, pid {pid}, is gone)" in err, err
    finally:
        kill_group(p)
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir, timeout=60)


def test_a_json_watch_ends_with_one_last_object_saying_down_or_error_and_exit_0_or_1(tmp_path):
    # Taken down: {"down": ...} and 0. Its coordinator killed: {"error": ...} and 1.
    for how in ("down", "kill"):
        run_dir = tmp_path / how
        fleet("up", "--run-dir", str(run_dir), "--nodes", "1", "--heartbeat", "0.2", "--heartbeat-timeout", "2",
              cwd=tmp_path, check=True, timeout=60)
        pid = R.conn_of(run_dir).pid
        p = spawn("status", "--run-dir", str(run_dir), "--watch", "--json", "--interval", "0.2", cwd=tmp_path)
        try:
            got = read_until(p.stdout.fileno(), lambda b: b.count(b"\n") >= 2, 30, "two objects")
            if how == "down":
                assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
            else:
                os.kill(pid, signal.SIGKILL)
            p.wait(timeout=30)
            lines = (got + p.stdout.read().encode()).decode().splitlines()
            last = json.loads(lines[-1])
            assert all("nodes" in json.loads(line) for line in lines[:-1]), lines[:-1]
            if how == "down":
                assert p.returncode == 0 and list(last) == ["down"] and "the fleet is down" in last["down"], last
            else:
                assert p.returncode == 1 and f"pid {pid}, is gone" in last["error"], (p.returncode, last)
        finally:
            kill_group(p)
            R.down(run_dir, tmp_path)
        R.assert_gone(run_dir, timeout=60)


def test_a_connection_file_or_via_no_socket_can_use_is_refused_in_words_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.json"
    fd = os.open(bad, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    good = {"client": "tcp://127.0.0.1:1", "agents": "tcp://127.0.0.1:2", "pid": 1, "host": "h", "started": 0.0,
            "run_dir": "/x"}
    os.close(fd)
    for data, words in (({**good, "client": "garbage"}, "field 'client': expected an endpoint"),
                        ({**good, "client": 5}, "field 'client'"), ({**good, "server_key": "xyz"}, "CURVE key"),
                        ({}, "no client, agents, pid")):
        bad.write_text(json.dumps(data))
        for extra in ((), ("--json",)):
            r = fleet("status", "--connection", str(bad), *extra, cwd=tmp_path, timeout=60)
            assert r.returncode == 1 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
            if extra:
                assert words in json.loads(r.stdout)["error"], r.stdout
    r = fleet("status", "--via", "a b:1", cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "HOST:PORT" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_status_watch_ends_by_itself_when_the_fleet_goes_down(tmp_path):
    run_dir = tmp_path / "run"
    R.up(run_dir, tmp_path)
    p = spawn("status", "--run-dir", str(run_dir), "--watch", "--interval", "0.2", cwd=tmp_path)
    try:
        read_until(p.stdout.fileno(), lambda b: b.count(b"fleet in ") >= 2, 30, "two frames")
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
        p.wait(timeout=30)  # (a request in flight as the fleet went may wait its 10 s first)
        err = p.stderr.read()
        assert p.returncode == 0 and "the fleet is down" in err and "Traceback" not in err, err
        R.assert_gone(run_dir)
    finally:
        kill_group(p)
        R.down(run_dir, tmp_path)


def _ssh_tunnel_pids(options: list[str]) -> list[int]:
    """The pids of the ssh tunnels (-L) to the sshd these options name."""
    port = re.search(r"-p (\d+)", options[0]).group(1)
    out = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["name"] == "ssh" and "-L" in cmd and f" -p {port} " in f" {' '.join(cmd)} " \
                    and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.info["pid"])
        except psutil.Error:
            pass
    return out


def test_status_ssh_killed_with_sigkill_takes_its_ssh_tunnel_with_it(idle_fleet, sshd, tmp_path):
    base, run_dir, conn = idle_fleet
    login, options, log, home = sshd
    before = set(_ssh_tunnel_pids(options))
    p = spawn("status", "--run-dir", str(run_dir), "--ssh", login, "--ssh-option", options[0], "--watch",
              "--interval", "0.2", cwd=base)
    try:
        read_until(p.stdout.fileno(), lambda b: b.count(b"fleet in ") >= 2, 60, "two frames")
        ours = set(_ssh_tunnel_pids(options)) - before
        assert len(ours) == 1, ours
        os.kill(p.pid, signal.SIGKILL)  # (no clean-up of its own: only the kernel can end the ssh now)
        p.wait(timeout=30)
        wait_for(lambda: not ours & set(_ssh_tunnel_pids(options)), 20, "its ssh tunnel gone")
    finally:
        kill_group(p)
        for pid in set(_ssh_tunnel_pids(options)) - before:  # (a leak on the old code: not left running)
            os.kill(pid, signal.SIGKILL)


def test_status_watch_whose_ssh_tunnel_dies_says_the_tunnel_closed_not_that_the_fleet_is_down(idle_fleet, sshd):
    base, run_dir, conn = idle_fleet
    login, options, log, home = sshd
    before = set(_ssh_tunnel_pids(options))
    p = spawn("status", "--run-dir", str(run_dir), "--ssh", login, "--ssh-option", options[0], "--watch",
              "--interval", "0.2", cwd=base)
    try:
        read_until(p.stdout.fileno(), lambda b: b.count(b"fleet in ") >= 2, 60, "two frames")
        (ours,) = set(_ssh_tunnel_pids(options)) - before
        os.kill(ours, signal.SIGKILL)
        p.wait(timeout=60)
        err = p.stderr.read()
        assert p.returncode == 1, err
        assert f"the ssh tunnel through {login} closed: ssh was killed by signal 9" in err, err
        assert "is the fleet still up" not in err and "did not answer" not in err and "Traceback" not in err, err
    finally:
        kill_group(p)
    st = status_json("--run-dir", str(run_dir), cwd=base)  # the fleet was never down
    assert st["pid"] == conn.pid
