"""A call step's function run to its end as a Python program is (fleet.node.stepend), its
end always reported (fleet.node.childreport), what it ran in other process groups of its
session stopped with it, and a set-up failure said in its log (fleet.node.stepdirs): a
real zygote on real pipes (see test_zygote.py), its steps real processes.

Call targets: tests/ending_steps.py ("ending_steps:NAME")."""

from __future__ import annotations

import os
import random
import signal
import sys
import time

import psutil
import pytest

from fleet.wire.messages import Started

from test_zygote import (ZygoteProcess, assert_nothing_left, launch, log_of, read_json_when_there,  # noqa: F401
                         subreaper, zygote)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")

PRELOAD = ("steps", "ending_steps")


# -- coroutines and generators ------------------------------------------------------------


def test_an_async_def_step_runs_its_body_and_what_its_coroutine_raises_fails_it(zygote, tmp_path):
    z = zygote(preload=PRELOAD)
    z.send(launch(tmp_path, "ok", "ending_steps:coroutine"))
    exited = z.exited("ok")
    assert exited.outcome == "succeeded", exited
    assert (tmp_path / "steps/ok/coroutine.txt").read_text() == "ran"
    assert "never awaited" not in log_of(tmp_path, "ok")
    z.send(launch(tmp_path, "bad", "ending_steps:coroutine_raises"))
    exited = z.exited("bad")
    assert (exited.outcome, exited.returncode) == ("failed", 1), exited
    assert exited.error == "ValueError: raised in the coroutine"
    assert "Traceback" in log_of(tmp_path, "bad")


@pytest.mark.parametrize("target,said", [
    ("generator", "ending_steps:generator is a generator function (it yields): calling it runs none of its body"),
    ("async_generator", "ending_steps:async_generator is an async generator function (it yields)"),
    ("returns_generator", "ending_steps:returns_generator returned a generator, and none of its body ran"),
])
def test_a_generator_step_fails_saying_its_body_would_not_run(zygote, tmp_path, target, said):
    z = zygote(preload=PRELOAD)
    z.send(launch(tmp_path, "g", f"ending_steps:{target}"))
    exited = z.exited("g")
    assert (exited.outcome, exited.returncode) == ("failed", 1), exited
    assert said in exited.error, exited.error
    log = log_of(tmp_path, "g")
    assert said in log and "Traceback" not in log, log
    assert not (tmp_path / "steps/g/generator.txt").exists()


# -- threads and atexit handlers ----------------------------------------------------------------


def test_a_step_ends_when_its_threads_have_and_runs_its_own_atexit_handlers_not_the_zygotes(zygote, tmp_path):
    zygote_handlers = tmp_path / "zygote-atexit.txt"
    z = zygote(preload=PRELOAD, env={"FLEET_TEST_ZYGOTE_ATEXIT": str(zygote_handlers)})
    out = tmp_path / "steps/t/late.txt"
    z.send(launch(tmp_path, "t", "ending_steps:late_thread_and_atexit", outputs=(str(out),)))
    started = z.expect(Started)
    exited = z.exited("t")
    assert exited.outcome == "succeeded", exited  # (its output, written a second after its return)
    assert out.read_text() == "late"
    assert exited.work_end - exited.work_start >= 0.9  # the thread was its work too
    assert (tmp_path / "steps/t/atexit.txt").read_text() == str(started.pid)
    z.close_requests()
    z.wait()  # the zygote's own handler runs in the zygote, at its exit, and in no step
    assert zygote_handlers.read_text().split() == [str(z.proc.pid)]


def test_a_step_waiting_for_a_thread_that_never_ends_is_still_held_to_its_timeout(zygote, tmp_path):
    z = zygote(preload=PRELOAD)
    z.send(launch(tmp_path, "e", "ending_steps:endless_thread", timeout=1.0, grace=1.0))
    exited = z.exited("e", timeout=20)
    assert (exited.outcome, exited.signal) == ("timed_out", signal.SIGTERM), exited


