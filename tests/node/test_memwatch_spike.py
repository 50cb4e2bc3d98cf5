"""A step the agent's watchdog sampled that passes its memory between two samples and
ends before the next (fleet.node.memwatch, Enforcer.rusage_peak and judge_watched),
with a real zygote running real steps and the samples taken when the test says: the
step's peak is its exit's rusage, and its reason says it passed its memory unstopped."""

from __future__ import annotations

import sys
import time

import pytest
from test_zygote import launch, zygote  # noqa: F401  (its fixture)

from fleet.node import memlimit, memwatch
from fleet.wire.messages import Exited, Preload, Preloaded, Started, decode, encode

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")
MIB = 1 << 20
SPIKE = ("import os, sys, time\n"
         "data = b'\\x01' * (60 << 20)\n"
         "deadline = time.monotonic() + 60\n"
         "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
         "    time.sleep(0.01)\n"
         "spike = b'\\x02' * (80 << 20)\n")


def sampled_then_spiked(z, enforcer, msg, go) -> tuple[Exited, Exited]:
    """Launch ``msg``, sample it until a sample found it running (holding 60 MiB, below
    its memory), then let it touch 80 MiB more and end: (its Exited, as judged)."""
    enforcer.launched(msg)
    z.send(msg)
    enforcer.started(z.expect(Started))
    deadline = time.monotonic() + 30
    watched = enforcer.watched[(msg.step, msg.attempt)]
    while not watched.sampled and time.monotonic() < deadline:
        enforcer.sample()
        time.sleep(0.02)
    assert watched.sampled and not watched.killed and watched.peak < msg.memory_limit, watched
    go.write_text("go")
    exited = z.exited(msg.step)
    return exited, decode(enforcer.exited(exited, encode(exited)))


@pytest.mark.parametrize("kind", ["call", "command"])
def test_a_sampled_step_that_passed_its_memory_between_samples_keeps_its_success_with_its_rusage_peak_and_a_note(
        zygote, tmp_path, kind):
    # Before 2026-12-07 its peak was its largest sample (~60 MiB, "within its memory" of
    # 100 MiB) and nothing said it had used 140 MiB: a rusage only counted for a step
    # that ended before its first sample.
    z = zygote(preload=("memory_steps",))
    enforcer = memwatch.Enforcer(memlimit.Choice(memlimit.WATCHDOG), parent=z.proc.pid)
    go = tmp_path / f"go-{kind}"
    if kind == "call":
        msg = launch(tmp_path, "spike", "memory_steps:spike_when", args={"mib": 60, "go": str(go), "more": 80},
                     memory_limit=100 * MIB)
    else:
        msg = launch(tmp_path, "spike", kind="command", command=[sys.executable, "-c", SPIKE, str(go)],
                     memory_limit=100 * MIB)
    exited, got = sampled_then_spiked(z, enforcer, msg, go)
    assert exited.outcome == "succeeded", exited
    # Kept: it ended by itself and did its work (its outputs are there).
    assert isinstance(got, Exited) and got.outcome == "succeeded", got
    # What it added to its start (a call step) or its process's high water (a command):
    # the 140 MiB it touched, and at most the interpreter's own pages more.
    assert 140 * MIB <= got.memory_peak <= exited.maxrss_kb << 10, (got, exited.maxrss_kb)
    assert got.error and "of its memory 100MiB: passed it between two of the watchdog's samples" in got.error, got


def test_a_sampled_step_within_its_memory_has_no_note(zygote, tmp_path):
    z = zygote(preload=("memory_steps",))
    enforcer = memwatch.Enforcer(memlimit.Choice(memlimit.WATCHDOG), parent=z.proc.pid)
    go = tmp_path / "go"
    msg = launch(tmp_path, "within", "memory_steps:spike_when", args={"mib": 60, "go": str(go), "more": 10},
                 memory_limit=100 * MIB)
    _, got = sampled_then_spiked(z, enforcer, msg, go)
    assert got.outcome == "succeeded" and got.error is None, got
    assert 70 * MIB <= got.memory_peak <= 100 * MIB, got


def test_a_call_step_forked_after_the_zygote_grew_is_not_charged_the_zygotes_growth(zygote, tmp_path):
    # An older call step runs across a preload that makes the zygote 200 MiB larger; a
    # step forked after it begins with those pages. Before 2026-12-07 the new step's peak
    # was its exit's high water less the least start among the zygote's children (the
    # older step's, forked before the preload): ~200 MiB for a 10 MiB step, "passed its
    # memory between two of the watchdog's samples".
    z = zygote(preload=("memory_steps",))
    enforcer = memwatch.Enforcer(memlimit.Choice(memlimit.WATCHDOG), parent=z.proc.pid)
    go_old, go_new = tmp_path / "go-old", tmp_path / "go-new"
    old = launch(tmp_path, "old", "memory_steps:spike_when", args={"mib": 1, "go": str(go_old), "more": 0},
                 memory_limit=100 * MIB)
    enforcer.launched(old)
    z.send(old)
    enforcer.started(z.expect(Started))
    z.send(Preload(("preload_grows_zygote",)))
    assert z.expect(Preloaded, timeout=60).ok
    new = launch(tmp_path, "new", "memory_steps:spike_when", args={"mib": 10, "go": str(go_new), "more": 1},
                 memory_limit=100 * MIB)
    try:
        exited, got = sampled_then_spiked(z, enforcer, new, go_new)
    finally:
        go_old.write_text("go")
    z.exited("old")
    assert exited.maxrss_kb << 10 > 200 * MIB, exited  # (it did begin with the zygote's growth)
    assert got.outcome == "succeeded" and got.error is None, got
    assert 11 * MIB <= got.memory_peak <= 100 * MIB, got


def test_a_call_steps_spike_before_the_agents_first_look_is_still_its_peak(zygote, tmp_path):
    # The step touches 150 MiB and frees it before the agent reads its Started (late,
    # under load). Its high water at that first look holds the spike: taken whole for what
    # it was forked with (as briefly on 2026-12-07), the spike was subtracted from its
    # rusage and the step judged at 18 MiB, within its memory of 100 MiB.
    z = zygote(preload=("memory_steps",))
    enforcer = memwatch.Enforcer(memlimit.Choice(memlimit.WATCHDOG), parent=z.proc.pid)
    go = tmp_path / "go"
    msg = launch(tmp_path, "early", "memory_steps:spike_first", args={"mib": 150, "go": str(go)},
                 memory_limit=100 * MIB)
    enforcer.launched(msg)
    z.send(msg)
    started = z.expect(Started)
    deadline = time.monotonic() + 30
    while not (tmp_path / "go.spiked").exists():
        assert time.monotonic() < deadline, "the step never spiked"
        time.sleep(0.01)
    enforcer.started(started)  # the first look, after the spike
    go.write_text("go")
    exited = z.exited(msg.step)
    got = decode(enforcer.exited(exited, encode(exited)))
    # (At most what it added to the zygote's pages: a forked child holds fewer of them at
    # first than the zygote does, its file pages mapped as it touches them, so a few MiB under.)
    assert got.outcome == "succeeded" and 120 * MIB <= got.memory_peak <= exited.maxrss_kb << 10, got
    assert got.error and "of its memory 100MiB: passed it between two of the watchdog's samples" in got.error, got
