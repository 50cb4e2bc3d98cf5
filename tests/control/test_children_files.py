"""A child's inputs and outputs, as a suite step's (defects found on 2026-12-07): the
step producing a child's input, a sibling or a step of the fleet, is a dependency; an
input nobody produces must exist; no child produces a path another step produces.
Before, a child reading a sibling's or a suite step's output started at once and
failed, the file missing, and two producers of one path were all taken (the last
writer won). Real `fleet run`s; step functions in tests/children_steps.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def run(tmp_path: Path, body: str, name: str = "files"):
    suite = write_suite(tmp_path / f"{name}.toml", f'[suite]\nname = "{name}"\nrun_dir = "{name}"\n' + body)
    r = fleet("run", str(suite), cwd=tmp_path, timeout=120.0)
    return r, tmp_path / name


def exits(run_dir: Path) -> dict:
    return {e["step"]: e for e in events(run_dir) if e["kind"] == "exit"}


def test_a_childs_input_made_by_a_sibling_or_a_suite_step_waits_for_that_step_to_succeed(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "prod"
command = "sleep 1; echo suite > ../../made.txt"
outputs = ["made.txt"]

[[steps]]
id = "p"
call = "children_steps:submits_these"
args = { kids = [
  { id = "c1", command = "sleep 1; echo sibling > ../../../sib.txt", outputs = ["sib.txt"] },
  { id = "c2", command = "cat ../../../sib.txt ../../../made.txt > seen.txt", inputs = ["sib.txt", "made.txt"] },
] }
""")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run_dir / "steps/p/c2/seen.txt").read_text() == "sibling\nsuite\n"
    seq = [(e["kind"], e["step"]) for e in events(run_dir) if e["kind"] in ("start", "exit")]
    assert seq.index(("start", "p/c2")) > max(seq.index(("exit", "p/c1")), seq.index(("exit", "prod")))
    assert_nothing_left(run_dir)


def test_a_childs_input_that_no_step_produces_and_is_not_on_disk_fails_its_parent_naming_child_and_field(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "p"
call = "children_steps:submits_these"
args = { kids = [
  { id = "ok", command = "true", inputs = ["there.txt"] },
  { id = "c3", command = "cat /nonexistent/zz", inputs = ["/nonexistent/zz"] },
] }
retries = 0
""")
    assert r.returncode == 1, r.stdout + r.stderr
    got = exits(run_dir)
    assert "p/c3" not in got and "p/ok" not in got  # (refused: nothing of the submission ran)
    assert got["p"]["outcome"] == "failed"
    assert ("step 'p/c3': field 'inputs': '/nonexistent/zz' is produced by no step and does not exist"
            in got["p"]["reason"])
    assert f"step 'p/ok': field 'inputs': 'there.txt' is produced by no step and does not exist in {run_dir}" \
        in got["p"]["reason"]
    assert "field 'inputs': '/nonexistent/zz'" in (run_dir / "steps/p/log").read_text()
    assert_nothing_left(run_dir)


def test_a_child_may_not_produce_a_path_a_suite_step_a_sibling_or_another_parents_child_produces(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "a"
command = "echo a > ../../shared.txt"
outputs = ["shared.txt"]

[[steps]]
id = "p"
call = "children_steps:submits_these"
args = { kids = [{ id = "c", command = "echo c > ../../../shared.txt", outputs = ["./shared.txt"] }] }
deps = ["a"]
retries = 0

[[steps]]
id = "q"
command = '''printf '[[steps]]\\nid = "c1"\\ncommand = "true"\\noutputs = ["s3.txt"]\\n[[steps]]\\nid = "c2"\\ncommand = "true"\\noutputs = ["s3.txt"]\\n' > $FLEET_SUBMIT_DIR/k.toml; exit 3'''
protocol = "steps"
retries = 0

[[steps]]
id = "x1"
call = "children_steps:submits_these"
args = { kids = [{ id = "c", command = "echo x1 > ../../../two.txt", outputs = ["two.txt"] }] }

[[steps]]
id = "x2"
call = "children_steps:submits_these"
args = { kids = [{ id = "c", command = "echo x2 > ../../../two.txt", outputs = ["two.txt"] }] }
deps = ["x1"]
retries = 0
""")
    assert r.returncode == 1, r.stdout + r.stderr
    got = exits(run_dir)
    assert (run_dir / "shared.txt").read_text() == "a\n" and "p/c" not in got
    assert "step 'p/c': field 'outputs': './shared.txt' is also produced by step 'a'" in got["p"]["reason"]
    assert "q/c1" not in got and "q/c2" not in got
    assert "step 'q/c2': field 'outputs': 's3.txt' is also produced by step 'q/c1'" in got["q"]["reason"]
    assert got["x1/c"]["outcome"] == "succeeded" and "x2/c" not in got
    assert (run_dir / "two.txt").read_text() == "x1\n"
    assert "step 'x2/c': field 'outputs': 'two.txt' is also produced by step 'x1/c'" in got["x2"]["reason"]
    assert_nothing_left(run_dir)


