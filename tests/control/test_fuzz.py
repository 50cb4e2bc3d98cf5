"""Thousands of random and malformed frames at both coordinator sockets while a real
suite runs: the suite still completes correctly, the garbage is counted (and logged once
per kind), and the coordinator's memory stays bounded.

The keyed fuzzers hold the fleet's real keys (client keys from fleet.json, the agent key
pair from an agent's /proc/PID/environ, see rawpeer.agent_keys), so their frames pass
CURVE and reach the coordinator's decoding and handlers. Two things a keyed peer may
legitimately do are left out: `down` on the client socket (it stops the fleet, as it
should) and a well-formed `join` of a new node name on the agent socket (it adds a
node); every join the fuzzer sends names node1, which already has an agent, or an
unhashable name. One keyed "observer" joins as a node with no cores (nothing can run
there) so that its exit reports come from a known agent and reach the stale-report
checks: reports of earlier or later attempts, of steps that do not exist, and of
steps running right now on another node. Unkeyed sockets and raw TCP connections
(random bytes, HTTP, a ZMTP greeting offering the NULL mechanism) hit both ports too:
CURVE must stop them before any decoding.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import socket
import time
from collections import Counter
from pathlib import Path

import msgpack
import psutil
import zmq

from fleet.wire import messages as P

import rawpeer as R
from fleetharness import events, spawn, wait_for

STEPS = 60
STEP_SECONDS = 0.3
MAX_FRAMES = 8000         # in all, over every fuzzing socket
MAX_FUZZ_SECONDS = 60.0
MIN_FRAMES_DURING_RUN = 2000
RSS_GROWTH_LIMIT = 50 * 2**20
SEED = int(os.environ.get("FLEET_FUZZ_SEED", "0")) or random.randrange(1, 2**31)


# -- what a fuzzer sends -----------------------------------------------------------------

def value(rng: random.Random, depth: int = 0):
    """Any msgpack-able value, biased to the awkward ones."""
    kinds = ["none", "bool", "int", "bigint", "float", "str", "bytes"] + (["list", "map", "intmap"] if depth < 3 else [])
    k = rng.choice(kinds)
    if k == "none":
        return None
    if k == "bool":
        return rng.random() < 0.5
    if k == "int":
        return rng.randint(-5, 5)
    if k == "bigint":
        return rng.choice([2**63 - 1, -2**63, 2**64 - 1, 2**31, -1])
    if k == "float":
        return rng.choice([0.0, -1.5, 1e308, float("inf"), float("-inf"), float("nan")])
    if k == "str":
        return rng.choice(["", "node1", "nap/1", "../../etc/passwd", "\u00e9\u4e2d\U0001f600", "x" * rng.randint(0, 300)])
    if k == "bytes":
        return rng.randbytes(rng.randint(0, 64))
    if k == "list":
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if k == "map":
        return {rng.choice(["v", "type", "node", "step", "a", ""]): value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return {rng.randint(0, 9): value(rng, depth + 1)}  # non-string keys: refused by strict_map_key


def wrong_fields(rng: random.Random, name: str) -> dict:
    """A message of a known type whose fields are missing, extra or of the wrong type."""
    cls = P._TYPES[name]
    body = {"v": P.VERSION, "type": name}
    for f in dataclasses.fields(cls):
        r = rng.random()
        if r < 0.15:
            continue  # missing
        body[f.name] = value(rng)
    if rng.random() < 0.3:
        body[rng.choice(["extra", "\x00", "v2"])] = value(rng)
    return body


def frame(rng: random.Random, socket_kind: str, steps: list[str]) -> tuple[str, list[bytes]]:
    """One message to send (a list of frames) and what kind of garbage it is."""
    forbidden = {"down"} if socket_kind == "client" else set()
    names = [n for n in P._TYPES if n not in forbidden]
    k = rng.choices(["random", "not_msgpack", "shape", "unknown_type", "version", "fields",
                     "multi", "truncated", "valid_request", "stale_exit", "deep"],
                    weights=[10, 6, 10, 6, 8, 25, 6, 5, 8, 12, 2])[0]
    if k == "random":
        return k, [rng.randbytes(rng.randint(0, 4096))]
    if k == "not_msgpack":
        return k, [rng.choice([b"\xc1", b"\xc1" * 100, b"GET / HTTP/1.1\r\n\r\n", b"\xff\xfe\x00"])]
    if k == "shape":
        return k, [R.raw(rng.choice([[1, 2, 3], 7, "status", None, 3.5, b"bin",
                                     [{"v": 1, "type": "status"}], {"v": 1}, {"type": "status"}]))]
    if k == "unknown_type":
        return k, [R.raw({"v": P.VERSION, "type": rng.choice(["rm -rf /", "", None, 42, "Status", "STATUS", "exec"])})]
    if k == "version":
        v = rng.choice([0, P.VERSION - 1, P.VERSION + 1, -1, 2**40, "1", None, [1], {"v": 1}])
        return k, [R.raw({"v": v, "type": rng.choice(names), "node": "node1"})]
    if k == "multi":
        return k, [R.raw({"v": P.VERSION, "type": "status"})] * rng.randint(2, 4)
    if k == "truncated":
        whole = P.encode(P.Status()) if socket_kind == "client" else R.raw(wrong_fields(rng, "exited"))
        return k, [whole[:rng.randint(1, max(1, len(whole) - 1))]]
    if k == "deep":
        nested: object = 0
        for _ in range(rng.choice([100, 2000, 20000])):
            nested = [nested]
        try:
            return k, [msgpack.packb(nested)]
        except (ValueError, RecursionError):
            return k, [b"\x91" * 20000 + b"\x00"]  # the same, written by hand
    if k == "valid_request" and socket_kind == "client":
        return k, [P.encode(rng.choice([P.Status(), P.Progress(1, rng.randint(-10, 10**6)), P.Progress(999, 0),
                                        P.Submit("/nonexistent/suite.toml")]))]
    if k == "stale_exit" or k == "valid_request":
        return "stale_exit", [stale_exit(rng, steps)]
    name = rng.choice(names)
    body = wrong_fields(rng, name)
    if name == "join" and socket_kind != "client":
        # Never a well-formed join of a new node (a keyed agent may add a node: that is its job).
        body["node"] = rng.choice(["node1", ["node", 9], {"n": 1}])
    return k, [R.raw(body)]


def stale_exit(rng: random.Random, steps: list[str], attempt: int | None = None) -> bytes:
    """An exit report; the coordinator takes its node from the socket that sends it."""
    step = rng.choice(steps + ["no/such/step", ""])
    return P.encode(P.Exited(
        step=step, pid=rng.randint(1, 2**22), attempt=rng.choice([0, 2, 3, 99, -1]) if attempt is None else attempt,
        outcome=rng.choice(["succeeded", "failed", "terminated", "bogus"]), returncode=0, signal=None,
        decided_at=0.0, first_at=0.0, work_start=0.0, work_end=0.0, ended_at=0.0, utime=0.0, stime=0.0,
        maxrss_kb=0, affinity=(0,), placement_ok=True, error=None))


def raw_tcp(rng: random.Random, endpoint: str) -> None:
    """Bytes straight at the port: no ZeroMQ at all, or a ZMTP greeting without CURVE."""
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    assert host == "127.0.0.1"
    null_greeting = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32
    data = rng.choice([rng.randbytes(rng.randint(1, 8192)), null_greeting, null_greeting + rng.randbytes(200),
                       b"GET / HTTP/1.0\r\n\r\n"])
    try:
        with socket.create_connection((host, int(port)), timeout=1) as s:
            s.sendall(data)
    except OSError:
        pass  # refused or reset: what it deserves


def oversized(rng: random.Random) -> list[bytes]:
    return [rng.choice([b"\x00", b"\x92"]) * (P.MAX_FRAME + rng.randint(1, 4096))]


# -- the test ----------------------------------------------------------------------------

class Fuzzer:
    """Keyed and unkeyed sockets, each sending until the shared budget is spent."""

    def __init__(self, conn, agent_keys, steps: list[str], rng: random.Random):
        self.conn, self.agent_keys, self.steps, self.rng = conn, agent_keys, steps, rng
        self.socks = {
            "client": R.dealer(conn.client, R.client_keys(conn)),
            "agent": R.dealer(conn.agents, agent_keys),
            "client-unkeyed": R.dealer(conn.client, None),
            "agent-unkeyed": R.dealer(conn.agents, None),
        }
        self.sent: dict[str, int] = {}
        self.replies = 0
        self.blocked = 0
        self.kinds: dict[str, int] = {}

    def join_observer(self) -> zmq.Socket:
        obs = R.dealer(self.conn.agents, self.agent_keys, identity=b"fuzz-observer")
        obs.send(P.encode(P.Join(node="fuzz-observer", host="fuzz", cores=[], gpus=[], memory=0, pid=0,
                                 zygote_pid=0, preload=[])))
        reply = R.first_reply(obs, 10)
        assert isinstance(reply, P.Welcome), f"the keyed observer was not welcomed: {reply!r}"
        self.socks["observer"] = obs
        return obs

    def send(self, name: str, frames: list[bytes], kind: str) -> None:
        try:
            self.socks[name].send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            self.blocked += 1
            return
        self.sent[name] = self.sent.get(name, 0) + 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def drain(self) -> None:
        for s in self.socks.values():
            while True:
                try:
                    s.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.replies += 1

    def running_now(self, run_dir: Path) -> list[str]:
        started = {e["step"] for e in events(run_dir) if e["kind"] == "start"}
        ended = {e["step"] for e in events(run_dir) if e["kind"] == "exit"}
        return sorted(started - ended)

    def total(self) -> int:
        return sum(self.sent.values())

    def close(self) -> None:
        for s in self.socks.values():
            s.close(0)


def test_thousands_of_malformed_frames_at_both_sockets_do_not_disturb_a_running_suite(tmp_path):
    rng = random.Random(SEED)
    print(f"fuzz seed {SEED} (set FLEET_FUZZ_SEED to replay)")
    run_dir = tmp_path / "run"
    conn = R.up(run_dir, tmp_path)
    runner = None
    fz = None
    try:
        coord = psutil.Process(conn.pid)
        agent_keys = R.agent_keys(run_dir)
        suite = R.call_suite(tmp_path / "s.toml", "fuzzed", STEPS, STEP_SECONDS)
        steps = [f"nap/{i}" for i in range(1, STEPS + 1)]
        runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        wait_for(lambda: any(e["kind"] == "started" for e in events(run_dir)), 60, "the first step to start")
        rss_before = coord.memory_info().rss
        log_before = (run_dir / "coordinator.log").stat().st_size

        fz = Fuzzer(conn, agent_keys, steps, rng)
        observer = fz.join_observer()
        t0 = time.monotonic()
        last_beat = 0.0
        rss_max = rss_before
        sent_during_run = 0
        names = ["client", "agent", "client-unkeyed", "agent-unkeyed", "observer"]
        while fz.total() < MAX_FRAMES and time.monotonic() - t0 < MAX_FUZZ_SECONDS:
            run_over = runner.poll() is not None
            if run_over and fz.total() >= MIN_FRAMES_DURING_RUN:
                break
            if time.monotonic() - last_beat > 0.5:
                observer.send(P.encode(P.Heartbeat("fuzz-observer")))  # it stays a known, living agent
                last_beat = time.monotonic()
                rss_max = max(rss_max, coord.memory_info().rss)
            name = rng.choice(names)
            if name == "observer":
                running = fz.running_now(run_dir) if rng.random() < 0.05 else []
                if running:  # the current attempt of a step running elsewhere: still not ours to report
                    fz.send(name, [stale_exit(rng, running, attempt=1)], "wrong_node_exit")
                else:
                    fz.send(name, [stale_exit(rng, steps)], "stale_exit")
            elif name.endswith("unkeyed") and rng.random() < 0.2:
                raw_tcp(rng, conn.client if name.startswith("client") else conn.agents)
                fz.sent["raw-tcp"] = fz.sent.get("raw-tcp", 0) + 1
                fz.kinds["raw_tcp"] = fz.kinds.get("raw_tcp", 0) + 1
            elif rng.random() < 0.003:
                fz.send(name, oversized(rng), "oversized")
            else:
                kind, frames = frame(rng, name.split("-")[0], steps)
                fz.send(name, frames, kind)
            if not run_over:
                sent_during_run = fz.total()
            if fz.total() % 25 == 0:
                fz.drain()
                time.sleep(0.02)  # thousands over the whole run, not a flood that starves 2 cores
        fuzz_s = time.monotonic() - t0
        fz.drain()
        print(f"sent {fz.total()} messages in {fuzz_s:.1f} s ({sent_during_run} while the suite ran): {fz.sent}; "
              f"kinds {fz.kinds}; replies {fz.replies}; send queue full {fz.blocked} times")

        out, err = runner.communicate(timeout=180)
        assert runner.returncode == 0, f"the fuzzed suite failed:\n{out}\n{err}"
        assert sent_during_run >= MIN_FRAMES_DURING_RUN, (
            f"only {sent_during_run} frames were sent while the suite ran: the test proved little")

        # The suite completed correctly: every step started once and succeeded once.
        ev = events(run_dir)
        starts = [e["step"] for e in ev if e["kind"] == "start"]
        exits = [(e["step"], e["outcome"]) for e in ev if e["kind"] == "exit"]
        assert sorted(starts) == sorted(steps), "steps were started more or less than once"
        assert sorted(exits) == sorted((s, "succeeded") for s in steps), exits
        assert not [e for e in ev if e["kind"] in ("retry", "node_lost", "blocked")]
        for s in steps:
            assert (run_dir / "steps" / s / "nap.json").exists(), f"{s} left no evidence of its work"

        # The coordinator is the same process, still answers, and counted what it dropped.
        assert coord.is_running() and coord.status() != psutil.STATUS_ZOMBIE
        st = R.status(conn)
        dropped = st["dropped"]
        print(f"dropped: {dropped}")
        for key in ("bad:ProtocolError", "bad:VersionMismatch", "frames", "stale exit"):
            assert dropped.get(key, 0) > 0, f"no {key!r} in the dropped counts {dropped}"
        assert any(k.startswith("unknown:") for k in dropped), dropped
        assert len(dropped) <= 3 * len(P._TYPES) + 10, f"the kinds of dropped input must be a small fixed set: {dropped}"
        assert sum(dropped.values()) >= 0.5 * (fz.sent.get("client", 0) + fz.sent.get("agent", 0)), (
            "most keyed garbage should be counted as dropped", dropped, fz.sent)
        assert [(s["steps"], s["finished"]) for s in st["submissions"]] == [(STEPS, STEPS)], st["submissions"]
        assert st["counts"] == {"succeeded": STEPS}, st["counts"]

        # Memory stayed bounded (the garbage left nothing behind), and so did the log.
        rss_after = coord.memory_info().rss
        rss_max = max(rss_max, rss_after)
        print(f"coordinator RSS before {rss_before / 2**20:.1f} MiB, max {rss_max / 2**20:.1f} MiB, "
              f"after {rss_after / 2**20:.1f} MiB")
        assert rss_max - rss_before < RSS_GROWTH_LIMIT, (rss_before, rss_max)
        log = (run_dir / "coordinator.log").read_text(errors="replace")[log_before:]
        complaints = [l for l in log.splitlines() if " WARNING " in l or " ERROR " in l]
        handled = Counter(m.group(1) for l in complaints if (m := re.search(r"handling (\w+) failed", l)))
        assert all(n == 1 for n in handled.values()), (
            f"handler failures logged more than once per message type: {handled}")
        assert len(complaints) <= len(dropped) + 5, (
            f"{len(complaints)} warnings for {len(dropped)} kinds of dropped input ({fz.total()} frames): "
            "malformed input must be logged once per kind\n" + "\n".join(complaints[:80]))
    finally:
        if fz is not None:
            fz.close()
        if runner is not None and runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        R.down(run_dir, tmp_path)
    R.assert_gone(run_dir)
