"""Faults injected for real: agents killed or stopped, coordinators killed, several
fleets (and job-array shards) on one run directory, stale and fresh claims, restart
limits. Every claim is checked from the steps' own evidence (tests/fleet_steps.py
`once`: "start"/"end" lines in <run dir>/evidence.txt, one output published by an
exclusive link) as well as from the events and `fleet audit`."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from fleetharness import assert_nothing_left, env, fleet, sessions, two_fleets_gated, wait_for, write_suite
from fleetharness import records as event_records

from fleet.control import store
from fleet.wire import events as E
from fleet.wire import records
from fleet.control.checks import checked_suite
from fleet.core.suite import StepSpec

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "2"]
HB_TIMEOUT = 2.0


# --- processes -----------------------------------------------------------------------------

class Procs:
    """Background `fleet` commands, each in its own process group, and `fleet up`
    fleets: whatever a test leaves running is killed (by group) or brought down."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []
        self.fleets: list[tuple[Path, Path]] = []
        self.others: list[subprocess.Popen] = []

    def start(self, *args: str, cwd: Path, extra_env: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=cwd, env={**env(), **(extra_env or {})},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(p)
        return p

    def finish(self, p: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            raise AssertionError(f"{' '.join(p.args[2:])} timed out\nstdout:\n{out}\nstderr:\n{err}")
        return p.returncode, out, err

    def up(self, tmp_path: Path, nodes: int = 2) -> Path:
        run_dir = tmp_path / "run"
        self.fleets.append((run_dir, tmp_path))
        fleet("up", "--run-dir", str(run_dir), "--nodes", str(nodes), *HB, cwd=tmp_path, check=True, timeout=60)
        return run_dir

    def other(self, argv: list[str]) -> subprocess.Popen:
        p = subprocess.Popen(argv, start_new_session=True)
        self.others.append(p)
        return p

    def cleanup(self) -> None:
        for p in self.procs + self.others:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.communicate(timeout=30)
            except (ValueError, subprocess.TimeoutExpired):
                p.wait(timeout=30)
        for run_dir, cwd in self.fleets:
            fleet("down", "--run-dir", str(run_dir), cwd=cwd, timeout=60)
        # A test that failed half-way may leave embedded fleets (their own sessions):
        # their coordinators name the test's directory; agents and steps die with them.
        left = [p for p in psutil.process_iter(["cmdline"])
                if p.pid != os.getpid() and str(self.tmp_path) in " ".join(p.info["cmdline"] or [])]
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=10)


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.cleanup()


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody reaped yet (reaped here if it is ours)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def family(pid: int) -> list[int]:
    """A process and all its descendants, now."""
    p = psutil.Process(pid)
    return [pid] + [c.pid for c in p.children(recursive=True)]


# --- evidence ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Note:
    what: str
    step: str
    pid: int
    attempt: int
    t: float
    shard: str


def notes(run_dir: Path) -> list[Note]:
    path = run_dir / "evidence.txt"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) == 6:
            out.append(Note(f[0], f[1], int(f[2]), int(f[3]), float(f[4]), f[5]))
    return out


def ends(run_dir: Path, shard: str | None = None) -> Counter:
    return Counter(n.step for n in notes(run_dir) if n.what == "end" and (shard is None or n.shard == shard))


def assert_each_ran_once(run_dir: Path, steps: list[str]) -> None:
    """Step-side proof: no attempt saw another attempt of its step alive, every step
    ended exactly once, and published exactly one output, by the attempt that ended."""
    ns = notes(run_dir)
    overlaps = [n for n in ns if n.what.startswith("overlap")]
    assert not overlaps, f"attempts of one step ran at the same time: {overlaps}"
    got = Counter(n.step for n in ns if n.what == "end")
    assert got == Counter(steps), f"steps that did not end exactly once: " \
                                  f"{ {s: got[s] for s in set(steps) | set(got) if got[s] != 1} }"
    outputs = {p.name: p.read_text().split() for p in (run_dir / "out").iterdir()}
    assert sorted(outputs) == sorted(s.replace("/", "_") for s in steps), sorted(outputs)
    end_pid = {n.step: n.pid for n in ns if n.what == "end"}
    for s in steps:
        assert outputs[s.replace("/", "_")] == [s, str(end_pid[s])]


def audit(run_dir: Path, cwd: Path, *extra: str) -> dict:
    r = fleet("audit", str(run_dir), "--json", *extra, cwd=cwd, timeout=60)
    a = json.loads(r.stdout)
    a["exit"] = r.returncode
    return a


def assert_audit_clean(run_dir: Path, cwd: Path, steps: list[str], *extra: str) -> dict:
    a = audit(run_dir, cwd, *extra)
    assert a["exit"] == 0 and a["ok"], a
    assert a["missing"] == [] and a["duplicates"] == []
    assert {s: v["status"] for s, v in a["steps"].items()} == {s: "succeeded" for s in steps}
    assert {s: v["successes"] for s, v in a["steps"].items()} == {s: 1 for s in steps}
    return a


# --- events --------------------------------------------------------------------------------

