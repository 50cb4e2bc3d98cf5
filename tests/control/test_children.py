"""Steps that add steps, wait for them without holding resources, and go on in stages
(issue 13 items 1-3), through the real `fleet` CLI: real processes, real files. Step
functions live in tests/children_steps.py."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from children_steps import ran
from fleetharness import assert_nothing_left, events, fleet, write_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def run(tmp_path: Path, body: str, *extra: str, name: str = "kids", timeout: float = 180.0):
    suite = write_suite(tmp_path / f"{name}.toml", f'[suite]\nname = "{name}"\nrun_dir = "{name}"\n' + body)
    r = fleet("run", str(suite), *extra, cwd=tmp_path, timeout=timeout)
    return r, tmp_path / name


def exits(run_dir: Path, step: str) -> list[dict]:
    return [e for e in events(run_dir) if e["kind"] == "exit" and e["step"] == step]


def test_fifty_parents_of_one_core_on_two_cores_each_waiting_for_four_children_do_not_deadlock(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "p{i}"
array = "0-49"
call = "children_steps:parent"
args = { n = 4 }
""", "--nodes", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    seen = ran(run_dir)
    resumed = [x for x in seen if x["what"] == "resumed"]
    assert sorted(x["step"] for x in resumed) == sorted(f"p{i}" for i in range(50))
    assert all(x["phase"] == 1 and len(x["children"]) == 4 and set(x["children"].values()) == {"succeeded"}
               for x in resumed)
    assert len([x for x in seen if x["what"] == "child"]) == 200
    assert [e["outcome"] for e in exits(run_dir, "p7")] == ["wait", "succeeded"]
    assert_nothing_left(run_dir)


def test_a_step_that_submits_two_hundred_children_and_waits_sees_them_all_succeed(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "big"
call = "children_steps:many"
args = { n = 200 }

[[steps]]
id = "after"
call = "children_steps:child"
deps = ["big"]
""")
    assert r.returncode == 0, r.stdout + r.stderr
    # The progress counts the children from the first line after they came in.
    counted = [(int(a), int(b)) for a, b in re.findall(r"^\[\s*(\d+)/(\d+)\]", r.stdout, re.M)]
    assert counted[-1] == (202, 202) and all(total == 202 for _, total in counted[1:]), r.stdout
    seen = ran(run_dir)
    resumed = [x for x in seen if x["what"] == "resumed"]
    assert resumed == [dict(resumed[0], count=200, bad={})]
    after = next(x for x in seen if x["step"] == "after")
    assert after["t"] > resumed[0]["t"]  # a parent's dependents wait for its final success
    assert_nothing_left(run_dir)


def test_nested_children_run_and_each_parent_goes_on_after_its_own_children(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "top"
call = "children_steps:parent"
args = { n = 2, depth = 2 }
""")
    assert r.returncode == 0, r.stdout + r.stderr
    seen = ran(run_dir)
    resumed = {x["step"]: x for x in seen if x["what"] == "resumed"}
    assert set(resumed) == {"top", "top/c0", "top/c1", "top/c0/c0", "top/c0/c1", "top/c1/c0", "top/c1/c1"}
    leaves = {x["step"]: x["t"] for x in seen if x["what"] == "child"}
    assert len(leaves) == 8 and "top/c0/c1/c1" in leaves
    assert resumed["top"]["t"] > max(x["t"] for x in resumed.values() if x["step"] != "top")
    assert resumed["top/c0/c1"]["t"] > max(leaves["top/c0/c1/c0"], leaves["top/c0/c1/c1"])
    assert (run_dir / "steps/top/c0/c1/c1/log").exists()
    assert_nothing_left(run_dir)


def test_a_retried_parent_that_submits_the_same_children_again_adds_nothing(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "p"
call = "children_steps:parent"
args = { n = 3, fail_once = true }
retries = 1
""")
    assert r.returncode == 0, r.stdout + r.stderr
    seen = ran(run_dir)
    assert sorted(x["step"] for x in seen if x["what"] == "child") == ["p/c0", "p/c1", "p/c2"]
    assert len([x for x in seen if x["what"] == "submitted"]) == 2
    declared = [e["step"] for e in events(run_dir) if e["kind"] == "step" and e["step"].startswith("p/")]
    assert sorted(declared) == ["p/c0", "p/c1", "p/c2"]
    assert_nothing_left(run_dir)


def test_a_child_a_retried_parent_submitted_again_after_it_ended_says_so_on_its_second_line(tmp_path):
    # (its second end was printed as the first, "[4/4]  failed  p/bad" twice, as if counted twice)
    r, run_dir = run(tmp_path, """
[[steps]]
id = "p"
call = "children_steps:fails_after_submitting"
retries = 1
""")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("[") and (" p/bad" in line or " p/sum" in line)]
    assert [line.split("]", 1)[1].split(":")[0].split() for line in lines] == [
        ["failed", "p/bad"], ["blocked", "p/sum"],
        ["failed", "p/bad", "(submitted", "again", "by", "p,", "attempt", "2)"],
        ["blocked", "p/sum", "(submitted", "again", "by", "p,", "attempt", "2)"]], r.stdout
    assert "1 blocked, 2 failed, 1 succeeded" in r.stdout, r.stdout  # (counted once each)
    assert [x["step"] for x in ran(run_dir) if x["what"] == "child"].count("p/bad") == 2
    assert_nothing_left(run_dir)


def test_children_deps_name_siblings_first_then_the_suites_steps_and_a_bad_table_raises_suite_error(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "first"
call = "children_steps:child"

[[steps]]
id = "p"
call = "children_steps:chain"

[[steps]]
id = "bad"
call = "children_steps:bad_submit"
""")
    assert r.returncode == 0, r.stdout + r.stderr
    seen = ran(run_dir)
    order = [x["step"] for x in seen if x["what"] == "child"]
    assert order.index("p/a") < order.index("p/b") and order.index("first") < order.index("p/b")
    refused = next(x for x in seen if x["what"] == "refused")
    assert refused["problems"] == ["bad: ctx.submit: step 'bad/x': field 'cores': "
                                   + refused["problems"][0].split("field 'cores': ")[1]]
    assert_nothing_left(run_dir)


