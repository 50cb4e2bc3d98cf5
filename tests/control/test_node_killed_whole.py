"""A node's agent and zygote killed together (SIGKILL to the agent's process group, as
`kill -9 -- -PGID` or a batch system does) or frozen together (SIGSTOP to that group):
each step runs in a process group of its own, so nothing of the node was left to stop
it, and the coordinator retried it elsewhere while it ran on (fleet.node.watcher). Real
fleets; the process table, and each attempt's own notes, checked."""

from __future__ import annotations

import os
import random
import re
import signal
import sys
from pathlib import Path

import psutil
import pytest

from fleetharness import assert_nothing_left, cgroup1_unwritable, fleet, records, spawn, tagged, wait_for, write_suite

from fleet.wire import events as E

HB_TIMEOUT = 3.0
HB = ["--heartbeat", "0.2", "--heartbeat-timeout", f"{HB_TIMEOUT:g}"]
# Each step's sleep: long past the node's loss, had it survived it; unique to this test
# (its processes are found by it).
SECONDS = f"9.{random.randrange(1000, 10000)}"

# Each attempt, at its start: a note, and "overlap" if a process of an earlier attempt of
# its step is alive; the pids of its processes then (the step's own and what it started);
# at its end (had it lived on): a note.
NOTES_PY = '''
import os, subprocess, sys, time
from pathlib import Path

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"

def family(pid):
    out = [pid]
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = [int(p) for p in f.read().split()]
        except OSError:
            kids = []
        for kid in kids:
            out += family(kid)
    return out

def note(where, what):
    step, attempt = os.environ["FLEET_STEP"], os.environ["FLEET_ATTEMPT"]
    with open(Path(where, "notes"), "a") as f:
        f.write(f"{what} {step} {attempt} {time.time():.6f}\\n")

def begin(where, root, helper=None):
    # once what it started runs: 3 processes (a command's sh, its subshell and sleep; a
    # call's own, its sh and sleep), ``helper`` (the command's note taker) aside
    while len([p for p in family(root) if p != helper]) < 3:
        time.sleep(0.01)
    step, attempt = os.environ["FLEET_STEP"], int(os.environ["FLEET_ATTEMPT"])
    for earlier in range(1, attempt):
        pids = Path(where, f"pids.{step}.{earlier}")
        if pids.exists() and any(alive(int(p)) for p in pids.read_text().split()):
            note(where, "overlap")
    note(where, "start")
    mine = [p for p in family(root) if p != helper]
    Path(where, f"pids.{step}.{attempt}.tmp").write_text(" ".join(map(str, mine)))
    os.replace(Path(where, f"pids.{step}.{attempt}.tmp"), Path(where, f"pids.{step}.{attempt}"))

def call_step(where, seconds):
    child = subprocess.Popen(["sh", "-c", f"sleep {seconds}; :"])  # its grandchild: sleep
    begin(where, os.getpid())
    child.wait()
    note(where, "end")

if __name__ == "__main__":
    begin(sys.argv[1], os.getppid(), os.getpid()) if sys.argv[2] == "begin" else note(sys.argv[1], "end")
'''


def command_of(where: Path, seconds: str) -> str:
    # A grandchild sleep (sh, its subshell, sleep); the notes taken once it runs.
    py = f"{sys.executable} {where / 'lost_notes.py'} {where}"
    return f"sh -c 'sleep {seconds}; :' & {py} begin; wait; {py} end"


def suite_of(where: Path, kinds: list[str], seconds: str) -> Path:
    steps = []
    for kind in kinds:
        body = (f'command = "{command_of(where, seconds)}"' if kind == "command" else
                f'call = "lost_notes:call_step"\nargs = {{ where = "{where}", seconds = "{seconds}" }}')
        steps.append(f'[[steps]]\nid = "{kind}"\n{body}\nretries = 1\n')
    return write_suite(where / "s.toml", '[suite]\nname = "whole"\n' + "\n".join(steps))


def notes(where: Path) -> list[tuple[str, str, int]]:
    path = where / "notes"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(f[0], f[1], int(f[2])) for f in (line.split() for line in lines)]


def pids_of(where: Path, step: str, attempt: int) -> list[int]:
    path = where / f"pids.{step}.{attempt}"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def living(pids: list[int]) -> list[str]:
    """Those of pids that still run (a zombie does not: it is only not reaped yet)."""
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{pid} {p.status()} ppid {p.ppid()} {' '.join(p.cmdline())}")
        except psutil.NoSuchProcess:
            pass
    return out


