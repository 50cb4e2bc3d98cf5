"""The everyday path through the real `fleet` CLI: any function as a step, the same
thread count on every path, declared outputs that must exist, logs that keep every
attempt. Step functions live in tests/fleet_steps.py."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def exits(run_dir: Path) -> dict[str, dict]:
    return {e["step"]: e for e in events(run_dir) if e["kind"] == "exit"}


def run(tmp_path: Path, body: str, *extra: str, name: str = "calls") -> tuple:
    suite = write_suite(tmp_path / f"{name}.toml", f'[suite]\nname = "{name}"\nrun_dir = "{name}"\n' + body)
    r = fleet("run", str(suite), *extra, cwd=tmp_path)
    return r, tmp_path / name


# -- 8: any function is a step ---------------------------------------------------------------


def test_an_existing_library_function_runs_as_a_step_with_its_args_by_name(tmp_path):
    (tmp_path / "source.txt").write_text("copied by shutil\n")
    r, run_dir = run(tmp_path, f"""
[[steps]]
id = "copy"
call = "shutil:copyfile"
args = {{ src = "{tmp_path / 'source.txt'}", dst = "copy.txt" }}
outputs = ["steps/copy/copy.txt"]
""")
    assert r.returncode == 0, r.stderr
    assert (run_dir / "steps/copy/copy.txt").read_text() == "copied by shutil\n"
    assert exits(run_dir)["copy"]["outcome"] == "succeeded"
    assert_nothing_left(run_dir)


def test_numpy_savetxt_is_a_step_without_a_wrapper(tmp_path):
    pytest.importorskip("numpy")
    r, run_dir = run(tmp_path, """
[[steps]]
id = "save"
call = "numpy:savetxt"
args = { fname = "values.txt", X = [1.5, 2.5, 3.5], fmt = "%.1f" }
outputs = ["steps/save/values.txt"]
""")
    assert r.returncode == 0, r.stderr
    assert (run_dir / "steps/save/values.txt").read_text().split() == ["1.5", "2.5", "3.5"]
    assert_nothing_left(run_dir)


def test_a_plain_function_gets_its_args_and_finds_its_step_with_fleet_context(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "plain"
call = "fleet_steps:scaled"
args = { n = 21 }
[[steps]]
id = "with-ctx"
call = "fleet_steps:scaled_with_ctx"
args = { n = 4, label = "both" }
[[steps]]
id = "old"
call = "fleet_steps:nap"
args = { seconds = 0.05 }
""")
    assert r.returncode == 0, r.stderr
    plain = json.loads((run_dir / "steps/plain/scaled.json").read_text())
    assert plain == {"n": 21, "twice": 42, "label": "plain", "step": "plain", "attempt": 1,
                     "workdir": str(run_dir / "steps/plain")}
    both = json.loads((run_dir / "steps/with-ctx/scaled.json").read_text())
    assert both == {"n": 4, "label": "both", "same_ctx": True, "args": {"n": 4, "label": "both"}}
    # The 0.1 form, def step(ctx), still reads its args from ctx.args.
    assert (run_dir / "steps/old/nap.json").exists()
    assert_nothing_left(run_dir)