def test_a_child_with_a_dep_on_no_known_step_fails_its_parent_with_the_problem_in_its_reason_and_log(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "p"
call = "children_steps:bad_dep"
""")
    assert r.returncode == 1, r.stdout + r.stderr
    said, verdict = exits(run_dir, "p")  # the node's (it waits), then the coordinator's (it failed)
    problem = "'nosuch' is neither a sibling nor a step of the fleet"
    assert said["outcome"] == "wait" and verdict["outcome"] == "failed" and "node" not in verdict
    assert "its submitted steps were refused" in verdict["reason"] and problem in verdict["reason"]
    rep = json.loads(fleet("report", str(run_dir), "--json", cwd=tmp_path, timeout=60).stdout)
    assert rep["steps"]["p"]["outcome"] == "failed" and problem in rep["steps"]["p"]["reason"], rep["steps"]["p"]
    from fleetharness import wait_for
    log = run_dir / "steps" / "p" / "log"
    wait_for(lambda: problem in log.read_text(), 10, "the problem in the parent's log")  # written off the loop
    assert "p/x" in log.read_text() and "deps" in log.read_text()
    assert not exits(run_dir, "p/x")
    assert_nothing_left(run_dir)


def test_next_restart_and_broken_from_a_call_step(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "multi"
call = "children_steps:stages"

[[steps]]
id = "br"
call = "children_steps:broken"
retries = 3

[[steps]]
id = "after_br"
call = "children_steps:child"
deps = ["br"]
""")
    assert r.returncode == 1, r.stdout + r.stderr
    seen = [x for x in ran(run_dir) if x["step"] == "multi"]
    assert [(x["stage"], x["restarts"]) for x in seen] == [("", 0), ("relax", 0), ("", 1), ("relax", 1),
                                                              ("final", 1)]
    assert "relax.out" not in seen[2]["files"] and "start.out" not in seen[2]["files"]
    assert sorted(p.name for p in (run_dir / "steps/multi/attempt-1").iterdir()) == ["relax.out", "start.out"]
    assert [e["outcome"] for e in exits(run_dir, "multi")] == ["next", "restart", "next", "next", "succeeded"]
    assert [e["outcome"] for e in exits(run_dir, "br")] == ["broken"]  # never retried
    assert "broken" in r.stdout and "after_br" in r.stdout
    assert not [x for x in ran(run_dir) if x["step"] == "after_br"]
    assert_nothing_left(run_dir)


def test_a_step_restarted_after_its_children_runs_phase_0_from_scratch_with_no_children(tmp_path):
    r, run_dir = run(tmp_path, '[[steps]]\nid = "r"\ncall = "children_steps:restarts_after_children"\n')
    assert r.returncode == 0, r.stdout + r.stderr
    seen = [(x["phase"], x["restarts"], x["children"]) for x in ran(run_dir) if x["what"] == "saw"]
    assert seen == [(0, 0, {}), (1, 0, {"r/k": "succeeded"}), (0, 1, {})], seen
    assert_nothing_left(run_dir)