def agent_of(run_dir: Path, node: str) -> int:
    return next(e.pid for e in records(run_dir) if isinstance(e, E.NodeJoined) and e.node == node)


def watchers_of(agent: int) -> list[str]:
    """The agent's watcher, while it runs (fleet.node.watcher.command: the agent's pid 2nd)."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        at = next((i for i, a in enumerate(cmd) if a.endswith("watcher.py")), None)
        if at is not None and cmd[at + 2:at + 3] == [str(agent)] and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(f"{p.pid} {' '.join(cmd)}")
    return out


def of(run_dir: Path, kind: type, **match) -> list:
    return [e for e in records(run_dir) if isinstance(e, kind) and all(getattr(e, k) == v for k, v in match.items())]


@pytest.fixture
def fleet_in(tmp_path):
    """tmp_path, its notes' module, and its fleet brought down (with what a failure left) after."""
    (tmp_path / "lost_notes.py").write_text(NOTES_PY)
    runs: list = []
    yield tmp_path, runs
    for p in runs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
    fleet("down", "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=60)
    for line in tagged(f"sleep {SECONDS}") + tagged(str(tmp_path)):  # (a failed test's leftovers)
        try:
            psutil.Process(int(line.split()[0])).kill()
        except psutil.Error:
            pass


def start_run(where: Path, runs: list, kinds: list[str], nodes: int):
    import subprocess
    from fleetharness import env
    run_dir = where / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", str(nodes), *HB, cwd=where, check=True, timeout=60)
    suite = suite_of(where, kinds, SECONDS)
    runs.append(subprocess.Popen([sys.executable, "-m", "fleet", "run", str(suite), "--run-dir", str(run_dir)],
                                 cwd=where, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True))
    return run_dir, runs[-1]


def test_a_node_killed_with_its_whole_process_group_takes_every_process_of_its_steps_with_it(fleet_in):
    where, runs = fleet_in
    run_dir, _ = start_run(where, runs, ["command", "call"], nodes=1)  # one node: both run there at once
    wait_for(lambda: pids_of(where, "command", 1) and pids_of(where, "call", 1), 60, "both steps to run")
    agent = agent_of(run_dir, "node1")
    assert len(watchers_of(agent)) == 1
    steps = pids_of(where, "command", 1) + pids_of(where, "call", 1)
    # (sh, its subshell, sleep; the call's process, its sh, sleep)
    assert len(steps) >= 5 and not [p for p in steps if not psutil.pid_exists(p)], steps
    os.killpg(os.getpgid(agent), signal.SIGKILL)  # the agent and its zygote
    wait_for(lambda: not living(steps), 2 * HB_TIMEOUT, "every process of the node's steps to end")
    wait_for(lambda: not watchers_of(agent), 30, "the watcher to exit, its work done")
    assert ("end", "command", 1) not in notes(where) and ("end", "call", 1) not in notes(where), notes(where)
    fleet("down", "--run-dir", str(run_dir), cwd=where, timeout=60)
    assert_nothing_left(run_dir, tag=f"sleep {SECONDS}")
    log = (run_dir / "agents" / "node1.log").read_text()
    assert "the agent is gone: ended" in log, log


@pytest.mark.parametrize("kind", ["command", "call"])
def test_a_step_whose_node_was_killed_whole_runs_again_elsewhere_only_once_its_first_attempt_is_gone(
        fleet_in, kind):
    where, runs = fleet_in
    run_dir, runner = start_run(where, runs, [kind], nodes=2)
    wait_for(lambda: pids_of(where, kind, 1), 60, "the step to run")
    first = pids_of(where, kind, 1)
    node = of(run_dir, E.Started, step=kind, attempt=1)[0].node
    os.killpg(os.getpgid(agent_of(run_dir, node)), signal.SIGKILL)
    wait_for(lambda: not living(first), 2 * HB_TIMEOUT, "every process of the first attempt to end")
    out, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, out + err
    # The retry, on the other node, saw nothing of the first attempt alive; the first never ended.
    assert [e.outcome for e in of(run_dir, E.Exit, step=kind)] == ["lost", "succeeded"]
    again = [e.node for e in of(run_dir, E.Started, step=kind, attempt=2)]
    assert len(again) == 1 and again != [node], again
    assert [n for n in notes(where)] == [("start", kind, 1), ("start", kind, 2), ("end", kind, 2)], notes(where)
    fleet("down", "--run-dir", str(run_dir), cwd=where, timeout=60)
    assert_nothing_left(run_dir, tag=f"sleep {SECONDS}")


def test_a_node_frozen_whole_has_its_steps_killed_before_the_coordinator_runs_them_elsewhere(fleet_in):
    where, runs = fleet_in
    run_dir, runner = start_run(where, runs, ["command"], nodes=2)
    wait_for(lambda: pids_of(where, "command", 1), 60, "the step to run")
    first = pids_of(where, "command", 1)
    node = of(run_dir, E.Started, step="command", attempt=1)[0].node
    agent = agent_of(run_dir, node)
    group = os.getpgid(agent)
    os.killpg(group, signal.SIGSTOP)  # the agent and its zygote: neither can fence the step
    try:
        wait_for(lambda: not living(first), 2 * HB_TIMEOUT, "the frozen node's step to be killed")
        lost = wait_for(lambda: of(run_dir, E.NodeLost, node=node), 10 * HB_TIMEOUT, "the node to be lost")[0]
        # The watcher acts at half the timeout; lost after all of it. When it acted: the time
        # its line, written once it had killed them, was written to the node's log, the last
        # line there while the node is frozen (not a time the test took: late whenever the
        # test itself is held up).
        node_log = run_dir / "agents" / f"{node}.log"
        assert "agent and zygote stopped for" in node_log.read_text().splitlines()[-1], node_log.read_text()
        assert node_log.stat().st_mtime < lost.t
        assert psutil.Process(agent).status() == psutil.STATUS_STOPPED  # asleep all along
    finally:
        os.killpg(group, signal.SIGCONT)
    out, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, out + err
    assert [e.outcome for e in of(run_dir, E.Exit, step="command")] == ["lost", "succeeded"]
    assert notes(where) == [("start", "command", 1), ("start", "command", 2), ("end", "command", 2)], notes(where)
    wait_for(lambda: not psutil.pid_exists(agent) or psutil.Process(agent).status() == psutil.STATUS_ZOMBIE,
             30, "the woken agent to exit")
    wait_for(lambda: not watchers_of(agent), 30, "its watcher to exit")
    fleet("down", "--run-dir", str(run_dir), cwd=where, timeout=60)
    assert_nothing_left(run_dir, tag=f"sleep {SECONDS}")


@pytest.mark.skipif(cgroup1_unwritable() is not None, reason=f"no writable cgroup v1 memory controller: "
                                                             f"{cgroup1_unwritable()}")
def test_what_left_its_steps_group_and_environment_is_ended_through_the_steps_memory_cgroup(fleet_in, monkeypatch):
    where, runs = fleet_in
    monkeypatch.setenv("FLEET_MEMLIMIT", "cgroup1")
    write_suite(where / "daemon.toml", f'[[steps]]\nid = "daemon"\nmemory = "64MB"\n'
                                       f'command = "setsid env -i sleep {SECONDS} & sleep {SECONDS}"\n')
    run_dir = where / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=where, check=True, timeout=60)
    runs.append(spawn("run", str(where / "daemon.toml"), "--run-dir", str(run_dir), cwd=where))
    def sleeps():
        return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", SECONDS]]
    daemon = [p for p in wait_for(lambda: len(sleeps()) == 2 and sleeps(), 60, "both sleeps")
              if os.getsid(p.pid) == p.pid]  # (setsid: the leader of a session of its own)
    assert len(daemon) == 1 and not psutil.Process(daemon[0].pid).environ(), daemon  # (env -i: no token)
    log = (run_dir / "agents" / "node1.log").read_text()
    cgroups = re.search(r"memory limits: cgroup v1 memory.limit_in_bytes \((\S+)\)", log).group(1)
    assert os.path.isdir(cgroups), log
    os.killpg(os.getpgid(agent_of(run_dir, "node1")), signal.SIGKILL)
    wait_for(lambda: not tagged(f"sleep {SECONDS}"), 2 * HB_TIMEOUT, "the step and its daemon to end")
    wait_for(lambda: not os.path.exists(cgroups), 30, "the steps' cgroups to be removed")
    fleet("down", "--run-dir", str(run_dir), cwd=where, timeout=60)
    assert_nothing_left(run_dir, tag=f"sleep {SECONDS}")