def test_a_childs_input_made_by_a_child_of_a_step_its_parent_depends_on_is_read_without_a_dependency(tmp_path):
    # The two-stage pattern: q's children write files, p (deps q) submits children
    # reading them. For a few hours of 2026-12-07 p's attempt failed: "'x.txt' is an
    # output of 'q/c': 'q/c' names a child of 'q', another family: ... make 'p' depend on
    # 'q'", though p did. A producer in q's family that failed left no file: refused.
    r, run_dir = run(tmp_path, """
[[steps]]
id = "q"
call = "children_steps:submits_these"
args = { kids = [
  { id = "c", command = "echo made > ../../../x.txt", outputs = ["x.txt"] },
  { id = "bad", command = "exit 1", outputs = ["never.txt"], retries = 0 },
] }

[[steps]]
id = "p"
deps = ["q"]
call = "children_steps:submits_these"
args = { kids = [{ id = "c", command = "cat ../../../x.txt > seen.txt", inputs = ["x.txt"] }] }

[[steps]]
id = "late"
deps = ["p"]
call = "children_steps:submits_these"
args = { kids = [{ id = "c", command = "true", inputs = ["never.txt"] }] }
retries = 0
""")
    assert r.returncode == 1, r.stdout + r.stderr
    got = exits(run_dir)
    assert got["p"]["outcome"] == "succeeded" and got["p/c"]["outcome"] == "succeeded", got.get("p")
    assert (run_dir / "steps/p/c/seen.txt").read_text() == "made\n"
    assert got["q/bad"]["outcome"] == "failed" and "late/c" not in got
    assert ("step 'late/c': field 'inputs': 'never.txt' is an output of 'q/bad', which ended failed without "
            "making it, and it does not exist" in got["late"]["reason"])
    declared = {e["step"]: e for e in events(run_dir) if e["kind"] == "step"}
    assert "q/c" not in declared["p/c"]["deps"]  # (q's family ended before p ran)
    assert_nothing_left(run_dir)


def test_a_childs_input_made_by_another_familys_child_still_running_is_refused_naming_the_step_to_depend_on(
        tmp_path):
    # q/c writes x.txt only once p's attempt has failed (its log names the refusal), so
    # p's children are always collected while q/c runs; p does not wait for q.
    r, run_dir = run(tmp_path, """
[[steps]]
id = "q"
call = "children_steps:submits_these"
args = { kids = [{ id = "c", outputs = ["x.txt"], command = '''
for i in $(seq 600); do grep -q "field 'inputs'" ../../p/log 2>/dev/null && break; sleep 0.1; done
echo made > ../../../x.txt''' }] }

[[steps]]
id = "w"
command = "for i in $(seq 600); do [ -e ../q/c/log ] && break; sleep 0.1; done"

[[steps]]
id = "p"
deps = ["w"]
call = "children_steps:submits_these"
args = { kids = [{ id = "c", command = "cat ../../../x.txt", inputs = ["x.txt"] }] }
retries = 0
""")
    assert r.returncode == 1, r.stdout + r.stderr
    got = exits(run_dir)
    assert got["q/c"]["outcome"] == "succeeded" and "p/c" not in got
    assert ("step 'p/c': field 'inputs': 'x.txt' is an output of 'q/c': 'q/c' names a child of 'q', another family"
            in got["p"]["reason"])
    assert "make 'p' depend on 'q'" in (run_dir / "steps/p/log").read_text()
    assert_nothing_left(run_dir)


