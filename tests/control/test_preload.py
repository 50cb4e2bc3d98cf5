"""A suite's `preload` on a fleet started with `fleet up`, through the real command line;
and `fleet validate`'s hint to preload the call steps' modules.

preload_records_import (tests/) appends the pid and parent of every process that
imports it to FLEET_TEST_IMPORT_LOG; its call target `where` writes which process
imported the module the step runs with.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleet.control.liveness import Liveness
from fleet.control.preloads import Preloads
from fleet.control.transport import Transport
from fleet.core.resources import NodeSpec
from fleet.wire import events as E
from fleet.wire import messages as P
from fleet.wire.events import EventLog
from fleetharness import assert_nothing_left, finish, fleet, records, spawn, wait_for, write_suite

STEPS = 4


def _suite(tmp_path: Path, name: str, preload: list[str]) -> Path:
    steps = "".join(f'[[steps]]\nid = "s{i}"\ncall = "preload_records_import:where"\n' for i in range(STEPS))
    return write_suite(tmp_path / f"{name}.toml", f'[suite]\nname = "{name}"\npreload = {json.dumps(preload)}\n'
                                                  + steps)


def _imports(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def up(tmp_path, monkeypatch):
    """`fleet up --nodes 2` without --preload (brought down at teardown, nothing left)."""
    monkeypatch.setenv("FLEET_TEST_IMPORT_LOG", str(tmp_path / "imports.jsonl"))
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, check=True, timeout=60)
    yield run_dir
    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_a_suite_run_on_a_fleet_up_has_its_preload_imported_by_every_zygote_before_its_steps_start(up, tmp_path):
    suite = _suite(tmp_path, "pre", ["preload_records_import"])
    r = fleet("run", str(suite), "--run-dir", str(up), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(up)
    preloaded = [e for e in recs if isinstance(e, E.Preloaded)]
    zygotes = {e.node: e.zygote_pid for e in recs if isinstance(e, E.NodeJoined)}
    assert sorted(e.node for e in preloaded) == sorted(zygotes) and len(zygotes) == 2
    assert all(e.ok and e.modules == ["preload_records_import"] and e.import_s > 0 for e in preloaded)
    first_start = min(e.t for e in recs if isinstance(e, E.Start))
    assert max(e.t for e in preloaded) <= first_start
    importers = {d["pid"] for d in _imports(tmp_path / "imports.jsonl")}
    assert set(zygotes.values()) <= importers  # each zygote imported it itself
    for i in range(STEPS):
        seen = json.loads((up / "steps" / f"s{i}" / "where.json").read_text())
        # The module came with the fork: imported by the step's parent, the zygote, not by the step.
        assert seen["imported_by"] == seen["ppid"] != seen["pid"], seen
        assert seen["ppid"] in zygotes.values() and seen["pid"] not in importers
    # Run again: the zygotes have it, so nothing is sent or imported again.
    before = len(_imports(tmp_path / "imports.jsonl"))
    r = fleet("run", str(suite), "--run-dir", str(up), "--force", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len([e for e in records(up) if isinstance(e, E.Preloaded)]) == 2
    assert len(_imports(tmp_path / "imports.jsonl")) == before


def test_a_preload_that_starts_a_thread_refuses_the_submission_naming_module_and_node_and_nothing_starts(
        up, tmp_path):
    bad = write_suite(tmp_path / "bad.toml", '[suite]\nname = "bad"\npreload = ["preload_starts_thread"]\n'
                                             '[[steps]]\nid = "never"\ncall = "preload_records_import:where"\n')
    r = fleet("run", str(bad), "--run-dir", str(up), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    nodes = sorted(e.node for e in records(up) if isinstance(e, E.NodeJoined))
    assert errors == [f"error: {bad}: field 'suite.preload': node {n}: module 'preload_starts_thread' starts a "
                      f"thread when imported (2 threads after importing it); a zygote forks, which needs exactly 1"
                      for n in nodes], r.stderr
    assert r.stderr.splitlines()[-1] == f"{len(nodes)} problems found; nothing was started"
    recs = records(up)
    assert not [e for e in recs if isinstance(e, (E.Submitted, E.StepDeclared, E.Start, E.Started))]
    assert not (up / "steps" / "never").exists()
    assert sorted(e.node for e in recs if isinstance(e, E.Preloaded) and not e.ok) == nodes
    # The zygotes were not harmed: the fleet runs the next suite, the same steps included.
    good = _suite(tmp_path, "good", [])
    r = fleet("run", str(good), "--run-dir", str(up), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len([e for e in records(up) if isinstance(e, E.Submitted)]) == 1


def test_a_preload_that_gives_the_zygotes_a_thread_is_refused_and_they_are_replaced_so_later_call_steps_run(
        up, tmp_path):
    # The probe passes it (it leads its group); each zygote's own import starts a thread.
    bad = write_suite(tmp_path / "bad.toml", '[suite]\nname = "bad"\npreload = ["preload_threads_unless_leader"]\n'
                                             '[[steps]]\nid = "never"\ncall = "preload_records_import:where"\n')
    r = fleet("run", str(bad), "--run-dir", str(up), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert errors and all("module 'preload_threads_unless_leader' starts a thread" in e and
                          "its node restarts its zygote without it" in e for e in errors), r.stderr
    # Before 2026-12-07 every later call step failed at once on every node ("this zygote cannot
    # fork call steps any more"), for the fleet's life; now each node has a new zygote.
    good = _suite(tmp_path, "good", [])
    r = fleet("run", str(good), "--run-dir", str(up), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(up)
    nodes = sorted(e.node for e in recs if isinstance(e, E.NodeJoined))
    restarted = [e for e in recs if isinstance(e, E.ZygoteRestarted)]
    assert sorted(e.node for e in restarted) == nodes, restarted
    assert all("got a thread from preloading preload_threads_unless_leader" in e.reason for e in restarted)
    zygotes = {e.zygote_pid for e in restarted}
    for i in range(STEPS):  # run by the new zygotes, which do not have the module
        seen = json.loads((up / "steps" / f"s{i}" / "where.json").read_text())
        assert seen["ppid"] in zygotes, seen


def test_a_preload_that_gives_the_zygotes_a_thread_ends_no_running_step_and_what_is_sent_while_they_drain_runs(
        up, tmp_path):
    # Another submission's command steps are running on the nodes when the bad suite comes.
    go = tmp_path / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.05; done; echo done"
    long = write_suite(tmp_path / "long.toml", '[suite]\nname = "long"\n' + "".join(
        f'[[steps]]\nid = "w{i}"\ncommand = "{wait}"\n' for i in (1, 2)))
    runs = [spawn("run", str(long), "--run-dir", str(up), cwd=tmp_path)]
    try:
        wait_for(lambda: len([e for e in records(up) if isinstance(e, E.Started)]) == 2, 60, "the long steps")
        bad = write_suite(tmp_path / "bad.toml", '[suite]\nname = "bad"\npreload = ["preload_threads_unless_leader"]\n'
                                                 '[[steps]]\nid = "never"\ncall = "preload_records_import:where"\n')
        r = fleet("run", str(bad), "--run-dir", str(up), cwd=tmp_path)
        assert r.returncode == 2 and "its node restarts its zygote without it" in r.stderr, r.stdout + r.stderr
        # Call steps submitted now are sent to the draining zygotes (left unanswered, run by the new
        # ones, no attempt used), or to their agents as they replace them.
        runs.append(spawn("run", str(_suite(tmp_path, "good", [])), "--run-dir", str(up), cwd=tmp_path))
        wait_for(lambda: [e for e in records(up) if isinstance(e, E.Submitted)][1:], 60, "the call steps")
        go.touch()
        # A first fix (never released) ended the long steps `terminated` (SIGTERM) at the bad suite's refusal.
        for p in runs:
            rc, out, err = finish(p, 120)
            assert rc == 0, out + err
    finally:
        go.touch()
        for p in runs:
            finish(p, 120)
    recs = records(up)
    assert sorted(e.step for e in recs if isinstance(e, E.Exit) and e.outcome == "succeeded") == \
        ["s0", "s1", "s2", "s3", "w1", "w2"], [e for e in recs if isinstance(e, E.Exit)]
    assert all(e.attempt == 1 for e in recs if isinstance(e, E.Start)), recs  # none ran twice, no attempt used
    nodes = sorted(e.node for e in recs if isinstance(e, E.NodeJoined))
    restarted = [e for e in recs if isinstance(e, E.ZygoteRestarted)]
    assert sorted(e.node for e in restarted) == nodes and not any(e.steps for e in restarted), restarted
    zygotes = {e.zygote_pid for e in restarted}
    for i in range(STEPS):  # run by the new zygotes
        seen = json.loads((up / "steps" / f"s{i}" / "where.json").read_text())
        assert seen["ppid"] in zygotes, seen


THREAD = "starts a thread when imported (2 threads after importing it); a zygote forks, which needs exactly 1"
NOT_FOUND = "failed to import: ModuleNotFoundError: No module named 'no_such_module_for_fleet'"


@pytest.mark.parametrize("module,why", [("preload_starts_thread", THREAD), ("no_such_module_for_fleet", NOT_FOUND)])
def test_a_bad_preload_on_an_embedded_fleet_is_refused_as_on_a_fleet_up_exit_2_naming_module_and_node(
        tmp_path, module, why):
    suite = write_suite(tmp_path / "s.toml", f'[suite]\nname = "bad"\nrun_dir = "run"\npreload = ["{module}"]\n'
                                             '[[steps]]\nid = "never"\ncommand = "touch ran"\n')
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    # The same line a fleet that is up gives (above), for each node whose zygote said so
    # before the embedded fleet gave up (at least one); no coordinator status, no log dump.
    assert errors and all(re.fullmatch(re.escape(f"error: {suite}: field 'suite.preload': node ") + r"node\d: "
                                       + re.escape(f"module '{module}' {why}"), e) for e in errors), r.stderr
    assert lines[-1] == f"{len(errors)} problem{'s' if len(errors) != 1 else ''} found; nothing was started"
    assert "coordinator exited" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    run = tmp_path / "run"
    assert not [e for e in records(run) if isinstance(e, (E.Submitted, E.Start, E.Started))]
    assert not (run / "steps").exists()
    assert_nothing_left(run)


def test_a_node_that_joins_a_fleet_with_preloads_reaches_the_scheduler_only_once_its_zygote_has_them(tmp_path):
    transport = Transport()
    log = EventLog(tmp_path / "events.jsonl")
    try:
        liveness = Liveness(transport, log, 1, 1.0, 10.0)
        preloads = Preloads(("base",), liveness, log)
        first = P.Join("n1", "h", [0], [], 1 << 30, 1, 2, ["base"])
        nodes = liveness.join(b"a1", first, 0.0, False)
        assert preloads.joined(first, nodes, False) == nodes  # before the fleet is up: as they come
        preloads.loaded.append("added")  # what a held submission added, once every zygote had it
        late = P.Join("n2", "h", [0], [], 1 << 30, 3, 4, ["base"])
        spec = liveness.join(b"a2", late, 0.0, True)
        assert spec == [NodeSpec("n2", (0,), (), 1 << 30)]
        assert preloads.joined(late, spec, True) == []
        assert preloads.asked["n2"] == {"added"} and preloads.settle().nodes == []
        preloads.answered("n2", P.Preloaded(("added",), True, "", 0.1), 1.0)
        assert preloads.settle().nodes == spec and not preloads.joining
    finally:
        log.close()
        transport.close()


def test_fleet_validate_suggests_preloading_the_call_steps_modules_without_changing_its_exit(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\npreload = ["json"]\n'
                        '[[steps]]\nid = "a"\ncall = "pkg.mod:f"\n[[steps]]\nid = "b"\ncall = "pkg.mod:g"\n'
                        '[[steps]]\nid = "c"\ncall = "json:dumps"\n[[steps]]\nid = "d"\ncommand = "true"\n')
    r = fleet("validate", str(suite), cwd=tmp_path)
    assert r.returncode == 0 and "is valid: 4 steps" in r.stdout, r.stderr
    assert r.stderr.strip() == ("hint: call steps import 'pkg.mod' themselves; preload = [\"json\", \"pkg.mod\"] "
                                "in [suite] lets every zygote import them once (see docs/user-guide.md in fleet's source)")
    covered = write_suite(tmp_path / "t.toml", '[suite]\nname = "t"\npreload = ["pkg.mod"]\n'
                          '[[steps]]\nid = "a"\ncall = "pkg.mod:f"\n')
    r = fleet("validate", str(covered), cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
