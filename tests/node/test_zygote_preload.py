"""A zygote told to preload while it serves: a real zygote on real pipes (see
test_zygote.py), or the probe forked for real from this process.

preload_records_import (tests/) appends who imported it to FLEET_TEST_IMPORT_LOG,
and its call target says which process imported the module the step runs with.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from fleet.node.preload import Preloads, thread_count
from fleet.wire.messages import Ok, Preload, Preloaded, Shutdown, Started

from test_zygote import launch, read_json_when_there, zygote  # noqa: F401  (the fixture)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote needs Linux")


def _imports(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def _where(z, tmp_path: Path, step: str) -> dict:
    z.send(launch(tmp_path, step, "preload_records_import:where"))
    assert z.exited(step).outcome == "succeeded", (tmp_path / "steps" / step / "log").read_text()
    return read_json_when_there(tmp_path / "steps" / step / "where.json")


def test_a_preload_while_serving_is_imported_in_the_zygote_and_the_next_call_step_has_it(zygote, tmp_path):
    log = tmp_path / "imports.jsonl"
    z = zygote(env={"FLEET_TEST_IMPORT_LOG": str(log)})
    # The loop forked its spare before the Preload: that child lacks the module.
    z.send(Preload(("preload_records_import",)))
    answer = z.expect(Preloaded)
    assert answer.ok and answer.modules == ("preload_records_import",) and answer.reason == "", answer
    assert answer.import_s > 0
    seen = _where(z, tmp_path, "a")
    # Imported by the zygote, the step's parent, before the step was forked; not by the step.
    assert seen["imported_by"] == seen["ppid"] == z.proc.pid != seen["pid"]
    importers = {d["pid"] for d in _imports(log)}
    assert z.proc.pid in importers and seen["pid"] not in importers
    # Tried in a probe first: one import in a child of the zygote, one in the zygote.
    assert len(_imports(log)) == 2 and {d["ppid"] for d in _imports(log)} >= {z.proc.pid}
    assert _threads_of(z.proc.pid) == 1


def test_a_module_preloaded_already_is_not_imported_again(zygote, tmp_path):
    log = tmp_path / "imports.jsonl"
    z = zygote(preload=("steps", "preload_records_import"), env={"FLEET_TEST_IMPORT_LOG": str(log)})
    z.send(Preload(("preload_records_import", "steps")))
    answer = z.expect(Preloaded)
    assert answer.ok and answer.import_s == 0.0, answer
    assert [d["pid"] for d in _imports(log)] == [z.proc.pid]  # only the one at start


@pytest.mark.parametrize("module, words", [
    ("preload_starts_thread", "starts a thread when imported (2 threads after importing it)"),
    ("preload_fails", "failed to import: RuntimeError: this module cannot be imported"),
    ("preload_crashes", "failed to import: the process importing it was killed by SIGSEGV"),
])
def test_a_preload_that_starts_a_thread_fails_or_crashes_is_refused_and_the_zygote_serves_on_untouched(
        zygote, tmp_path, module, words):
    z = zygote()
    z.send(Preload((module,)))
    answer = z.expect(Preloaded)
    assert not answer.ok and answer.modules == (module,)
    assert answer.reason == f"module '{module}' {words}" + ("; a zygote forks, which needs exactly 1"
                                                           if "thread" in words else ""), answer.reason
    assert _threads_of(z.proc.pid) == 1
    z.send(launch(tmp_path, "after", "steps:record"))
    assert z.exited("after").outcome == "succeeded"
    # Asked again, it is tried again (and refused again), not taken as loaded.
    z.send(Preload((module,)))
    assert not z.expect(Preloaded).ok


class _FakeZygote:
    """What Preloads.turn uses of a zygote, with the answers kept."""

    def __init__(self):
        self.sent: list = []
        self.own_fds: tuple = ()
        self.stop_grace = None
        self.prefork = True
        self.last_heard = 0.0
        self.spare = self

    fds: tuple = ()

    def drop(self) -> None:
        pass

    def send(self, msg) -> None:
        self.sent.append(msg)


def test_a_probe_still_importing_at_its_deadline_is_killed_and_the_request_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_TEST_IMPORT_SLEEP", "30")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    preloads, fake = Preloads(timeout=0.5), _FakeZygote()
    preloads.ask(("preload_slow",))
    preloads.turn(fake)
    probe = preloads.probe
    assert probe is not None and not fake.sent
    deadline = time.monotonic() + 10
    while not fake.sent:
        assert time.monotonic() < deadline, "no answer from the probe"
        time.sleep(preloads.poll_ms(None) / 1000)
        preloads.turn(fake)
    answer = fake.sent[0]
    assert not answer.ok and answer.reason == (
        "importing module 'preload_slow' took longer than 0.5 s (fleet up --preload preload_slow can take longer: "
        "as long as its --timeout, 120 s by default)")
    pid, status = os.waitpid(probe.pid, 0)  # killed, and ours to reap
    assert os.WIFSIGNALED(status)
    assert "preload_slow" not in sys.modules and thread_count() is not None


def test_a_zygote_that_gets_a_thread_from_a_module_its_probe_imported_cleanly_refuses_it_drains_and_asks_for_a_new_one(
        zygote, tmp_path):
    z = zygote(env={"FLEET_TEST_THREAD_IF_PARENT": str(os.getpid())})
    go = tmp_path / "go"
    z.send(launch(tmp_path, "cmd", kind="command",
                  command=["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"]))
    z.expect(Started)
    z.send(Preload(("preload_threads_in_zygote",)))
    answer = z.expect(Preloaded)
    assert not answer.ok and "module 'preload_threads_in_zygote' starts a thread when imported" in answer.reason
    assert "its node restarts its zygote without it" in answer.reason
    # While its step runs it starts nothing (a call, a command, one queued behind the step)
    # and answers none of them: its agent writes them to the new zygote. A later preload is refused.
    z.send_together(launch(tmp_path, "call"), launch(tmp_path, "later", kind="command", command=["true"]),
                    launch(tmp_path, "behind", kind="command", command=["true"], after="cmd"),
                    Preload(("preload_records_import",)))
    again = z.expect(Preloaded)
    assert not again.ok and "being replaced once its running steps end" in again.reason, again
    # A first fix (never released) stopped it as on a SIGTERM: its running step ended `terminated`.
    go.touch()
    assert z.exited("cmd").outcome == "succeeded"
    replace = z.expect(Ok)  # only once its step has ended
    assert replace.what == "replace" and "preload_threads_in_zygote" in replace.zygote, replace
    assert z.wait() == 0
    with pytest.raises(EOFError):
        z.next()
    assert list(z.started) == ["cmd"]
    assert not any((tmp_path / "steps" / s).exists() for s in ("call", "later", "behind"))


def test_a_preload_that_ignores_sigchld_on_a_serving_zygote_leaves_its_loop_reporting_every_step_and_is_said(
        zygote, tmp_path):
    z = zygote()
    z.send(Preload(("preload_ignores_sigchld",)))
    answer = z.expect(Preloaded)
    assert answer.ok and answer.reason == ("module 'preload_ignores_sigchld' changes the SIGCHLD handler when "
                                           "imported; the zygote put its own back (its steps start with default "
                                           "signals as always)"), answer
    # Before 2026-12-07 the kernel reaped these itself: they ended, and were never reported.
    z.send(launch(tmp_path, "call", "steps:record"))
    assert z.exited("call").outcome == "succeeded"
    z.send(launch(tmp_path, "cmd", kind="command", command=["true"]))
    assert z.exited("cmd").outcome == "succeeded"
    z.send(Shutdown(1.0))
    assert z.wait() == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _daemons(where: Path) -> dict[int, int]:
    """pid -> the pid of the process whose import started it (tests/preload_leaves_daemon.py)."""
    out = {}
    for p in where.glob("*.pid"):
        pid, importer = map(int, p.read_text().split())
        out[pid] = importer
    return out


def test_a_preload_whose_import_leaves_a_daemon_is_answered_at_the_probes_last_line_and_nothing_outlives_the_zygote(
        zygote, tmp_path):
    where = tmp_path / "daemons"
    where.mkdir()
    z = zygote(env={"FLEET_TEST_DAEMON_DIR": str(where)})
    z.send(Preload(("preload_leaves_daemon",)))
    # Before 2026-12-07 the answer waited for the probe pipe's end of file, which the daemon
    # held: the probe's whole time limit (25 s), longer than this wait.
    answer = z.expect(Preloaded)
    assert answer.ok, answer
    deadline = time.monotonic() + 10
    while z.proc.pid not in _daemons(where).values():  # the zygote's own import left its daemon
        assert time.monotonic() < deadline, _daemons(where)
        time.sleep(0.02)
    probes = [pid for pid, importer in _daemons(where).items() if importer != z.proc.pid]
    while any(_alive(pid) for pid in probes):  # the probe's copy (if it got so far) is ended with the probe
        assert time.monotonic() < deadline, [pid for pid in probes if _alive(pid)]
        time.sleep(0.02)
    z.send(Shutdown(1.0))
    assert z.wait() == 0
    while any(_alive(pid) for pid in _daemons(where)):  # and the zygote's goes with the zygote
        assert time.monotonic() < deadline, _daemons(where)
        time.sleep(0.02)


def test_a_preload_of_things_that_are_not_module_names_is_refused(zygote):
    z = zygote()
    z.send(Preload((1, "")))
    answer = z.expect(Preloaded)
    assert not answer.ok and answer.reason == "not module names: [1, '']"
