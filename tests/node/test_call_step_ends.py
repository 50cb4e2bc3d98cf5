"""A step's set-up failure said in its log (fleet.node.stepdirs): a real zygote on real
pipes (see test_zygote.py), its steps real processes."""

from __future__ import annotations

import os
import sys

import pytest

from test_zygote import ZygoteProcess, launch, log_of, zygote  # noqa: F401

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")

PRELOAD = ("steps", "ending_steps")


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