def of(run_dir: Path, kind: type, **match) -> list:
    """The records of one kind whose fields (by attribute: a misspelt one fails) match."""
    return [e for e in event_records(run_dir)
            if isinstance(e, kind) and all(getattr(e, k) == v for k, v in match.items())]


def agents(run_dir: Path) -> dict[str, tuple[int, int]]:
    return {e.node: (e.pid, e.zygote_pid) for e in of(run_dir, E.NodeJoined)}


def nth_start_on(run_dir: Path, node: str, n: int) -> E.Started | None:
    s = of(run_dir, E.Started, node=node)
    return s[n - 1] if len(s) >= n else None


def steps_suite(path: Path, name: str, count: int, seconds: float, retries: int = 0, first: int = 1,
                run_dir: str | None = None, gate: Path | None = None) -> Path:
    gated = f', gate = "{gate}"' if gate else ""  # (the steps wait for that file: fleet_steps.once)
    return write_suite(path, f"""
[suite]
name = "{name}"
{f'run_dir = "{run_dir}"' if run_dir else ''}
[[steps]]
id = "s/{{i}}"
array = "{first}-{first + count - 1}"
task = "{{i}}"
call = "fleet_steps:once"
args = {{ seconds = {seconds}{gated} }}
retries = {retries}
""")


# --- 1. an agent killed --------------------------------------------------------------------

def test_an_agent_killed_mid_run_has_its_steps_retried_on_the_other_node_and_every_output_made_once(
        tmp_path, procs):
    run_dir = procs.up(tmp_path)
    suite = steps_suite(tmp_path / "s.toml", "kill-agent", 8, 1.0, retries=1)
    steps = [f"s/{i}" for i in range(1, 9)]
    runner = procs.start("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    agent, zygote = agents(run_dir)["node1"]
    # Mid-run: the moment node1 starts its second step (which then has ~1 s to go).
    victim = wait_for(lambda: nth_start_on(run_dir, "node1", 2), 30, "a second step started on node1")
    os.kill(agent, signal.SIGKILL)
    # Its zygote and the step die with it (death signals), long before the coordinator gives up.
    wait_for(lambda: gone(zygote) and gone(victim.pid), HB_TIMEOUT, "node1's zygote and step to die")
    rc, out, err = procs.finish(runner, 60)
    assert rc == 0, out + err
    assert [e.node for e in of(run_dir, E.NodeLost)] == ["node1"]
    lost = of(run_dir, E.Exit, step=victim.step, attempt=1)
    assert [e.outcome for e in lost] == ["lost"], lost
    assert of(run_dir, E.Retry, step=victim.step, attempt=2)
    again = of(run_dir, E.Start, step=victim.step, attempt=2)
    assert [e.node for e in again] == ["node2"]
    # The killed attempt never ended (it may have died before its first line); the retry did.
    mine = [n for n in notes(run_dir) if n.step == victim.step]
    assert [n.what for n in mine if n.pid == victim.pid] in ([], ["start"])
    assert [n.what for n in mine if n.pid != victim.pid] == ["start", "end"]
    assert_each_ran_once(run_dir, steps)
    a = assert_audit_clean(run_dir, tmp_path, steps)
    assert a["steps"][victim.step]["attempts"] == 2
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60)
    assert_nothing_left(run_dir)


