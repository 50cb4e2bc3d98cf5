"""The peak of a step the agent's watchdog never sampled (fleet.node.memwatch,
Enforcer.rusage_peak), with a real zygote forking real steps: a call step that
ended before the agent looked at it has its peak from its exit's rusage."""

from __future__ import annotations

import sys

import pytest
from test_zygote import launch, zygote  # noqa: F401  (its fixture)

from fleet.node import memlimit, memwatch
from fleet.wire.messages import Exited, decode, encode

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")
MIB = 1 << 20


def test_a_call_step_that_ended_before_the_agent_looked_at_it_has_its_peak_from_its_rusage(zygote, tmp_path):
    # Its high-water RSS began at what its spare (cloned from the zygote's forker helper)
    # had, far below the zygote's own high water (numpy imported, and the zygote has grown
    # since the helper was forked): before 2026-12-06 only a high water past the zygote's
    # counted, and the step's record had no peak (under load: the agent's look at its
    # Started came after its end).
    z = zygote(preload=("numpy", "memory_steps"))
    enforcer = memwatch.Enforcer(memlimit.Choice(memlimit.WATCHDOG), parent=z.proc.pid)
    for step in ("first", "short"):  # (the first one's end leaves a spare for the next)
        msg = launch(tmp_path, step, "memory_steps:brief", args={"seconds": 0.0, "mib": 4}, memory_limit=30 * MIB)
        enforcer.launched(msg)
        z.send(msg)
        exited = z.exited(step)
        enforcer.started(z.started[step])  # the look, after its end: it finds nothing
        judged = enforcer.exited(exited, encode(exited))
    got = decode(judged)
    assert isinstance(got, Exited) and got.outcome == "succeeded", got
    # What it added to what it was forked with (the 4 MiB it touched, and some), not its
    # whole high water, which counts the zygote's pages it shares (numpy's: many MiB more).
    assert 4 * MIB <= got.memory_peak < (exited.maxrss_kb << 10) - 4 * MIB, (got, exited.maxrss_kb << 10)