def test_a_command_step_speaks_httks_exit_codes_only_with_protocol_steps(tmp_path):
    script = tmp_path / "stages.sh"
    script.write_text("""#!/bin/sh
echo "phase=$FLEET_PHASE stage=$FLEET_STAGE" >> "$FLEET_RUN_DIR/cmd.txt"
case "$FLEET_STAGE" in
  "") printf 'two' > "$FLEET_NEXT_STAGE"; exit 2 ;;
  two)
    if [ "$FLEET_PHASE" = 1 ]; then
      printf '[[steps]]\\nid = "k"\\ncommand = "echo kid >> $FLEET_RUN_DIR/cmd.txt"\\n' > "$FLEET_SUBMIT_DIR/ht.tmp.k"
      mv "$FLEET_SUBMIT_DIR/ht.tmp.k" "$FLEET_SUBMIT_DIR/k.toml"
      exit 3
    fi
    [ -e "$FLEET_RUN_DIR/restarted" ] && exit 0
    touch "$FLEET_RUN_DIR/restarted"
    exit 4 ;;
esac
exit 1
""")
    script.chmod(0o755)
    r, run_dir = run(tmp_path, f"""
[[steps]]
id = "cmd"
command = ["{script}"]
protocol = "steps"

[[steps]]
id = "brk"
command = "exit 5"
protocol = "steps"
retries = 2

[[steps]]
id = "plain"
command = "exit 2"
""")
    assert r.returncode == 1, r.stdout + r.stderr
    assert (run_dir / "cmd.txt").read_text().splitlines() == [
        "phase=0 stage=", "phase=1 stage=two", "kid", "phase=2 stage=two",
        "phase=0 stage=", "phase=1 stage=two", "phase=2 stage=two"]  # the same child again: nothing added
    assert [e["outcome"] for e in exits(run_dir, "cmd")] == ["next", "wait", "restart", "next", "wait", "succeeded"]
    assert [e["outcome"] for e in exits(run_dir, "brk")] == ["broken"]
    assert [e["outcome"] for e in exits(run_dir, "plain")] == ["failed"]
    assert_nothing_left(run_dir)


