"""Stopping an MPI step that srun launched (fleet.node.srunstop): its ranks are signalled
through Slurm, never by signalling srun (which SIGKILLs them); srun is told to end them
only when the grace is over, and SIGKILLed a little later if it has not. The end to end
case, with real Slurm, is in tests/site/test_slurm.py."""

from __future__ import annotations

import signal
import sys
import time
from types import SimpleNamespace

import pytest

from fleet.node import srunstop
from fleet.node.stopping import LAUNCHER_KILL_S, Stops
from fleet.wire.messages import Shutdown, Started

from test_zygote import ZygoteProcess, assert_nothing_left, launch, subreaper, zygote  # noqa: F401

SHOWN = """\
StepId=508.batch UserId=0 StartTime=2026-12-06T05:58:05 State=RUNNING NodeList=node1 Name=batch SrunHost:Pid=(null):0
StepId=508.0 UserId=0 State=RUNNING NodeList=node[1-2] Tasks=2 Name=rank.sh Dist=Cyclic SrunHost:Pid=nid001:5879
StepId=508.1 UserId=0 State=RUNNING NodeList=node[1-2] Tasks=2 Name=rank.sh Dist=Cyclic SrunHost:Pid=nid002:5880
"""


def test_the_step_is_the_one_whose_srun_runs_on_this_host_as_this_pid():
    assert srunstop.step_of(SHOWN, "nid001", 5879) == "508.0"
    assert srunstop.step_of(SHOWN, "nid002.cluster.example", 5880) == "508.1"  # Slurm's short name
    assert srunstop.step_of(SHOWN, "nid002", 5879) is None  # the same pid on another node is not ours
    assert srunstop.step_of(SHOWN, "nid001", 58) is None
    assert srunstop.step_of("", "nid001", 5879) is None


def test_only_an_mpi_step_run_by_srun_is_stopped_through_slurm():
    def handles(command, threads=1):
        return srunstop.handles(SimpleNamespace(command=command, threads=threads))
    assert handles(["srun", "--overlap", "-n", "4", "./a.out"])
    assert handles(["/usr/bin/srun", "./a.out"])
    assert not handles(["srun", "./a.out"], threads=0)  # a command step running srun itself: as any step
    assert not handles(["mpiexec", "-n", "4", "./a.out"])
    assert not handles("srun ./a.out")


class _Launcher:
    def __init__(self):
        self.calls = []

    def handles(self, step):
        return True

    def term(self, step):
        self.calls.append("term")

    def kill(self, step):
        self.calls.append("kill")


def test_a_launcher_stops_its_step_and_its_group_is_sigkilled_only_if_it_did_not_end_it():
    now = [0.0]
    sent, launcher = [], _Launcher()
    step = SimpleNamespace(pid=10, ending=None, term_at=None, kill_at=None, killed=False)
    stops = Stops(lambda s, sig: sent.append(sig), lambda s: True, clock=lambda: now[0], launcher=launcher)
    stops.stop(step, 3.0, "cancelled")
    assert (launcher.calls, sent) == (["term"], [])  # nothing to srun's group: it would kill the ranks
    now[0] = 3.0
    stops.due(lambda s: 3.0)
    assert (launcher.calls, sent, step.killed) == (["term", "kill"], [], True)
    assert stops.pending() and stops.next_ms() == LAUNCHER_KILL_S * 1000
    now[0] = 3.0 + LAUNCHER_KILL_S
    stops.due(lambda s: 3.0)
    assert sent == [signal.SIGKILL] and not stops.pending()


def test_a_step_its_launcher_ended_gets_no_sigkill():
    now, sent, alive = [0.0], [], [True]
    step = SimpleNamespace(pid=10, ending=None, term_at=None, kill_at=None, killed=False)
    stops = Stops(lambda s, sig: sent.append(sig), lambda s: alive[0], clock=lambda: now[0], launcher=_Launcher())
    stops.stop(step, 1.0)
    now[0] = 1.0
    stops.due(lambda s: 1.0)
    alive[0] = False  # srun exited, reaped
    now[0] = 1.0 + LAUNCHER_KILL_S
    stops.due(lambda s: 1.0)
    assert sent == [] and not stops.pending() and stops.next_ms() is None


FAKE_SRUN = """#!/bin/bash
# Not Slurm's: it ignores SIGTERM, as a srun that hangs would.
trap 'echo TERM >> terms' TERM
echo started > started
while :; do sleep 0.1; done
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")
def test_a_srun_that_is_not_found_in_slurm_nor_ends_is_sigterm_ed_then_sigkilled_and_the_zygote_stops(
        zygote, tmp_path, subreaper):
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text(FAKE_SRUN)
    fake.chmod(0o755)
    z: ZygoteProcess = zygote()
    z.send(launch(tmp_path, "mpi", kind="command", command=[str(fake)], threads=1, grace=1.0))
    started = z.expect(Started)
    workdir = tmp_path / "steps" / "mpi"
    deadline = time.monotonic() + 10
    while not (workdir / "started").exists():
        assert time.monotonic() < deadline, "the fake srun never started"
        time.sleep(0.01)
    z.send(Shutdown())
    exited = z.exited("mpi", timeout=srunstop.FIND_S + LAUNCHER_KILL_S + 20)
    assert exited.signal == signal.SIGKILL, exited
    assert z.wait() == 0
    log = (workdir / "log").read_text()
    # Its step was looked for in Slurm, not found: srun was told to end its ranks itself.
    assert "fleet: cannot send SIGTERM to the ranks (its Slurm step was not found); srun ends them" in log, log
    assert (workdir / "terms").read_text().split() == ["TERM", "TERM"]  # that, and at the grace's end
    assert_nothing_left([started.pid], [started.pgid])


def test_scancel_s_error_from_the_nodes_that_run_none_of_the_step_is_the_signal_sent():
    # A step on node1 of a two-node job: scancel signals its tasks, then exits 225 for node2.
    elsewhere = "scancel: error: Kill job error on job step id 738: Invalid job id specified\n"
    assert srunstop.sent_anyway(elsewhere)
    assert srunstop.sent_anyway(elsewhere * 2 + "\n")
    assert not srunstop.sent_anyway("")  # no word of why: not sent
    assert not srunstop.sent_anyway(elsewhere + "scancel: error: Kill job error on job step id 738: Access/permission "
                                    "denied\n")
    assert not srunstop.sent_anyway("scancel: error: Kill job error on job step id 738.1: Job/step already completing "
                                    "or completed\n")
