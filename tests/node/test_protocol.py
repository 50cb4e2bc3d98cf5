"""httk's ht_steps protocol on the node (fleet.node.protocol): exit codes to outcomes,
the stage file, the submit directory, and a restart's fresh work directory, on real files."""

from __future__ import annotations

from fleet.node import protocol
from fleet.wire.messages import Launch


def launch(run_dir, kind="command", proto="steps", restarts=0, workdir=None) -> Launch:
    return Launch(step="s", attempt=1, kind=kind, call="", args={}, command="true", cores=(), gpus=(), memory=0,
                  workdir=str(workdir or run_dir / "steps/s"), log=str(run_dir / "steps/s/log"),
                  run_dir=str(run_dir), protocol=proto, restarts=restarts)


def test_each_httk_exit_code_is_its_outcome_only_with_protocol_steps(tmp_path):
    (tmp_path / "steps/s/.fleet/submit").mkdir(parents=True)
    (tmp_path / "steps/s/.fleet/next-stage").write_text("relax\n")
    (tmp_path / "steps/s/.fleet/submit/ht.tmp.half").write_text("[[steps]")
    got = {}
    for rc in (0, 1, 2, 3, 4, 5):
        rep: dict = {}
        got[rc] = (protocol.outcome(launch(tmp_path), rc, rep), rep.get("control"))
    assert [o for o, _ in got.values()] == ["succeeded", "failed", "next", "wait", "restart", "broken"]
    assert got[2][1] == {"stage": "relax"}  # a half-written file is not a submission
    (tmp_path / "steps/s/.fleet/submit/k.toml").write_text("[[steps]]\nid = 'k'\ncommand = 'true'\n")
    rep = {}
    assert protocol.outcome(launch(tmp_path), 3, rep) == "wait" and rep["control"] == {"submitted": 1}
    assert [protocol.outcome(launch(tmp_path, proto=""), rc, {}) for rc in (0, 2, 3, 5)] == [
        "succeeded", "failed", "failed", "failed"]


def test_a_call_steps_outcome_comes_from_its_end_record_not_its_exit_code(tmp_path):
    call = launch(tmp_path, kind="call", proto="")
    assert protocol.outcome(call, 2, {"control": {"outcome": "next", "stage": "x"}}) == "next"
    assert protocol.outcome(call, 2, {"control": {}}) == "failed"  # sys.exit(2) is a failure


def test_children_a_step_left_without_saying_so_are_counted_at_reaping_and_an_earlier_runs_are_not(tmp_path):
    d = tmp_path / "steps/s/.fleet/submit"
    d.mkdir(parents=True)
    (d / "a1-r0-p0-100-000001.json").write_text("{}")  # an earlier run's (pid 100), taken in then
    call = launch(tmp_path, kind="call", proto="")
    rep: dict = {"pid": 200, "phase": "begin"}  # no end record: os._exit, a crash, a signal
    protocol.count_submitted(call, rep)
    assert "control" not in rep
    (d / "a1-r0-p1-200-000001.json").write_text("{}")
    assert protocol.outcome(call, 0, rep) == "succeeded" and rep["control"] == {"submitted": 1}
    ended = {"pid": 200, "phase": "end", "control": {}}  # its end record counts its own: no listdir
    protocol.count_submitted(call, ended)
    assert ended["control"] == {}
    killed: dict = {}  # a protocol command killed (its timeout): no exit code, its files all the same
    protocol.count_submitted(launch(tmp_path), killed)
    assert killed["control"] == {"submitted": 2}
    plain: dict = {}
    protocol.count_submitted(launch(tmp_path, proto=""), plain)
    assert plain == {}


def test_a_restart_moves_the_old_work_aside_once_keeping_records_logs_and_children(tmp_path):
    step = tmp_path / "steps/s"
    (step / ".fleet").mkdir(parents=True)
    (step / "log").write_text("log\n")
    (step / "out.dat").write_text("old\n")
    (step / "sub").mkdir()
    (step / "child/.fleet").mkdir(parents=True)
    protocol.fresh_workdir(launch(tmp_path, restarts=1))
    assert sorted(p.name for p in step.iterdir()) == [".fleet", "attempt-1", "child", "log"]
    assert sorted(p.name for p in (step / "attempt-1").iterdir()) == ["out.dat", "sub"]
    (step / "new.dat").write_text("new\n")
    protocol.fresh_workdir(launch(tmp_path, restarts=1))  # a retry after the restart: done already
    assert (step / "new.dat").exists()