def test_a_protocol_step_that_exits_2_by_accident_naming_no_stage_fails_instead_of_running_again_for_ever(tmp_path):
    # (ls of a missing file exits 2; it used to run the same stage again at once, ~200 times a second)
    r, run_dir = run(tmp_path, f"""
[[steps]]
id = "prep"
command = "ls {tmp_path}/no-such-input.dat"
protocol = "steps"
retries = 1

[[steps]]
id = "after"
command = "true"
deps = ["prep"]
""", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    ends = exits(run_dir, "prep")
    assert [e["outcome"] for e in ends] == ["failed", "failed"], ends  # its retry, then the end
    assert all("exit status 2 with no stage named in $FLEET_NEXT_STAGE" in e["reason"] for e in ends), ends
    assert "blocked    after" in r.stdout or "blocked after" in r.stdout, r.stdout
    assert_nothing_left(run_dir)


def test_a_step_that_waits_for_its_children_in_every_phase_fails_on_its_second_wait_for_nothing(tmp_path):
    # (nothing to wait for: it goes on at once, phase one higher; it used to loop for ever)
    r, run_dir = run(tmp_path, """
[[steps]]
id = "loops"
call = "children_steps:waits_always"

[[steps]]
id = "none"
call = "children_steps:waits_always"
args = { kids = 0 }
""", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    seen = [(x["step"], x["phase"]) for x in ran(run_dir) if x["what"] == "waits"]
    # loops: phase 0 submits and waits for k0; phase 1 waits for nothing (goes on); phase 2 again: fails
    assert sorted(seen) == [("loops", 0), ("loops", 1), ("loops", 2), ("none", 0), ("none", 1)], seen
    for step in ("loops", "none"):
        last = exits(run_dir, step)[-1]
        assert last["outcome"] == "failed" and "wait for its children twice in a row" in last["reason"], last
    assert [x["step"] for x in ran(run_dir) if x["what"] == "child"] == ["loops/k0"]
    assert_nothing_left(run_dir)


def test_a_failed_child_its_parent_submits_again_is_counted_once_in_the_submission(tmp_path, background):
    # (it was counted twice: "[3/4]" at the end of a run of 3 steps, and status "4/4 finished")
    flag = tmp_path / "broken-input"
    flag.touch()
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[[steps]]
id = "p"
call = "children_steps:resubmits_failed"
args = {{ flag = "{flag}" }}
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "[3/3]" in r.stdout and "/4]" not in r.stdout, r.stdout
        assert "suite 's': 3 succeeded" in r.stdout, r.stdout
        assert "did not succeed" not in r.stdout, r.stdout  # (its first failure is not said at the end)
        st = json.loads(fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=30).stdout)
        [sub] = st["submissions"]
        assert (sub["steps"], sub["finished"]) == (3, 3), sub
    finally:
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    assert [e["outcome"] for e in exits(run_dir, "p/case1")] == ["failed", "succeeded"]
    assert_nothing_left(run_dir)


def test_a_parent_that_ends_without_waiting_succeeds_once_its_children_have_ended_and_its_dependents_after(tmp_path):
    # (its dependents started as it ended, before its children ran: "No such file")
    r, run_dir = run(tmp_path, """
[[steps]]
id = "p"
call = "children_steps:leaves_children"

[[steps]]
id = "after"
command = "cat ../p/k0/out.txt ../p/k1/out.txt"
deps = ["p"]
""", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ev = events(run_dir)
    ended = {e["step"]: e for e in ev if e["kind"] == "exit"}
    assert {s: e["outcome"] for s, e in ended.items()} == dict.fromkeys(["p", "p/k0", "p/k1", "after"], "succeeded")
    [after] = [e for e in ev if e["kind"] == "started" and e["step"] == "after"]
    assert after["at"] >= max(ended["p/k0"]["ended_at"], ended["p/k1"]["ended_at"]), (after, ended)
    assert [x["step"] for x in ran(run_dir) if x["what"] == "left"] == ["p"]  # it did not run again
    assert "4 succeeded" in r.stdout, r.stdout
    assert_nothing_left(run_dir)


def test_on_a_live_fleet_children_kept_from_before_are_listed_skipped_in_the_submission_that_reran_their_parent(
        tmp_path):
    # (a new fleet listed them skipped; a live one left them out of wait()'s outcomes)
    import fleet as F
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[[steps]]
id = "X"
command = "true"
[[steps]]
id = "p"
call = "children_steps:parent"
args = { n = 2 }
deps = ["X"]
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        f = F.connect(run_dir)
        first = f.wait(f.submit(suite), timeout=120)
        assert first == {"X": "succeeded", "p": "succeeded", "p/c0": "succeeded", "p/c1": "succeeded"}, first
        shutil.rmtree(run_dir / "steps" / "X")  # X and p run again; p's children are done still
        sub = f.submit(suite)
        updates: list = []
        again = f.wait(sub, timeout=120, on_progress=updates.append)
        assert again == {"X": "succeeded", "p": "succeeded", "p/c0": "skipped", "p/c1": "skipped"}, again
        assert updates[-1].counts == {"succeeded": 4}, updates[-1].counts
        assert len([x for x in ran(run_dir) if x["what"] == "child"]) == 2  # once each
        f.close()
    finally:
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    assert_nothing_left(run_dir)


READS_X = """
[suite]
name = "readsx"
[[steps]]
id = "X"
command = "date +%s%N > value.txt"
[[steps]]
id = "p"
call = "children_steps:reads_a_suite_step"
deps = ["X"]
"""


def _seen_is_xs(run_dir: Path) -> bool:
    return (run_dir / "steps/p/c/seen.txt").read_text() == (run_dir / "steps/X/value.txt").read_text()


def test_a_child_that_needs_a_suite_step_run_again_runs_again_in_the_next_fleet(tmp_path):
    # (it was skipped as done: its output was the old X's, while X and its parent ran anew)
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", READS_X)
    for i in range(2):
        if i:
            shutil.rmtree(run_dir / "steps/X")
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _seen_is_xs(run_dir)
    assert [e["outcome"] for e in exits(run_dir, "p/c")] == ["succeeded", "succeeded"]
    r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)  # nothing changed since
    assert r.returncode == 0 and _seen_is_xs(run_dir) and "2 already done" in r.stdout, r.stdout + r.stderr
    assert_nothing_left(run_dir)


def test_on_a_live_fleet_a_child_runs_again_when_a_suite_step_it_needs_or_its_own_directory_is_removed(tmp_path):
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", READS_X)
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        for removed in (None, "steps/X", "steps/p"):
            if removed:
                shutil.rmtree(run_dir / removed)
            r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
            assert _seen_is_xs(run_dir), removed
        assert [e["outcome"] for e in exits(run_dir, "p/c")] == ["succeeded"] * 3
        assert [e["outcome"] for e in exits(run_dir, "X")] == ["succeeded"] * 2  # (not run again for p's removal)
    finally:
        assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    assert_nothing_left(run_dir)


def test_a_coordinator_killed_while_a_parent_waits_leaves_nothing_and_a_rerun_finishes_the_children_once(
        tmp_path, background):
    import os
    import signal

    from fleetharness import finish, spawn, wait_for
    hb = ["--heartbeat", "0.2", "--heartbeat-timeout", "2"]
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "kill"
[[steps]]
id = "p"
call = "children_steps:slow_parent"
args = { n = 3 }
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *hb, cwd=tmp_path, check=True, timeout=60)
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: exits(run_dir, "p/c0") and exits(run_dir, "p"), 60, "the parent to wait and a child to end")
    coordinator = next(e for e in events(run_dir) if e["kind"] == "fleet_starting")["pid"]
    os.kill(coordinator, signal.SIGKILL)
    assert_nothing_left(run_dir, timeout=10)
    finish(runner, 30)
    assert [x["what"] for x in ran(run_dir) if x["step"] == "p"] == ["submitted"]

    r = fleet("run", str(suite), "--run-dir", str(run_dir), *hb, cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = ran(run_dir)
    # The parent's first phase runs again (it submits the same children: nothing new);
    # the child that had succeeded is skipped; the parent goes on once, after the rest.
    assert [x["what"] for x in seen if x["step"] == "p"] == ["submitted", "submitted", "resumed"]
    assert [x["step"] for x in seen if x["what"] == "child"].count("p/c0") == 1
    assert {x["step"] for x in seen if x["what"] == "child"} == {"p/c0", "p/c1", "p/c2"}
    resumed = seen[-1] if seen[-1]["step"] == "p" else next(x for x in seen if x["what"] == "resumed")
    # The child done before counts as succeeded for its parent (it was not run again).
    assert resumed["children"] == {"p/c0": "succeeded", "p/c1": "succeeded", "p/c2": "succeeded"}
    assert_nothing_left(run_dir)


def test_a_coordinator_killed_after_a_parent_succeeded_without_waiting_runs_it_and_its_unfinished_children_next_time(
        tmp_path, background):
    # (its marker was written at its own exit: the rerun skipped it, and the children
    # still to end then never ran)
    import os
    import signal

    from fleetharness import finish, spawn, wait_for
    hb = ["--heartbeat", "0.2", "--heartbeat-timeout", "2"]
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "left"
[[steps]]
id = "p"
call = "children_steps:leaves_slow_children"
args = { n = 3, step_s = 3.0 }
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *hb, cwd=tmp_path, check=True, timeout=60)
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: exits(run_dir, "p/c0") and exits(run_dir, "p"), 60, "the parent and its first child to end")
    assert [e["outcome"] for e in exits(run_dir, "p")] == ["succeeded"]
    assert not exits(run_dir, "p/c2")
    coordinator = next(e for e in events(run_dir) if e["kind"] == "fleet_starting")["pid"]
    os.kill(coordinator, signal.SIGKILL)
    assert_nothing_left(run_dir, timeout=10)
    finish(runner, 30)

    r = fleet("run", str(suite), "--run-dir", str(run_dir), *hb, cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = ran(run_dir)
    # The parent runs again (it submits the same children); the child that had
    # succeeded is kept, the others run: each child has succeeded once in all.
    assert [x["what"] for x in seen if x["step"] == "p"] == ["left", "left"]
    kids = [x["step"] for x in seen if x["what"] == "child"]
    assert kids.count("p/c0") == 1 and {"p/c1", "p/c2"} <= set(kids), kids
    assert exits(run_dir, "p/c2")[-1]["outcome"] == "succeeded"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), *hb, cwd=tmp_path, timeout=90)
    assert r.returncode == 0 and [x["what"] for x in ran(run_dir) if x["step"] == "p"] == ["left", "left"], r.stdout
    assert_nothing_left(run_dir)


