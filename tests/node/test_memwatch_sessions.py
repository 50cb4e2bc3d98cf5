"""Which processes are a step's to the agent's watchdog (fleet.node.memwatch), on real
processes: those of its session in whatever process group, and of the sessions they
made, however deep; and a step past its memory has all of them killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from fleet.node import memlimit, memwatch

# The "step": a session leader that starts a process in a group of its own, and one in a
# session of its own which starts another in a session of its own; then it waits.
STEP = """
import subprocess, sys, time
subprocess.Popen(["sleep", "61.25"], process_group=0)
code = "import subprocess, time; subprocess.Popen(['sleep', '62.75'], start_new_session=True); time.sleep(63.5)"
subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
time.sleep(64.25)
"""
TAGS = ("61.25", "62.75", "63.5", "64.25")


def tagged() -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if any(tag in cmd for tag in TAGS) and p.pid != os.getpid():
            out.append(p.pid)
    return out


def sleeping() -> list[int]:
    """The step's two sleeps, exec'd: each made its group or session before its exec. (A
    child only forked carries its parent's command line, tags and all, and is still in
    its parent's session: counted by tagged(), it is not yet what the test looks at.)"""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if p.info["cmdline"] in (["sleep", TAGS[0]], ["sleep", TAGS[1]]):
            out.append(p.pid)
    return out


def wait_for(what, within: float = 20.0):
    deadline = time.monotonic() + within
    while not (got := what()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def test_a_steps_processes_in_other_groups_and_in_sessions_it_made_are_counted_and_killed_with_it():
    step = subprocess.Popen([sys.executable, "-c", STEP], start_new_session=True)
    try:
        # the step, the python it started, 2 sleeps
        assert wait_for(lambda: len(tagged()) == 4 and len(sleeping()) == 2), (tagged(), sleeping())
        enf = memwatch.Enforcer(memlimit.Choice(memlimit.WATCHDOG))
        enf.watched[("s", 1)] = w = memwatch.Watched(step.pid, 1 << 40)
        enf.sample()
        assert len(w.sessions) == 3 and not w.killed, w  # its own, and the two sessions made under it
        found = enf._find()[("s", 1)]
        assert set(tagged()) <= set(found), (tagged(), found)
        w.limit = 1  # past it now
        enf.sample()
        assert w.killed and w.peak > 1
        assert wait_for(lambda: not tagged() and step.poll() is not None), tagged()
    finally:
        for pid in tagged() + [step.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        step.wait(timeout=30)
