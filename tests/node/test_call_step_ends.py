"""A call step's end always reported (fleet.node.childreport), and a step's set-up failure
said in its log (fleet.node.stepdirs): a real zygote on real pipes (see test_zygote.py),
its steps real processes. Call targets: tests/ending_steps.py ("ending_steps:NAME")."""

from __future__ import annotations

import os
import sys

import pytest

from test_zygote import ZygoteProcess, launch, log_of, zygote  # noqa: F401

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")

PRELOAD = ("steps", "ending_steps")


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