SWEEP = """
[suite]
name = "sweep"
[[steps]]
id = "sweep"
call = "children_steps:sweep"
args = {{ n = {n}, flag = "{flag}" }}
[[steps]]
id = "after"
call = "children_steps:child"
deps = ["sweep"]
"""


def _children_ran(run_dir: Path) -> list[str]:
    return sorted(x["step"] for x in ran(run_dir) if x["what"] == "child" and x["step"].startswith("sweep/"))


def test_a_sweep_whose_child_failed_passes_on_the_next_run_once_the_cause_is_fixed(tmp_path):
    """The user guide's sweep: only the failed child runs again, and the children done
    before count as succeeded for their parent."""
    flag = tmp_path / "broken-input"
    flag.touch()
    suite = write_suite(tmp_path / "s.toml", SWEEP.format(n=3, flag=flag))
    run_dir = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert [e["outcome"] for e in exits(run_dir, "sweep/case1")] == ["failed"]
    flag.unlink()
    r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _children_ran(run_dir) == ["sweep/case0", "sweep/case1", "sweep/case1", "sweep/case2"]
    resumed = [x for x in ran(run_dir) if x["what"] == "resumed"]
    assert resumed[-1]["children"] == {f"sweep/case{i}": "succeeded" for i in range(3)}
    assert [e["outcome"] for e in exits(run_dir, "after")] == ["succeeded"]
    assert_nothing_left(run_dir)