def test_an_unreachable_agent_with_two_thousand_ready_steps_is_lost_once_and_the_suite_ends_on_the_other_node_with_no_error_swallowed(
        tmp_path, procs):
    # Heartbeats would take half a minute to notice: the failed launches must, at once (the
    # node_lost record says which). The lost step runs again only after the node's fence
    # (3/4 of the timeout: fleet.core.fencing), hence not the two minutes this once took.
    run_dir = tmp_path / "run"
    procs.fleets.append((run_dir, tmp_path))
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", "--heartbeat", "0.2", "--heartbeat-timeout", "30",
          cwd=tmp_path, check=True, timeout=60)
    agent, zygote = agents(run_dir)["node2"]
    os.kill(agent, signal.SIGKILL)
    wait_for(lambda: gone(agent) and gone(zygote), 30, "node2's agent and zygote to die")
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "many"
[[steps]]
id = "s/{i}"
array = "1-2000"
call = "os:getpid"
retries = 1
""")
    r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert [(e.node, e.reason) for e in of(run_dir, E.NodeLost)] == [("node2", "could not reach the agent")]
    exits = of(run_dir, E.Exit)
    lost = [e.step for e in exits if e.outcome == "lost"]
    assert len(lost) == len(set(lost)) <= 1, lost  # node2 held one core: one step at most was on it
    assert sorted(e.step for e in exits if e.outcome == "succeeded") == sorted(f"s/{i}" for i in range(1, 2001))
    assert {e.node for e in exits if e.outcome == "succeeded"} == {"node1"}
    # Nothing went wrong inside the coordinator on the way: a caught exception (acting on a
    # decision, handling a message) is counted as an "error:" kind of dropped input and
    # logged once; the fleet would go on, so only these say it happened.
    st = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
    assert st.returncode == 0, st.stdout + st.stderr
    dropped = json.loads(st.stdout)["dropped"]
    assert not {k: v for k, v in dropped.items() if k.startswith("error:")}, dropped
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=60)
    assert_nothing_left(run_dir)
    log = (run_dir / "coordinator.log").read_text()
    assert "further failures of this kind are counted" not in log, log[-4000:]


# --- 2. an agent stopped -------------------------------------------------------------------

def test_an_agent_stopped_past_the_timeout_is_fenced_its_late_reports_are_dropped_and_nothing_runs_twice(
        tmp_path, procs):
    run_dir = procs.up(tmp_path)
    # Steps of 2 s: well past the fence (1 s after the agent's last word), so the
    # stopped agent's step is surely killed before it could finish.
    suite = steps_suite(tmp_path / "s.toml", "stop-agent", 3, 2.0, retries=1)
    steps = [f"s/{i}" for i in range(1, 4)]
    runner = procs.start("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    agent, zygote = agents(run_dir)["node1"]
    victim = wait_for(lambda: nth_start_on(run_dir, "node1", 1), 30, "a step started on node1")
    os.kill(agent, signal.SIGSTOP)
    try:
        # The zygote hears no Tick for 0.5 x timeout and kills the step: before the
        # coordinator, at 1 x timeout, declares the agent lost and runs the step elsewhere.
        wait_for(lambda: gone(victim.pid), 3 * HB_TIMEOUT, "the zygote to fence the stopped agent's step")
        lost = wait_for(lambda: of(run_dir, E.NodeLost, node="node1"), 3 * HB_TIMEOUT, "node1 to be lost")[0]
        # When the zygote fenced: the time its line was written to node1's log, the last
        # line there while the agent sleeps (a time the test took would be late whenever
        # the test itself is held up; the system's file time is taken at the write).
        agent_log = run_dir / "agents" / "node1.log"
        assert "stopping every step (fencing)" in agent_log.read_text().splitlines()[-1], agent_log.read_text()
        assert agent_log.stat().st_mtime < lost.t
        retry = wait_for(lambda: of(run_dir, E.Started, step=victim.step, attempt=2), 30, "the retry to start")[0]
        assert retry.node == "node2"
        assert psutil.Process(agent).status() == psutil.STATUS_STOPPED  # still asleep all along
    finally:
        os.kill(agent, signal.SIGCONT)
    # Woken, it reports what it has (now stale) and is told to stop: it exits.
    wait_for(lambda: gone(agent), 10, "the woken agent to exit")
    assert gone(zygote)
    log = (run_dir / "agents" / "node1.log").read_text()
    assert "stopping:" in log, log

    def dropped():
        r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=30)
        d = json.loads(r.stdout)["dropped"] if r.returncode == 0 else {}
        return {k: v for k, v in d.items() if k.startswith("unknown:")}
    late = wait_for(dropped, 10, "the coordinator to count the woken agent's late reports as dropped")
    assert sum(late.values()) >= 1, late
    rc, out, err = procs.finish(runner, 60)
    assert rc == 0, out + err
    # Nothing from the stopped agent was taken as an outcome: one exit per attempt, and
    # the first attempt's is the coordinator's own "lost".
    assert [e.outcome for e in of(run_dir, E.Exit, step=victim.step)] == ["lost", "succeeded"]
    assert_each_ran_once(run_dir, steps)
    assert_audit_clean(run_dir, tmp_path, steps)


# --- 3. the coordinator killed -------------------------------------------------------------

def test_a_killed_coordinator_leaves_no_process_and_a_new_run_finishes_only_what_was_left(tmp_path, procs):
    run_dir = procs.up(tmp_path)
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "kill-coordinator"
[[steps]]
id = "quick/{i}"
array = "1-4"
call = "fleet_steps:once"
args = { seconds = 0.2 }
[[steps]]
id = "slow/{i}"
array = "1-2"
call = "fleet_steps:once"
args = { seconds = 1.5 }
""")
    quick, slow = [f"quick/{i}" for i in range(1, 5)], ["slow/1", "slow/2"]
    runner = procs.start("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    wait_for(lambda: len(of(run_dir, E.Exit, outcome="succeeded")) == 4 and len(of(run_dir, E.Started)) == 6,
             30, "the quick steps to succeed and both slow ones to start")
    coordinator = of(run_dir, E.FleetStarting)[0].pid
    os.kill(coordinator, signal.SIGKILL)
    assert_nothing_left(run_dir, timeout=HB_TIMEOUT + 1.0)
    rc, out, err = procs.finish(runner, 30)
    assert rc == 5, out + err  # lost, not stopped
    # The follower says what happened, from the stream's tail: no fleet_down came.
    assert f"its coordinator (pid {coordinator} on " in err and "ended without stopping it: killed or crashed" in err, err
    assert str(run_dir / "coordinator.log") in err and "run the suite again to finish it" in err, err
    assert sorted(e.step for e in of(run_dir, E.Exit)) == quick

    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "2", *HB, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    second = sessions(run_dir)[-1]
    assert sorted(e.step for e in second if isinstance(e, E.Skipped)) == quick
    assert sorted(e.step for e in second if isinstance(e, E.Start)) == slow
    # The dead coordinator's lease was taken over at once (same host, no such pid), not
    # after --stale-after (10 minutes here), and the steps its journal says it was
    # running were adopted.
    adopted = [e for e in second if isinstance(e, E.Adopted)]
    assert sorted(e.step for e in adopted) == slow
    assert {e.previous["pid"] for e in adopted} == {coordinator}
    log = (run_dir / "coordinator.log").read_text()
    assert re.search(rf"took over the run directory's lease \(generation 1\) of fleet \S+, pid {coordinator} "
                     r"on host \S+: its holder is gone", log), log
    assert not list((run_dir / ".fleet").glob("lease.adopt.*"))  # removed once taken: none pile up
    assert_each_ran_once(run_dir, quick + slow)
    assert_audit_clean(run_dir, tmp_path, quick + slow)
    # The report tells the two runs apart: the next fleet said the dead one was gone
    # (fleet_gone, before its own fleet_starting), so neither session is "in progress".
    [gone] = of(run_dir, E.FleetGone)
    assert gone.pid == coordinator and gone.gone == of(run_dir, E.FleetStarting)[0].fleet
    for which in ("1", "-1"):
        r = fleet("report", str(run_dir), "--json", "--session", which, cwd=tmp_path, timeout=60)
        rep = json.loads(r.stdout)
        assert rep["sessions"] == 2 and rep["in_progress"] is False, (which, rep["notes"])
    text = fleet("report", str(run_dir), "--session", "1", cwd=tmp_path, timeout=60).stdout
    assert f"its fleet ended without fleet_down (its coordinator killed or crashed), as the next fleet found: " \
           f"{gone.gone} (pid {coordinator} on " in text, text
    assert_nothing_left(run_dir)