def test_a_childs_output_or_workdir_inside_another_steps_output_or_a_siblings_fails_its_parent_naming_child_and_field(
        tmp_path):
    # Until a fix of 2026-12-07 such children were taken and failed as they ran: "cannot make the
    # directory .../d (of output x): it exists and is not a directory".
    r, run_dir = run(tmp_path, """
[[steps]]
id = "a"
command = "echo a > ../../d"
outputs = ["d"]

[[steps]]
id = "p"
deps = ["a"]
call = "children_steps:submits_these"
args = { kids = [
  { id = "c", command = "echo c > ../../../d/x", outputs = ["./d/x"] },
  { id = "w", command = "true", workdir = "d/w" },
] }
retries = 0

[[steps]]
id = "q"
command = '''printf '[[steps]]\\nid = "c1"\\ncommand = "echo > ../../../e"\\noutputs = ["e"]\\n[[steps]]\\nid = "c2"\\ncommand = "true"\\noutputs = ["e/x"]\\n[[steps]]\\nid = "c3"\\ncommand = "true"\\nworkdir = "e"\\n' > $FLEET_SUBMIT_DIR/k.toml; exit 3'''
protocol = "steps"
retries = 0

[[steps]]
id = "s"
call = "children_steps:submits_these"
args = { kids = [{ id = "c1", command = "true", outputs = ["f"] }, { id = "c2", command = "true", outputs = ["f/x"] }] }
retries = 0
""")
    assert r.returncode == 1, r.stdout + r.stderr
    got = exits(run_dir)
    assert not [k for k in got if "/" in k], got.keys()  # (refused: no child ran)
    assert (run_dir / "d").read_text() == "a\n"
    assert ("step 'p/c': field 'outputs': './d/x' is inside 'd', an output of step 'a': an output is a file, so no "
            "other step's path can be inside it" in got["p"]["reason"])
    assert ("step 'p/w': field 'workdir': 'd/w' is inside 'd', an output of step 'a': an output is a file, and a "
            "workdir a directory" in got["p"]["reason"])
    assert "step 'q/c2': field 'outputs': 'e/x' is inside 'e', an output of step 'q/c1'" in got["q"]["reason"]
    assert "step 'q/c3': field 'workdir': 'e' is an output of step 'q/c1'" in got["q"]["reason"]
    assert ("SuiteError: s: ctx.submit: step 's/c2': field 'outputs': 'f/x' is inside 'f', an output of step 's/c1'"
            in got["s"]["reason"])
    assert_nothing_left(run_dir)


def test_a_childs_wait_for_the_sibling_producing_its_input_is_recorded_and_reported_as_a_dependency(tmp_path):
    # Until a fix of 2026-12-07 the declared record said "deps": [] and fleet report said c2
    # waited "its turn (ready, no wait recorded)", its floor without c1. Its marker still
    # names its deps alone (the user guide: done-ness is what its deps made).
    r, run_dir = run(tmp_path, """
[[steps]]
id = "p"
call = "children_steps:submits_these"
args = { kids = [
  { id = "c1", command = "sleep 1; echo sibling > ../../../sib.txt", outputs = ["sib.txt"] },
  { id = "c2", command = "cat ../../../sib.txt > seen.txt", inputs = ["sib.txt"] },
] }
""")
    assert r.returncode == 0, r.stdout + r.stderr
    declared = {e["step"]: e for e in events(run_dir) if e["kind"] == "step"}
    assert declared["p/c2"]["deps"] == ["p/c1"] and declared["p/c1"]["deps"] == []
    assert json.loads((run_dir / "steps/p/c2/.fleet/done.json").read_text())["deps"] == {}
    rep = fleet("report", str(run_dir), cwd=tmp_path, timeout=120.0)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "p/c2: a dependency (dependency p/c1)" in rep.stdout, rep.stdout
    assert "p/c1 -> p/c2" in rep.stdout and "no wait recorded" not in rep.stdout, rep.stdout
    assert_nothing_left(run_dir)
