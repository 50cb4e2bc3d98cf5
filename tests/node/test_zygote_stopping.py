"""A zygote stopping steps on its own clock (a step's timeout) and when told to (a
cancelling Kill, a Shutdown that leaves each step its own grace): a real zygote on real
pipes (see test_zygote.py), its steps real processes."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from fleet.wire.messages import Kill, Shutdown, Started

from test_zygote import (ZygoteProcess, assert_nothing_left, launch, read_json_when_there, subreaper,  # noqa: F401
                         zygote)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")


def test_a_step_past_its_timeout_gets_sigterm_and_is_reported_timed_out_with_its_group_gone(
        zygote, tmp_path, subreaper):
    z = zygote()
    t0 = time.monotonic()
    z.send(launch(tmp_path, "s", "steps:sleep_with_grandchild", timeout=1.0, grace=60.0))
    started = z.expect(Started)
    grandchild = read_json_when_there(tmp_path / "steps/s/pids.json")["grandchild"]
    exited = z.exited("s")
    took = time.monotonic() - t0
    assert (exited.outcome, exited.signal) == ("timed_out", signal.SIGTERM), exited
    assert exited.error == "timed out after 1 s; ended after SIGTERM"
    assert 0.9 <= took < 30.0, took  # at its timeout, not after its grace (60 s: far apart on a loaded machine)
    assert_nothing_left([started.pid], [started.pgid], [grandchild])


def test_a_step_that_ignores_sigterm_past_its_timeout_is_sigkilled_after_its_grace(zygote, tmp_path, subreaper):
    z = zygote()
    t0 = time.monotonic()
    z.send(launch(tmp_path, "s", "steps:ignore_sigterm", timeout=0.5, grace=1.0))  # (its sleep: 60 s)
    started = z.expect(Started)
    exited = z.exited("s")
    took = time.monotonic() - t0
    assert (exited.outcome, exited.signal) == ("timed_out", signal.SIGKILL), exited
    assert exited.error == "timed out after 0.5 s; SIGKILL after 1 s grace"
    assert 1.4 <= took < 30.0, took  # after its grace, and by SIGKILL, not its own end
    assert_nothing_left([started.pid], [started.pgid])


def test_a_step_within_its_timeout_succeeds_and_a_zygote_with_no_timers_serves_on(zygote, tmp_path):
    z = zygote()
    z.send(launch(tmp_path, "quick", kind="command", command=["true"], timeout=30.0))
    assert z.exited("quick").outcome == "succeeded"
    z.send(launch(tmp_path, "next", kind="command", command=["true"]))
    assert z.exited("next").outcome == "succeeded"


def test_a_cancelling_kill_stops_the_step_with_its_grace_and_reports_it_cancelled(zygote, tmp_path, subreaper):
    z = zygote()
    z.send(launch(tmp_path, "cmd", kind="command", command="sleep 60 & echo $! > bg; wait", grace=5.0))
    z.send(launch(tmp_path, "stubborn", "steps:ignore_sigterm", grace=0.5))
    first, second = z.expect(Started), z.expect(Started)
    read_json_when_there(tmp_path / "steps/stubborn/pids.json")
    z.send(Kill("cmd", 1, cancel=True))
    z.send(Kill("stubborn", 1, cancel=True))
    cmd, stubborn = z.exited("cmd"), z.exited("stubborn")
    assert (cmd.outcome, cmd.signal, cmd.error) == ("cancelled", signal.SIGTERM, "cancelled; ended after SIGTERM")
    assert (stubborn.outcome, stubborn.signal) == ("cancelled", signal.SIGKILL)
    assert_nothing_left([first.pid, second.pid], [first.pgid, second.pgid])


def test_a_shutdown_without_a_grace_gives_each_step_its_own(zygote, tmp_path, subreaper):
    z: ZygoteProcess = zygote(grace=0.1)
    z.send(launch(tmp_path, "patient", "steps:ignore_sigterm", grace=1.5))
    z.send(launch(tmp_path, "quick", "steps:ignore_sigterm", grace=0.2))
    a, b = z.expect(Started), z.expect(Started)
    for s in ("patient", "quick"):
        read_json_when_there(tmp_path / f"steps/{s}/pids.json")
    t0 = time.monotonic()
    z.send(Shutdown())
    quick = z.exited("quick")
    t_quick = time.monotonic() - t0
    patient = z.exited("patient")
    t_patient = time.monotonic() - t0
    assert quick.signal == patient.signal == signal.SIGKILL
    assert t_quick < 1.2 and 1.3 <= t_patient < 5.0, (t_quick, t_patient)
    assert z.wait() == 0
    assert_nothing_left([a.pid, b.pid], [a.pgid, b.pgid])


def test_a_step_the_drain_stops_says_so_and_a_signal_that_is_not_fleet_s_is_named(zygote, tmp_path, subreaper):
    # Before 2026-12-06 each said "cancelled; ended after SIGTERM": the drain's stop as a
    # `fleet cancel`, and a step the batch system's warning (SIGUSR1) ended as if SIGTERM had.
    z = zygote()
    usr1 = "import os, signal, time\nsignal.signal(signal.SIGTERM, lambda *a: os.kill(os.getpid(), signal.SIGUSR1))\n" \
           "open('up', 'w').close()\ntime.sleep(60)"
    z.send(launch(tmp_path, "drained", kind="command", command="echo up > up; sleep 60 & wait", grace=5.0))
    z.send(launch(tmp_path, "usr1", kind="command", command=[sys.executable, "-c", usr1], grace=5.0))
    z.send(launch(tmp_path, "status", kind="command", command="trap 'exit 138' TERM; echo up > up; sleep 60 & wait",
                  grace=5.0))
    started = [z.expect(Started) for _ in range(3)]
    for s in ("drained", "usr1", "status"):
        deadline = time.monotonic() + 20
        while not (tmp_path / "steps" / s / "up").exists():  # (its handler or trap is set)
            assert time.monotonic() < deadline, s
            time.sleep(0.01)
    z.send(Kill("drained", 1, cancel=True, why="drain"))
    z.send(Kill("usr1", 1, cancel=True, why="drain"))
    z.send(Kill("status", 1, cancel=True))
    drained, usr1_, status = z.exited("drained"), z.exited("usr1"), z.exited("status")
    assert (drained.outcome, drained.error) == ("cancelled", "stopped by the drain; ended after SIGTERM"), drained
    assert (usr1_.signal, usr1_.error) == (signal.SIGUSR1, "stopped by the drain; killed by SIGUSR1"), usr1_
    assert (status.returncode, status.error) == (138, "cancelled; exit status 138 (SIGUSR1)"), status
    assert_nothing_left([s.pid for s in started], [s.pgid for s in started])