def test_a_fleet_run_following_a_frozen_coordinator_gives_up_after_the_silence_and_says_so(tmp_path, procs):
    # Frozen (SIGSTOP) is what a coordinator on an unreachable host looks like from here:
    # its pid lives, nothing answers. The wait gives up after FLEET_RUN_SILENCE s.
    run_dir = procs.up(tmp_path)
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "frozen"
[[steps]]
id = "long"
command = ["sleep", "60"]
""")
    runner = procs.start("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path,
                         extra_env={"FLEET_RUN_SILENCE": "3"})
    wait_for(lambda: len(of(run_dir, E.Started)) == 1, 30, "the step to start")
    coordinator = of(run_dir, E.FleetStarting)[0].pid
    os.kill(coordinator, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        rc, out, err = procs.finish(runner, 30)
        waited = time.monotonic() - t0
    finally:
        os.kill(coordinator, signal.SIGKILL)
    assert rc == 5, out + err
    assert f"(pid {coordinator} on {socket.gethostname()}) has not answered for " in err, err
    assert "gone or frozen, or its host is unreachable" in err and "FLEET_RUN_SILENCE" in err, err
    assert "went down" not in err and "Traceback" not in err, err
    assert waited >= 3, waited  # not before the silence it was given
    assert_nothing_left(run_dir, timeout=HB_TIMEOUT + 5.0)


# --- 4. two fleets on one run directory ----------------------------------------------------

def _tally(stdout: str) -> Counter:
    """'suite 'x': 16 succeeded, 14 skipped in 3.1 s' -> Counter."""
    line = [l for l in stdout.splitlines() if l.startswith("suite ") and " in " in l][-1]
    words = line.split(":", 1)[1].rsplit(" in ", 1)[0].split(",")
    return Counter({w.split()[1]: int(w.split()[0]) for w in words})


def test_two_fleets_started_at_different_times_on_one_run_directory_run_each_step_exactly_once(tmp_path, procs):
    # The second fleet comes later: once the first has started steps, which wait for the
    # gate until the second has started one too (however late it comes up under load).
    gate = tmp_path / "go"
    suite = steps_suite(tmp_path / "s.toml", "two-fleets", 30, 0.3, first=0, run_dir="run", gate=gate)
    run_dir = tmp_path / "run"
    steps = [f"s/{i}" for i in range(30)]
    first, second = two_fleets_gated(run_dir, gate, lambda: procs.start("run", str(suite), cwd=tmp_path),
                                     lambda: procs.start("run", str(suite), cwd=tmp_path))
    (rc1, out1, err1), (rc2, out2, err2) = procs.finish(first, 60), procs.finish(second, 60)
    assert rc1 == 0 and rc2 == 0, out1 + err1 + out2 + err2
    fleets = [e.fleet for e in of(run_dir, E.FleetStarting)]
    assert len(fleets) == 2
    # Each fleet met steps the other held: "elsewhere" naming the other as holder, and
    # later "skipped" by it once its marker appeared.
    # (A holder of "" is a claim released between the attempt and the look at it.)
    holders = {e.holder for e in of(run_dir, E.Elsewhere)}
    assert set(fleets) <= holders <= set(fleets) | {""}, holders
    by = [e.by for e in of(run_dir, E.Skipped) if e.by is not None]
    assert by and set(by) <= set(fleets) | {""}, by
    t1, t2 = _tally(out1), _tally(out2)
    assert t1["succeeded"] > 0 and t2["succeeded"] > 0, (out1, out2)
    assert t1["succeeded"] + t2["succeeded"] == 30
    assert_each_ran_once(run_dir, steps)
    assert_audit_clean(run_dir, tmp_path, steps)
    assert_nothing_left(run_dir)


# --- 5. shards of a job array --------------------------------------------------------------

def owner_by_id(pending: list[int], k: int, n: int) -> list[int]:
    """fleet's rule: the task's own id decides (id mod N), whatever is pending."""
    return [t for t in pending if t % n == k]


def slice_pending(pending: list[int], k: int, n: int) -> list[int]:
    """The unsafe rule: shard k takes every n-th entry of what is pending when it starts."""
    return pending[k::n]


def replay(rule, timeline: list[tuple[float, str, int]], tasks: int, n: int, slots: int, duration: float,
           startup: float) -> dict[str, set[int]]:
    """Replay start/kill events against an assignment rule, in pure Python: a shard
    that (re)starts looks, `startup` seconds later, at what is not done, takes its part
    by `rule`, and runs it `slots` at a time, skipping what is done by then (as an
    array job checking output files would); a kill loses its unfinished work. Returns
    the tasks that no shard finished, that more than one finished, and that two live
    shards held at once (two owners)."""
    dt = 0.005
    done: Counter = Counter()
    live: dict[int, dict] = {}
    contested: set[int] = set()
    todo = sorted(timeline)
    t = 0.0
    while todo or any(s["queue"] or s["inflight"] or s["ready_at"] > t for s in live.values()):
        while todo and todo[0][0] <= t:
            _, what, k = todo.pop(0)
            if what == "start":
                live[k] = {"ready_at": t + startup, "queue": None, "inflight": {}}
            else:
                live.pop(k, None)
        for s in live.values():
            for task, end in list(s["inflight"].items()):
                if end <= t:
                    del s["inflight"][task]
                    done[task] += 1
        for k, s in live.items():
            if s["queue"] is None and t >= s["ready_at"]:
                s["queue"] = rule([x for x in range(tasks) if not done[x]], k, n)
            while s["queue"] and len(s["inflight"]) < slots:
                x = s["queue"].pop(0)
                if not done[x]:
                    s["inflight"][x] = t + duration
        held = Counter(x for s in live.values() for x in (s["queue"] or []) + list(s["inflight"]) if not done[x])
        contested |= {x for x, c in held.items() if c > 1}
        t += dt
        assert t < 600, "the replay did not end"
    return {"none": {x for x in range(tasks) if done[x] == 0}, "twice": {x for x in done if done[x] > 1},
            "two owners": contested}


def test_replaying_a_timeline_tells_the_stable_owner_rule_from_slicing_the_pending_list():
    # Shards started 0.5 s apart, 1 and 3 killed early and restarted when less is pending.
    timeline = [(0.0, "start", 0), (0.5, "start", 1), (1.0, "start", 2), (1.5, "start", 3),
                (2.5, "kill", 1), (3.0, "kill", 3), (6.0, "start", 1), (6.5, "start", 3)]
    safe = replay(owner_by_id, timeline, 40, 4, 2, 0.3, 1.0)
    assert safe == {"none": set(), "twice": set(), "two owners": set()}
    unsafe = replay(slice_pending, timeline, 40, 4, 2, 0.3, 1.0)
    assert unsafe["none"] or unsafe["twice"] or unsafe["two owners"], unsafe


ARRAY = """
[suite]
name = "array"
run_dir = "run"
[[steps]]
id = "t/{i}"
array = "0-39"
task = "{i}"
call = "fleet_steps:once"
args = { seconds = 0.8 }
"""


def test_four_shards_started_killed_and_restarted_at_different_times_give_every_task_one_owner_and_one_outcome(
        tmp_path, procs):
    suite = write_suite(tmp_path / "array.toml", ARRAY)
    run_dir = tmp_path / "run"
    tasks = [f"t/{i}" for i in range(40)]
    t0 = time.monotonic()
    timeline: list[tuple[float, str, int]] = []
    runs: dict[int, subprocess.Popen] = {}
    spawned: dict[int, float] = {}

    def launch(k: int) -> None:
        spawned.setdefault(k, time.time())
        # Short heartbeats: an agent whose coordinator dies stops its steps within one.
        runs[k] = procs.start("run", str(suite), "--shard", f"{k}/4", *HB, cwd=tmp_path,
                              extra_env={"FLEET_TEST_SHARD": str(k)})
        timeline.append((time.monotonic() - t0, "start", k))

    def coordinator(k: int) -> int:
        path = run_dir / f"fleet-{socket.gethostname()}-{runs[k].pid}.json"
        return wait_for(lambda: path.exists() and json.loads(path.read_text())["pid"], 30, f"shard {k}'s fleet")

    def kill(k: int, hard: bool) -> int:
        """SIGKILL the shard's `fleet run` (its process group); hard: its embedded
        coordinator too, as a batch system ending the job would. Either way nothing of
        that fleet may remain."""
        pid = coordinator(k)
        fam = family(pid)
        os.killpg(runs[k].pid, signal.SIGKILL)
        if hard:
            os.kill(pid, signal.SIGKILL)
        timeline.append((time.monotonic() - t0, "kill", k))
        runs[k].communicate(timeout=30)
        wait_for(lambda: all(gone(p) for p in fam), 15, f"shard {k}'s embedded fleet to go down with it")
        return pid

    for k in range(4):
        if k:
            time.sleep(0.5)  # deliberate: array elements start at different times
        launch(k)
    def fresh_pair(k: int) -> bool:
        """Shard k has finished 2 tasks, its coordinator has recorded them, and both its
        slots have just started new ones: nothing of it is near its end (a task that had
        published its output but not yet been recorded would, rightly, run again: at
        least once, not exactly once). The record is looked for because a node's window
        starts the next task the moment one ends, before its coordinator hears of it."""
        ns = [n for n in notes(run_dir) if n.shard == str(k)]
        ended = {n.pid for n in ns if n.what == "end"}
        running = [n.t for n in ns if n.what == "start" and n.pid not in ended]
        # (0.3 s into a task of 0.8 s: a loaded machine's poll of these files may take
        # longer than the 0.15 s this allowed at first, and miss every wave.)
        if not (len(ended) >= 2 and len(running) == 2 and time.time() - min(running) < 0.3):
            return False
        return {n.step for n in ns if n.what == "end"} <= {e.step for e in of(run_dir, E.Exit)}

    wait_for(lambda: fresh_pair(1), 60, "shard 1 to finish 2 tasks and start 2 more")
    kill(1, hard=False)
    wait_for(lambda: fresh_pair(3), 60, "shard 3 to finish 2 tasks and start 2 more")
    hard_killed = kill(3, hard=True)
    for k in (0, 2):
        rc, out, err = procs.finish(runs[k], 60)
        assert rc == 0, out + err
    left = [t for t in tasks if not ends(run_dir)[t]]
    assert left and all(int(t[2:]) % 2 == 1 for t in left), left  # only shards 1 and 3 have work left
    launch(1)
    time.sleep(0.5)  # deliberate
    launch(3)
    for k in (1, 3):
        rc, out, err = procs.finish(runs[k], 60)
        assert rc == 0, out + err

    # Every task: exactly one outcome (audit of the whole suite) ...
    assert_audit_clean(run_dir, tmp_path, tasks, "--suite", str(suite))
    # ... run, every time it was started, by the one shard that owns it (id mod 4) ...
    ns = notes(run_dir)
    wrong = [n for n in ns if n.what == "start" and int(n.step[2:]) % 4 != int(n.shard)]
    assert not wrong, wrong
    assert_each_ran_once(run_dir, tasks)
    # ... and the hard-killed shard's interrupted tasks were adopted on its restart.
    adopted = [e for e in of(run_dir, E.Adopted) if e.previous["pid"] == hard_killed]
    assert adopted and all(int(e.step[2:]) % 4 == 3 for e in adopted)
    assert json.loads((run_dir / "shards.json").read_text()) == {"shards": 4, "generation": 1}

    # The same timeline replayed: the stable rule gives one owner per task, the unsafe
    # slicing of the pending list does not.
    startup = statistics.median(min(n.t for n in ns if n.shard == str(k) and n.what == "start") - spawned[k]
                                for k in range(4))
    safe = replay(owner_by_id, timeline, 40, 4, 2, 0.85, startup)
    assert safe == {"none": set(), "twice": set(), "two owners": set()}, (timeline, startup)
    unsafe = replay(slice_pending, timeline, 40, 4, 2, 0.85, startup)
    assert unsafe["none"] or unsafe["twice"] or unsafe["two owners"], (timeline, startup, unsafe)
    assert_nothing_left(run_dir)


def test_a_run_with_another_shard_count_is_refused_unless_it_starts_a_new_generation(tmp_path):
    suite = steps_suite(tmp_path / "s.toml", "generations", 4, 0.05, first=0, run_dir="run")
    run_dir = tmp_path / "run"
    assert fleet("run", str(suite), "--shard", "0/2", cwd=tmp_path, timeout=60).returncode == 0
    assert json.loads((run_dir / "shards.json").read_text()) == {"shards": 2, "generation": 1}
    r = fleet("run", str(suite), "--shard", "0/3", cwd=tmp_path, timeout=60)
    assert r.returncode == 2
    assert "split 2 ways" in r.stderr and "--new-generation" in r.stderr, r.stderr
    assert json.loads((run_dir / "shards.json").read_text()) == {"shards": 2, "generation": 1}
    assert sorted(ends(run_dir)) == ["s/0", "s/2"]
    r = fleet("run", str(suite), "--shard", "0/3", "--new-generation", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((run_dir / "shards.json").read_text())
    assert (rec["shards"], rec["generation"], rec["previous"]["shards"]) == (3, 2, 2)
    assert sorted(ends(run_dir)) == ["s/0", "s/2", "s/3"]  # 0 was done; 3 is shard 0's of 3


def test_a_step_whose_dependency_another_shard_owns_waits_for_its_marker_or_is_refused_with_no_wait_foreign(
        tmp_path, procs):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "foreign"
run_dir = "run"
[[steps]]
id = "make"
task = "0"
call = "fleet_steps:once"
args = { seconds = 0.3 }
[[steps]]
id = "use"
task = "1"
call = "fleet_steps:once"
args = { seconds = 0.1 }
deps = ["make"]
""")
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--shard", "1/2", "--no-wait-foreign", cwd=tmp_path, timeout=60)
    assert r.returncode == 2
    assert "'use'" in r.stderr and "depends on 'make'" in r.stderr and "shard 0/2" in r.stderr, r.stderr
    assert not ends(run_dir)
    waiter = procs.start("run", str(suite), "--shard", "1/2", "--stale-after", "4", cwd=tmp_path)
    wait_for(lambda: of(run_dir, E.StepDeclared, step="make", foreign=True), 30, "shard 1 to submit")
    time.sleep(1.5)  # deliberate: more than one look at the markers; nothing may start
    assert not notes(run_dir) and waiter.poll() is None
    r = fleet("run", str(suite), "--shard", "0/2", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    rc, out, err = procs.finish(waiter, 30)
    assert rc == 0, out + err
    ns = {(n.what, n.step): n.t for n in notes(run_dir)}
    assert ns[("start", "use")] > ns[("end", "make")]
    assert of(run_dir, E.Skipped, step="make", by="another shard")
    assert_each_ran_once(run_dir, ["make", "use"])


# --- 6. claims: stale adopted, fresh respected ---------------------------------------------

def hand_claim(run_dir: Path, step: str, pid: int, age: float = 0.0, fleet_id: str = "by-hand") -> Path:
    """A claim as store.claim writes it, written by another fleet (this test)."""
    d = records.step_dir(run_dir, step) / ".fleet"
    d.mkdir(parents=True, exist_ok=True)
    now = time.time()
    path = d / "claim"
    path.write_text(json.dumps({"fleet": fleet_id, "host": socket.gethostname(), "pid": pid, "attempt": 1,
                                "at": now - age, "generation": 1}))
    if age:
        os.utime(path, (now - age, now - age))
    return path


def test_a_stale_or_dead_claim_is_adopted_and_a_fresh_one_is_left_to_its_holder(tmp_path, procs):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "claims"
run_dir = "run"
[[steps]]
id = "c{i}"
array = "1-4"
call = "fleet_steps:once"
args = { seconds = 0.2 }
""")
    run_dir = tmp_path / "run"
    holder = procs.other(["sleep", "120"])  # a live process of this host holds the fresh claims
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    fresh_released = hand_claim(run_dir, "c1", holder.pid)
    fresh_settled = hand_claim(run_dir, "c2", holder.pid)
    hand_claim(run_dir, "c3", holder.pid, age=60)  # stale: not refreshed for a minute
    hand_claim(run_dir, "c4", dead.pid)  # dead: no such process on this host
    runner = procs.start("run", str(suite), "--stale-after", "5", cwd=tmp_path)

    def seen() -> bool:  # the holder keeps its claims fresh meanwhile (a loaded machine's start can take 5 s)
        for p in (fresh_released, fresh_settled):
            os.utime(p)
        return len(of(run_dir, E.Elsewhere)) == 3 and len(of(run_dir, E.Adopted)) == 2

    # (the stale one is first found held: stale only once watched unchanged on this fleet's
    # own clock, fleet.wire.sightings; then reclaimed and adopted)
    wait_for(seen, 60, "the fresh claims to be seen and the others adopted")
    assert sorted(e.step for e in of(run_dir, E.Elsewhere)) == ["c1", "c2", "c3"]
    assert {e.holder for e in of(run_dir, E.Elsewhere)} == {"by-hand"}
    adopted = {e.step: e.previous for e in of(run_dir, E.Adopted)}
    assert sorted(adopted) == ["c3", "c4"] and adopted["c4"]["pid"] == dead.pid
    for step, why_dead in (("c3", False), ("c4", True)):
        rec = json.loads((records.step_dir(run_dir, step) / ".fleet" / "adopt.1").read_text())
        assert rec["dead"] is why_dead and rec["from"]["fleet"] == "by-hand"
        assert why_dead or rec["stale_s"] >= 5
    for step in ("c1", "c2"):
        assert not (records.step_dir(run_dir, step) / ".fleet" / "adopt.1").exists()
    # The holder stays alive and keeps its claims fresh for a while: they are not taken.
    deadline = time.monotonic() + 2.5  # deliberate: two looks at the claims (every 1.25 s)
    while time.monotonic() < deadline:
        for p in (fresh_released, fresh_settled):
            os.utime(p)
        time.sleep(0.2)
    assert not {n.step for n in notes(run_dir)} & {"c1", "c2"}
    assert runner.poll() is None
    # c2's holder finishes it (marker, then release); c1's holder lets go without a word.
    spec = checked_suite(suite, check_inputs=False)[0].step("c2")
    store.write_done(run_dir, spec, {"fleet": "by-hand"})
    fresh_settled.unlink()
    fresh_released.unlink()
    rc, out, err = procs.finish(runner, 60)
    assert rc == 0, out + err
    assert [e.step for e in of(run_dir, E.Reclaim)] == ["c3", "c1"]
    assert of(run_dir, E.Skipped, step="c2", by="by-hand")
    assert_each_ran_once_but(run_dir, ["c1", "c3", "c4"])


def assert_each_ran_once_but(run_dir: Path, steps: list[str]) -> None:
    ns = notes(run_dir)
    assert not [n for n in ns if n.what.startswith("overlap")]
    assert Counter(n.step for n in ns if n.what == "end") == Counter(steps)


def _race(run_dir: str, spec: StepSpec, who: str, barrier, results) -> None:
    # The widest window: every racer reads the claim before any of them acts on what it
    # read, so only the atomic creates (claim, adopt.<generation>) can pick the winner.
    read = records.read_claim
    cur, deadline = read(Path(run_dir), spec.id), time.monotonic() + 60
    while cur is not None and not records.holder_dead(cur.rec) and not records.claim_stale(cur, 5.0) \
            and time.monotonic() < deadline:
        time.sleep(0.05)  # (a stale claim: stale once watched unchanged on this process's own clock)
        cur = read(Path(run_dir), spec.id)
    records.read_claim = lambda *a: (read(*a), time.sleep(0.05))[0]
    barrier.wait()
    c = store.claim(Path(run_dir), spec, who, 1, 5.0, 0)
    results.put((who, c.kind, c.adopted is not None))


@pytest.mark.parametrize("setup", ["none", "dead", "stale"])
def test_processes_racing_for_one_claim_or_to_adopt_one_stale_claim_have_exactly_one_winner(tmp_path, setup):
    """Eight real processes race, three generations in a row: for a claim nobody holds
    (then for the exited winner's), for one whose holder is dead, or for one that was
    not refreshed for longer than stale_after although its holder lives."""
    ctx = multiprocessing.get_context("fork")
    spec = StepSpec(id="contested", order=0, call="fleet_steps:once")
    racers = 8
    path = records.step_dir(tmp_path, spec.id) / ".fleet" / "claim"
    path.parent.mkdir(parents=True)
    if setup == "dead":
        dead = subprocess.Popen(["true"])
        dead.wait(timeout=10)
        hand_claim(tmp_path, spec.id, dead.pid)
    for generation in range(1, 4):
        if setup == "stale":
            rec = json.loads(path.read_text()) if path.exists() else {"fleet": "old", "attempt": 1, "generation": 1}
            rec.update(host=socket.gethostname(), pid=os.getpid())  # alive, but silent for a minute
            path.write_text(json.dumps(rec))
            os.utime(path, (time.time() - 60,) * 2)
        before = json.loads(path.read_text())["generation"] if path.exists() else 0
        barrier, results = ctx.Barrier(racers), ctx.Queue()
        ps = [ctx.Process(target=_race, args=(str(tmp_path), spec, f"racer-{generation}-{i}", barrier, results))
              for i in range(racers)]
        for p in ps:
            p.start()
        try:
            got = [results.get(timeout=30) for _ in ps]
        finally:
            for p in ps:
                p.join(timeout=30)
                if p.exitcode is None:
                    p.kill()
                    p.join()
        assert [p.exitcode for p in ps] == [0] * racers
        winners = [g for g in got if g[1] == store.Claim.OURS]
        assert len(winners) == 1, got
        assert all(g[1] == store.Claim.ELSEWHERE for g in got if g not in winners), got
        held = json.loads(path.read_text())
        assert held["fleet"] == winners[0][0]
        assert held["generation"] == before + 1
        assert winners[0][2] == bool(before)  # adopted, unless nobody held it
        if before:
            adopt = json.loads((path.parent / f"adopt.{before}").read_text())
            assert adopt["fleet"] == held["fleet"]
        # The winner has exited (joined): its claim is a dead holder's for the next round.


# --- 7. the restart counter ----------------------------------------------------------------

def test_a_step_that_keeps_failing_is_stopped_after_max_attempts_across_runs_and_audited_as_stopped(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "restarts"
run_dir = "run"
[[steps]]
id = "doomed"
call = "fleet_steps:always_fails"
retries = 0
""")
    run_dir = tmp_path / "run"
    for n in (1, 2):
        r = fleet("run", str(suite), "--max-attempts", "2", cwd=tmp_path, timeout=60)
        assert r.returncode == 1 and "failed" in r.stdout, r.stdout + r.stderr
        assert len([x for x in notes(run_dir) if x.what == "start"]) == n
    r = fleet("run", str(suite), "--max-attempts", "2", cwd=tmp_path, timeout=60)
    assert r.returncode == 1
    assert "stopped" in r.stdout and "2 attempts of this definition recorded without success (limit 2)" in r.stdout, r.stdout
    assert len([x for x in notes(run_dir) if x.what == "start"]) == 2  # not run a third time
    assert len(of(run_dir, E.Start)) == 2
    a = audit(run_dir, tmp_path)
    assert a["exit"] == 0, a
    assert a["steps"]["doomed"]["status"] == "stopped" and a["steps"]["doomed"]["attempts"] == 2
    assert "limit 2" in a["steps"]["doomed"]["reason"]
