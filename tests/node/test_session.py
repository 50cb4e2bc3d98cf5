"""fleet.node.session on real processes: a session's other process groups are found in
/proc and signalled; one pass serves the signals of one moment."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from fleetharness import wait_for

from fleet.node import session


def test_the_groups_a_sessions_command_made_are_found_and_killed_and_its_own_group_is_left_to_the_caller():
    # A session leader (as a command step is) whose shell moves a job to a group of its own.
    p = subprocess.Popen(["bash", "-c", "set -m; sleep 4111 & echo $!; wait"], stdout=subprocess.PIPE,
                         start_new_session=True, text=True)
    job = None
    try:
        job = int(p.stdout.readline())
        assert os.getpgid(job) == job != p.pid and os.getsid(job) == p.pid
        session.FRESH_S, before = 0.0, session.FRESH_S  # (every look a new pass here)
        try:
            assert wait_for(lambda: session.groups(p.pid, p.pid), 10, "the job's group") == {job}
            assert session.groups(p.pid, job) == {p.pid}  # `but` is left out, whichever it is
            assert session.groups(os.getsid(0), os.getpgid(0)).isdisjoint({job, p.pid})
            assert session.signal_rest(p.pid, p.pid, signal.SIGKILL) == 1
        finally:
            session.FRESH_S = before
        assert p.wait(timeout=10) is not None  # its shell's `wait` ended with the job
        wait_for(lambda: not os.path.exists(f"/proc/{job}") or open(f"/proc/{job}/stat").read()
                 .split(") ")[1].startswith("Z"), 10, "the job's end")
    finally:
        for g in (p.pid, job):
            try:
                os.killpg(g, signal.SIGKILL)
            except (OSError, TypeError):  # (gone already, or never known)
                pass
        p.wait(timeout=10)


def test_one_pass_over_proc_serves_the_signals_sent_within_a_moment_of_it(monkeypatch):
    passes = []
    real = session.sessions
    monkeypatch.setattr(session, "sessions", lambda: passes.append(1) or real())
    monkeypatch.setattr(session, "_seen", (float("-inf"), {}))
    # "Within a moment" made a minute: on a loaded machine three calls can take longer
    # than the real FRESH_S (a twentieth of a second), and this test is of the rule, not of speed.
    monkeypatch.setattr(session, "FRESH_S", 60.0)
    for sid in (11, 12, 13):
        session.signal_rest(sid, sid, 0)  # (signal 0: nothing is sent)
    assert len(passes) == 1
    monkeypatch.setattr(session, "_seen", (time.monotonic() - 2 * session.FRESH_S, session._seen[1]))
    session.signal_rest(11, 11, 0)
    assert len(passes) == 2