def test_children_a_parent_no_longer_submits_are_not_brought_back_by_the_next_run(tmp_path):
    """The earlier run's submission (case2) is not read again when the parent runs anew."""
    flag = tmp_path / "broken-input"
    flag.touch()
    run_dir = tmp_path / "run"
    r = fleet("run", str(write_suite(tmp_path / "s.toml", SWEEP.format(n=3, flag=flag))),
              "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    flag.unlink()
    r = fleet("run", str(write_suite(tmp_path / "s2.toml", SWEEP.format(n=2, flag=flag))),
              "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    resumed = [x for x in ran(run_dir) if x["what"] == "resumed"]
    assert resumed[-1]["children"] == {"sweep/case0": "succeeded", "sweep/case1": "succeeded"}
    assert sorted((run_dir / "steps/sweep/.fleet/submit").iterdir()) != []  # this run's, kept
    assert_nothing_left(run_dir)


def test_on_a_live_fleet_a_sweep_run_again_starts_over_and_reruns_only_its_failed_child(tmp_path):
    flag = tmp_path / "broken-input"
    flag.touch()
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", SWEEP.format(n=3, flag=flag))
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        flag.unlink()
        r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    seen = ran(run_dir)
    # Phase 0 ran again (it submitted again): the parent did not go on with the old outcomes.
    assert [x["what"] for x in seen if x["step"] == "sweep"] == ["submitted", "resumed", "submitted", "resumed"]
    assert _children_ran(run_dir) == ["sweep/case0", "sweep/case1", "sweep/case1", "sweep/case2"]
    assert [x for x in seen if x["what"] == "resumed"][-1]["children"] == {
        f"sweep/case{i}": "succeeded" for i in range(3)}
    assert_nothing_left(run_dir)


def test_fleet_status_shows_a_waiting_parent_its_children_under_it_and_fleet_report_the_family(
        tmp_path, background):
    from fleetharness import finish, spawn, wait_for
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "family"
[[steps]]
id = "p"
call = "children_steps:slow_parent"
args = { n = 2, step_s = 6.0 }
[[steps]]
id = "multi"
call = "children_steps:stages"
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(runner)
        wait_for(lambda: exits(run_dir, "p") and exits(run_dir, "p/c0"), 60, "the parent to wait")
        st = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=30).stdout
        assert "waiting for children (1):" in st, st
        assert "  p                              waiting for 1 of 2 children  then phase 1" in st, st
        assert "    p/c1 " in st, st  # running, indented under its parent
        assert "suspended 1" in st, st
        rc, out, err = finish(runner, 60)
        assert rc == 0, out + err
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    text = fleet("report", str(run_dir), cwd=tmp_path, check=True, timeout=60).stdout
    assert "  children      2 submitted by 1 step(s); stages and waits:" in text, text
    assert "    p [succeeded]: 2 children (2 succeeded); waited for children 1 time(s)" in text, text
    assert "    multi [succeeded]: stages relax -> relax -> final; restarted 1 time(s)" in text, text
    assert_nothing_left(run_dir)


def cancel_the_parent(tmp_path: Path, background, call: str) -> tuple:
    """A fleet up on one node runs parent `p` (`call`, 3 children of 30-s steps); once the
    parent has ended an attempt and its first child has ended, `fleet cancel p`. Returns
    (run_dir, suite, cancel's stdout, the run's (rc, out, err)); the fleet is left up
    (taken down here if this fails)."""
    from fleetharness import finish, spawn, wait_for
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "cancel"
[[steps]]
id = "p"
call = "{call}"
args = {{ n = 3, step_s = 30.0 }}
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(runner)
        wait_for(lambda: exits(run_dir, "p/c0") and exits(run_dir, "p"), 60, "the parent to wait or end")
        r = fleet("cancel", "--run-dir", str(run_dir), "p", cwd=tmp_path, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        return run_dir, suite, r.stdout, finish(runner, 60)
    except BaseException:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
        raise


def test_fleet_cancel_of_a_waiting_parent_cancels_it_and_its_unfinished_children_and_leaves_nothing(
        tmp_path, background):
    run_dir, _, said, (rc, out, err) = cancel_the_parent(tmp_path, background, "children_steps:slow_parent")
    try:
        # The answer counts the children that end with their parent (c1, c2: running or not yet).
        assert "cancelled 3 steps: " in said, said
        assert rc == 1, out + err
        assert "cancelled  p" in out and "cancelled  p/c1" in out and "cancelled  p/c2" in out, out
        assert not [x for x in ran(run_dir) if x["what"] == "resumed"]
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_a_parent_cancelled_after_it_succeeded_without_waiting_is_not_recorded_done_and_runs_again_next_time(
        tmp_path, background):
    # (its marker said succeeded: the next run skipped it, and its children with it)
    from fleetharness import spawn, wait_for
    run_dir, suite, said, (rc, out, err) = cancel_the_parent(tmp_path, background,
                                                             "children_steps:leaves_slow_children")
    try:
        assert "cancelled 3 steps: " in said, said
        assert rc == 1 and "cancelled  p" in out and "cancelled  p/c2" in out, out + err
        again = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(again)
        wait_for(lambda: [x["what"] for x in ran(run_dir) if x["step"] == "p"] == ["left", "left"], 60,
                 "the parent to run again")
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert [x["what"] for x in ran(run_dir) if x["step"] == "p"] == ["left", "left"]
    assert_nothing_left(run_dir)


def test_a_parent_that_succeeded_before_fleet_down_stopped_its_children_runs_again_not_counted_lost(
        tmp_path, background):
    from fleetharness import finish, spawn, wait_for
    from fleet.wire import records
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "down"
[[steps]]
id = "p"
call = "children_steps:leaves_slow_children"
args = { n = 2, step_s = 3.0 }
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
    background.append(runner)
    wait_for(lambda: exits(run_dir, "p/c0") and exits(run_dir, "p"), 60, "the parent and a child to end")
    assert not exits(run_dir, "p/c1")
    assert fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60).returncode == 0
    finish(runner, 60)
    assert_nothing_left(run_dir)
    r = fleet("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [x["what"] for x in ran(run_dir) if x["step"] == "p"] == ["left", "left"]
    # (it was recorded `lost` by the next fleet: "its fleet ended while it ran")
    assert [a["outcome"] for a in records.attempts(run_dir, "p")] == ["succeeded"]
    assert [a["outcome"] for a in records.attempts(run_dir, "p/c0")] == ["succeeded"]
    assert_nothing_left(run_dir)


def test_the_children_of_a_parent_cancelled_while_it_runs_are_never_entered_nor_run(tmp_path, background):
    from fleetharness import finish, spawn, wait_for
    run_dir = tmp_path / "run"
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "cancel-running"
[[steps]]
id = "p"
call = "children_steps:submits_and_runs_on"
""")
    fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=60)
    try:
        runner = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        background.append(runner)
        wait_for(lambda: [x for x in ran(run_dir) if x["what"] == "submitted"], 60, "the parent to submit")
        r = fleet("cancel", "--run-dir", str(run_dir), "p", cwd=tmp_path, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        rc, out, err = finish(runner, 60)
        assert rc == 1 and "cancelled  p" in out, out + err
        assert not exits(run_dir, "p/k0") and not exits(run_dir, "p/k1"), "a cancelled parent's children ran"
        assert "p/k0" not in out
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_the_launch_of_a_parent_with_fifty_thousand_children_stays_under_the_message_limit(tmp_path):
    from fleet.control import launching
    from fleet.core.resources import Slot
    from fleet.core.decisions import Resume, Start
    from fleet.core.suite import parse_suite
    from fleet.site.profiles import Profile
    from fleet.wire import messages as P
    spec = parse_suite({"steps": [{"id": "p", "call": "m:f"}]}, tmp_path / "s.toml").steps[0]
    kids = tuple((f"p/k{i}", "failed" if i % 1000 == 0 else "succeeded") for i in range(50_000))
    d = Start("p", 1, (Slot("n", (0,), (), 1 << 30),), Resume(1, "", 0, kids))
    msg = launching.launch(Profile("local", ""), spec, d, tmp_path)
    assert len(P.encode(msg)) < P.MAX_FRAME
    assert msg.children == {f"p/k{i}": "failed" for i in range(0, 50_000, 1000)}
    assert msg.children_omitted == 50_000 - 50 and msg.phase == 1


def test_a_parent_of_many_long_named_children_resumes_with_those_that_failed_and_the_count_left_out(tmp_path):
    # 600 ids of 1,800 characters: 1.1 MB of outcomes. Until 2026-12-07 a Launch carried up
    # to 10,000 of them: the parent's was over 1 MiB, not sent, and it failed after its
    # children ("the Launch for node1 is ... bytes, over the 1,048,576 bytes"), every retry too.
    r, run_dir = run(tmp_path, '[[steps]]\nid = "p"\ncall = "children_steps:long_named"\n'
                               'args = { n = 600, length = 1800, every = 100 }\n', "--nodes", "2", timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    [seen] = [x for x in ran(run_dir) if x["step"] == "p" and x["what"] == "resumed"]
    from children_steps import long_id
    failed = {f"p/{long_id(i, 1798)}" for i in range(0, 600, 100)}
    assert seen["children"] == dict.fromkeys(failed, "failed") and seen["omitted"] == 594, seen["omitted"]
    [end] = [e for e in exits(run_dir, "p") if e["outcome"] != "wait"]
    assert (end["outcome"], end["reason"]) == ("failed", "RuntimeError: 6 children did not succeed"), end
    assert_nothing_left(run_dir)


def test_the_outcomes_a_launch_carries_are_capped_by_bytes_less_what_the_steps_own_fields_take(tmp_path):
    from fleet.control.launching import CHILDREN_BYTES, outcomes
    from fleet.core.launchsize import STEP_PART
    from fleet.core.suite import parse_suite
    spec = parse_suite({"steps": [{"id": "p", "call": "m:f"}]}, tmp_path / "s.toml").steps[0]
    few = tuple((f"p/k{i}", "failed" if i == 3 else "succeeded") for i in range(10))
    assert outcomes(spec, few) == (dict(few), 0)
    # 15,000 short ids fit (a count cap of 10,000 left the successes out); 4,500 ids of 240 do not.
    short = tuple((f"p/k{i}", "succeeded") for i in range(15_000))
    assert outcomes(spec, short) == (dict(short), 0)
    long = tuple((f"p/{i:05d}".ljust(240, "x"), "failed" if i % 2 else "succeeded") for i in range(4_500))
    kept, omitted = outcomes(spec, long)
    assert set(kept.values()) == {"failed"} and list(kept) == [k for k, v in long if v == "failed"][:len(kept)]
    assert CHILDREN_BYTES - 260 < sum(len(k) + len(v) + 10 for k, v in kept.items()) <= CHILDREN_BYTES
    assert omitted == 4_500 - len(kept) and 2_250 > len(kept) > 1_900
    # A step whose own args take most of its launch leaves less room: 1,984 bytes here.
    big = parse_suite({"steps": [{"id": "p", "call": "m:f", "args": {"x": "y" * (STEP_PART - 2000)}}]},
                      tmp_path / "s.toml").steps[0]
    assert outcomes(big, few) == (dict(few), 0)
    kept, omitted = outcomes(big, long)
    assert list(kept) == [k for k, v in long if v == "failed"][:7] and omitted == 4_500 - 7


def test_a_child_named_log_fails_its_parent_at_submit_and_the_run_ends(tmp_path):
    # Its directory would be its parent's log file: before 2026-12-06 the run waited for good.
    r, run_dir = run(tmp_path, '[[steps]]\nid = "plot"\ncall = "children_steps:submits_log"\n', "--nodes", "2",
                     timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    assert [e["outcome"] for e in exits(run_dir, "plot")] == ["failed"]
    problem = ("step 'plot/log': field 'id': its directory steps/plot/log would be steps/plot/log, the log file of "
               "step 'plot'")
    assert problem in exits(run_dir, "plot")[0]["reason"]
    assert "failed     plot: SuiteError:" in r.stdout and problem in r.stdout, r.stdout
    assert (run_dir / "steps" / "plot" / "log").is_file() and not exits(run_dir, "plot/lin")
    assert_nothing_left(run_dir)


def test_a_command_steps_child_named_log_is_refused_by_the_fleet_and_fails_its_parent(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "cmd"
protocol = "steps"
command = '''
[ "$FLEET_PHASE" = 1 ] && exit 0
printf '[[steps]]\\nid = "log"\\ncommand = "true"\\n' > "$FLEET_SUBMIT_DIR/k.toml"
exit 3
'''
""", timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    said, verdict = exits(run_dir, "cmd")
    assert said["outcome"] == "wait" and verdict["outcome"] == "failed", (said, verdict)
    assert "its submitted steps were refused" in verdict["reason"]
    assert "step 'cmd/log': field 'id': its directory steps/cmd/log would be steps/cmd/log" in verdict["reason"]
    assert_nothing_left(run_dir)


def test_a_restart_moves_aside_only_the_steps_own_work_directory_not_the_run_directory_or_a_shared_one(tmp_path):
    # Before 2026-12-06 a restart with workdir "." moved events.jsonl, agents/ and the
    # fleet's files into steps/r/attempt-1, and one in a shared workdir its neighbour's output.
    r, run_dir = run(tmp_path, """
[[steps]]
id = "here"
call = "children_steps:restarts_once"
args = { name = "here.txt" }
workdir = "."

[[steps]]
id = "mine"
call = "children_steps:restarts_once"
args = { name = "mine.txt" }

[[steps]]
id = "other"
command = "echo other > other.txt"
workdir = "shared"

[[steps]]
id = "shares"
call = "children_steps:restarts_once"
args = { name = "shares.txt" }
workdir = "shared"
deps = ["other"]
""", "--nodes", "1", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = {x["step"]: x["files"] for x in ran(run_dir) if x["what"] == "restarted"}
    assert "events.jsonl" in seen["here"] and "here.txt" in seen["here"], seen
    assert (run_dir / "events.jsonl").is_file() and not (run_dir / "steps" / "here" / "attempt-1").exists()
    assert seen["shares"] == ["other.txt", "shares.txt"], seen
    assert not (run_dir / "steps" / "shares" / "attempt-1").exists()
    assert seen["mine"] == [".fleet", "attempt-1", "log"], seen  # its own directory: moved aside, as before
    assert (run_dir / "steps" / "mine" / "attempt-1" / "mine.txt").read_text() == "mine"
    for step, wd in (("here", run_dir), ("shares", run_dir / "shared")):
        log = (run_dir / "steps" / step / "log").read_text()
        assert (f"fleet: restart 1: nothing was moved aside: the work directory {wd} is not the step's own "
                f"({run_dir / 'steps' / step}), so it runs again in it as it is\n") in log, log
        lines = log.splitlines()  # the note follows its run's header
        assert lines[lines.index(next(x for x in lines if x.startswith("fleet: restart 1"))) - 1].startswith(
            f"==== fleet: step {step} attempt 1"), log
    assert "nothing was moved" not in (run_dir / "steps" / "mine" / "log").read_text()
    st = fleet("report", str(run_dir), cwd=tmp_path, timeout=60)
    assert st.returncode == 0, st.stdout + st.stderr
    assert_nothing_left(run_dir)


def test_a_child_that_ends_while_its_retried_parents_children_are_read_is_not_run_again(tmp_path):
    # The worker thread read the children's markers while c0..c2 still ran; they ended before
    # the loop looked, and (no marker in what was read) ran again: seen once in a loaded CI
    # run. The hook holds the read's answer back until they have ended.
    suite = write_suite(tmp_path / "kids.toml", """[suite]
name = "kids"
run_dir = "kids"
[[steps]]
id = "p"
call = "children_steps:parent"
args = { n = 3, fail_once = true, pause = 1.0 }
retries = 1
""")
    r = fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=180,
              environ={"FLEET_TEST_COLLECT_SLEEP_MS": "2500"})
    run_dir = tmp_path / "kids"
    assert r.returncode == 0, r.stdout + r.stderr
    seen = ran(run_dir)
    assert sorted(x["step"] for x in seen if x["what"] == "child") == ["p/c0", "p/c1", "p/c2"], seen
    assert_nothing_left(run_dir)