def test_an_argument_the_function_does_not_take_fails_the_step_naming_it(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "typo"
call = "shutil:copyfile"
args = { source = "a.txt", dst = "b.txt" }
[[steps]]
id = "short"
call = "fleet_steps:scaled"
args = { label = "no n" }
""")
    assert r.returncode == 1
    ex = exits(run_dir)
    assert ex["typo"]["outcome"] == "failed"
    assert "shutil:copyfile has no parameter 'source'" in ex["typo"]["reason"]
    assert "'source'" in (run_dir / "steps/typo/log").read_text()
    assert "Traceback" not in (run_dir / "steps/typo/log").read_text()
    assert ex["short"]["outcome"] == "failed"
    assert "fleet_steps:scaled needs 'n'" in ex["short"]["reason"]
    assert_nothing_left(run_dir)


def test_fleet_context_outside_a_step_says_so():
    import fleet
    with pytest.raises(RuntimeError, match="only available in the process of a running call step"):
        fleet.context()
    assert fleet.StepContext.__name__ == "StepContext"


# -- 9: the same threads on every path --------------------------------------------------------


def _threads_suite(preload: bool) -> str:
    head = 'preload = ["numpy"]\n' if preload else ""
    return head + f"""
[[steps]]
id = "call"
call = "fleet_steps:thread_report"
cores = 2
[[steps]]
id = "command"
command = ["{sys.executable}", "-c", "import os; print('omp', os.environ.get('OMP_NUM_THREADS'), os.environ.get('OPENBLAS_NUM_THREADS'))"]
cores = 2
"""


@pytest.mark.parametrize("preload", [True, False], ids=["numpy preloaded", "numpy not preloaded"])
def test_a_two_core_step_has_two_threads_in_its_environment_and_its_blas_pool(tmp_path, preload):
    pytest.importorskip("numpy")
    pytest.importorskip("threadpoolctl")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores")
    suite = write_suite(tmp_path / "t.toml", '[suite]\nname = "t"\nrun_dir = "run"\n' + _threads_suite(preload))
    r = fleet("run", str(suite), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run_dir = tmp_path / "run"
    got = json.loads((run_dir / "steps/call/threads.json").read_text())
    assert got["env"] == {v: "2" for v in got["env"]}, got
    assert got["pools"] and set(got["pools"].values()) == {2}, got
    assert got["ctx_threads"] == 2
    assert "omp 2 2" in (run_dir / "steps/command/log").read_text()
    assert got["numpy_was_preloaded"] is preload
    assert_nothing_left(run_dir)


# -- 16: declared outputs ------------------------------------------------------------------


def test_a_declared_output_that_was_not_produced_fails_the_step_and_blocks_its_consumer(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "maker"
call = "fleet_steps:writes_nothing"
outputs = ["data/made.json", "data/also.json"]
[[steps]]
id = "cmd-maker"
command = "echo pretending"
outputs = ["cmd.out"]
[[steps]]
id = "consumer"
call = "fleet_steps:combine"
inputs = ["data/made.json"]
outputs = ["total.json"]
""")
    assert r.returncode == 1
    ex = exits(run_dir)
    assert ex["maker"]["outcome"] == "failed"
    assert ex["maker"]["reason"] == "declared outputs data/made.json, data/also.json were not produced"
    assert ex["cmd-maker"]["outcome"] == "failed"
    assert ex["cmd-maker"]["reason"] == "declared output cmd.out was not produced"
    assert "consumer" not in ex  # never ran
    blocked = {e["step"] for e in events(run_dir) if e["kind"] == "blocked"}
    assert "consumer" in blocked
    assert "fleet: declared output cmd.out was not produced" in (run_dir / "steps/cmd-maker/log").read_text()
    assert_nothing_left(run_dir)


# -- 19: logs keep every attempt -----------------------------------------------------------

HEADER = re.compile(r"^==== fleet: step (\S+) attempt (\d+)( fleet \S+)? on (\S+) at (\S+) ====$")


def test_each_attempt_and_each_run_opens_the_log_with_a_header_and_old_output_stays(tmp_path):
    flag = tmp_path / "flag"
    body = f"""
[[steps]]
id = "retried"
call = "fleet_steps:says_attempt"
retries = 1
[[steps]]
id = "rerun"
call = "fleet_steps:fail_unless_flag"
args = {{ flag = "{flag}" }}
"""
    r, run_dir = run(tmp_path, body)
    assert r.returncode == 1  # "rerun" failed: its flag is missing
    flag.write_text("")
    r2, _ = run(tmp_path, body)
    assert r2.returncode == 0, r2.stderr

    lines = (run_dir / "steps/retried/log").read_text().splitlines()
    headers = [(i, HEADER.match(l)) for i, l in enumerate(lines) if HEADER.match(l)]
    assert [m.group(2) for _, m in headers] == ["1", "2"], lines
    first, second = headers[0][0], headers[1][0]
    assert first == 0
    assert "output of attempt 1" in lines[first:second]
    assert any("the first attempt fails" in l for l in lines[first:second])
    assert "output of attempt 2" in lines[second:]
    for _, m in headers:
        assert m.group(1) == "retried" and m.group(4) == "node1"
        assert m.group(5)[:4].isdigit()  # an ISO time

    rerun = (run_dir / "steps/rerun/log").read_text()
    assert len([l for l in rerun.splitlines() if HEADER.match(l)]) == 2
    assert "flag" in rerun and "is missing" in rerun  # the first run's failure is still there
    assert_nothing_left(run_dir)