# -- the end record ---------------------------------------------------------------------------


def test_an_error_naming_an_undecodable_file_keeps_its_reason_and_a_broken_step_stays_broken(zygote, tmp_path):
    z = zygote(preload=PRELOAD)
    z.send(launch(tmp_path, "f", "ending_steps:cannot_read"))
    exited = z.exited("f")
    assert (exited.outcome, exited.returncode) == ("failed", 1), exited
    assert exited.error == "RuntimeError: cannot read caf\\xe9.nc"
    z.send(launch(tmp_path, "b", "ending_steps:broken_by_name", protocol="steps"))
    exited = z.exited("b")
    assert exited.outcome == "broken", exited  # (a failure would be retried; broken never is)
    assert exited.error == "broken: no data in caf\\xe9.nc"


# -- what a stopped call step ran in other groups of its session ---------------------------------------


def _sleeps(n: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["cmdline"] == ["sleep", str(n)] and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_a_stopped_call_step_takes_what_it_ran_under_timeout_or_set_m_with_it(zygote, tmp_path, subreaper, how):
    from fleet.wire.messages import Kill
    a = random.randrange(5000, 9000, 2)
    b = a + 1
    z = zygote(preload=PRELOAD)
    z.send(launch(tmp_path, "s", "ending_steps:session_jobs", args={"a": a, "b": b}, grace=1.0,
                  **({"timeout": 2.0} if how == "timeout" else {})))
    started = z.expect(Started)
    try:
        read_json_when_there(tmp_path / "steps/s/pids.json")
        deadline = time.monotonic() + 10
        while not (_sleeps(a) and _sleeps(b)):  # (the jobs start their sleeps)
            assert time.monotonic() < deadline, "the step's sleeps never started"
            time.sleep(0.02)
        assert all(os.getpgid(p.pid) != started.pgid for p in _sleeps(a) + _sleeps(b))  # groups of their own
        if how == "cancel":
            z.send(Kill("s", 1, signal.SIGTERM, cancel=True, grace=1.0))
        exited = z.exited("s", timeout=20)
        assert exited.outcome == ("timed_out" if how == "timeout" else "cancelled"), exited
        deadline = time.monotonic() + 10
        while _sleeps(a) or _sleeps(b):
            assert time.monotonic() < deadline, f"left running: {_sleeps(a) + _sleeps(b)}"
            time.sleep(0.02)
    finally:
        for p in _sleeps(a) + _sleeps(b):
            p.kill()


# -- set-up failures --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["call", "command"])
def test_a_workdir_that_is_a_dangling_link_is_said_in_the_steps_log_naming_the_path_and_why(
        zygote, tmp_path, kind):
    z = zygote(preload=PRELOAD)
    os.symlink("/nonexistent/dir", tmp_path / "dangling")
    workdir = str(tmp_path / "dangling")
    msg = launch(tmp_path, "d", "steps:record", kind=kind, command=["true"] if kind == "command" else None)
    msg = type(msg)(**{**msg.__dict__, "workdir": workdir})
    z.send(msg)
    exited = z.exited("d")
    said = f"cannot make the work directory {workdir}: it is a symbolic link to /nonexistent/dir, which does not exist"
    assert exited.outcome == "failed" and exited.error == said, exited
    log = log_of(tmp_path, "d")  # steps/d/log: the one `fleet run` points at
    assert log.startswith("==== fleet: step d attempt 1") and f"fleet: {said}\n" in log, log
    assert "Traceback" not in log


def test_an_exception_whose_text_cannot_be_made_still_fails_the_step_with_its_class_and_traceback(zygote, tmp_path):
    z = zygote(preload=PRELOAD)
    z.send(launch(tmp_path, "u", "ending_steps:raises_unprintable"))
    exited = z.exited("u")
    assert (exited.outcome, exited.returncode) == ("failed", 1), exited
    assert exited.error.startswith("Unprintable: "), exited.error
    log = log_of(tmp_path, "u")
    assert "Traceback" in log and "raises_unprintable" in log, log
