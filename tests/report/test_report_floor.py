"""The dependency floor through parents, their children and their stages (fleet.report.floor):
real runs, and streams in a real run's shape for what a run cannot show cheaply."""

from __future__ import annotations

import json

import pytest

from fleet.report import floor
from fleet.report.figures import dependency_floor
from fleet.report.ingest import gather
from fleet.wire import events as E
from fleetharness import events, fleet, write_suite


def _report(run, cwd) -> dict:
    return json.loads(fleet("report", str(run), "--json", cwd=cwd, timeout=60, check=True).stdout)


def _work(run, *ids) -> float:
    return sum(e["work_s"] for e in events(run) if e["kind"] == "exit" and e["step"] in ids)


FIRST = '''
[suite]
name = "f1"
[[steps]]
id = "s"
command = ["sleep", "1"]
'''

SECOND = FIRST + '''
[[steps]]
id = "s/{i}"
array = "0-1"
command = ["sleep", "2"]
deps = ["s"]
[[steps]]
id = "t"
command = ["sleep", "0.5"]
deps = ["s/0", "s/1"]
'''


def test_a_suites_array_named_under_a_step_of_an_earlier_run_in_the_same_fleet_is_no_child_of_it(tmp_path):
    # (before: s/0 and s/1 were taken for children of s, which they depend on: a cycle, and
    # the floor lost s and everything after it: 'floor 1.00 s (s)' for a 3.5 s chain)
    run = tmp_path / "run"
    fleet("up", "--run-dir", str(run), "--nodes", "2", cwd=tmp_path, check=True, timeout=60)
    try:
        for name, text in (("s1.toml", FIRST), ("s2.toml", SECOND)):
            r = fleet("run", str(write_suite(tmp_path / name, text)), "--run-dir", str(run), cwd=tmp_path,
                      timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
    finally:
        fleet("down", "--run-dir", str(run), cwd=tmp_path, timeout=60)
    j = _report(run, tmp_path)
    assert j["floor_path"][0] == "s" and j["floor_path"][-1] == "t" and len(j["floor_path"]) == 3, j["floor_path"]
    assert j["floor_s"] == pytest.approx(_work(run, *j["floor_path"]), abs=1e-5)
    assert not [e for e in events(run) if e["kind"] == "step" and "parent" in e]  # (no step submitted these)
    # Nor does the report list them as s's children (before: "children  2 submitted by 1 step(s)").
    assert "families" not in j, j["families"]
    assert "submitted by" not in fleet("report", str(run), cwd=tmp_path, timeout=60, check=True).stdout


RETRIED = '''
[suite]
name = "retried"
run_dir = "run"
[[steps]]
id = "p"
protocol = "steps"
retries = 1
command = """
if [ "$FLEET_PHASE" = 0 ]; then
  sleep 1
  printf '[[steps]]\\\\nid = "c"\\\\ncommand = "sleep 2"\\\\n' > "$FLEET_SUBMIT_DIR/k.toml"
  exit 3
fi
[ "$FLEET_ATTEMPT" = 1 ] && exit 1
exit 0
"""
'''


def test_a_retried_parent_that_goes_on_at_its_stage_keeps_its_earlier_stage_and_children_on_the_floor(tmp_path):
    # (before: only the retry's own stage was the parent: 'floor 2.0 s (p/c)' for a 3 s chain)
    r = fleet("run", str(write_suite(tmp_path / "s.toml", RETRIED)), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "run"
    exits = [e for e in events(run) if e["kind"] == "exit"]
    assert [(e["step"], e["attempt"], e["outcome"]) for e in exits] == \
        [("p", 1, "wait"), ("p/c", 1, "succeeded"), ("p", 1, "failed"), ("p", 2, "succeeded")]
    declared = {e["step"]: e for e in events(run) if e["kind"] == "step"}
    assert declared["p/c"]["parent"] == "p" and "parent" not in declared["p"]  # (the child's record says so)
    j = _report(run, tmp_path)
    assert j["floor_path"] == ["p", "p/c", "p"], j["floor_path"]
    chain = exits[0]["work_s"] + exits[1]["work_s"] + exits[3]["work_s"]  # (not the failed stage: it ran again)
    assert j["floor_s"] == pytest.approx(chain, abs=1e-5) and j["floor_s"] <= j["wall_s"], (j["floor_s"], chain)


class _Loop:
    """The records of a parent that submits one child and waits for it, `n` times, then
    ends: what a real run of such a loop writes (fleet.control), in order."""

    def __init__(self, n: int, parent_field: bool = True):
        self.t, self.recs = 1000.0, []
        self.add("submitted", submission=1, steps=1)
        self.add("step", step="p", submission=1)
        self.add("entered", submission=1, steps=1)
        for i in range(n):
            self.run("p", "wait")
            self.add("step", step=f"p/c{i}", submission=1, **({"parent": "p"} if parent_field else {}))
            self.add("entered", submission=1, steps=1)
            self.run(f"p/c{i}", "succeeded", 0.002)
        self.run("p", "succeeded")

    def add(self, kind: str, **fields) -> None:
        self.recs.append(E.parse({"t": self.t, "kind": kind, "fleet": "f", **fields}))
        self.t += 0.001

    def run(self, step: str, outcome: str, work: float = 0.001) -> None:
        self.add("start", step=step, attempt=1, node="node1", cores=[0])
        self.add("started", step=step, attempt=1, node="node1", pid=9, at=self.t)
        self.t += work
        self.add("exit", step=step, attempt=1, node="node1", outcome=outcome, work_s=work, startup_s=0.0)


@pytest.mark.parametrize("parent_field", [True, False], ids=["records-name-the-parent", "older-stream"])
def test_the_floor_of_a_parent_looping_over_many_stages_is_linear_in_its_stages_and_children(parent_field):
    # (before: each stage after a wait depended on every child submitted before it: 8,000
    # stages made 32 million edges, 36 s and 572 MB for the report)
    n = 3000
    steps = gather(_Loop(n, parent_field).recs).steps
    deps, _, _ = floor.graph(steps, 2000.0)
    edges = sum(len(d) for d in deps.values())
    assert edges <= 5 * n, edges  # a stage: one to the one before; a child: to its stage, from the next and the end
    floor_s, path = dependency_floor(steps, 2000.0)[:2]
    assert floor_s == pytest.approx((n + 1) * 0.001 + n * 0.002)
    assert path == ["p", "p/c0", "p", "p/c1"] + path[4:] and path[-1] == "p" and len(path) == 2 * n + 1


def test_families_that_would_close_a_cycle_leave_the_floor_to_the_recorded_dependencies():
    # (a damaged stream: the child depends on q, which depends on the parent's end; before,
    # ids on a cycle and after it were silently left out of the floor)
    loop = _Loop(1)
    recs = loop.recs
    at = next(i for i, r in enumerate(recs) if isinstance(r, E.StepDeclared) and r.step == "p/c0")
    recs[at] = E.parse({**recs[at].to_dict(), "deps": ["q"]})
    loop.add("step", step="q", submission=1, deps=["p"])
    loop.run("q", "succeeded", 0.5)
    floor_s, path, _ = dependency_floor(gather(recs).steps, 2000.0)
    assert path == ["p", "q", "p/c0"] and floor_s == pytest.approx(0.002 + 0.5 + 0.002), (floor_s, path)


FAILED_SUBMITTED = r'''
[suite]
name = "failsub"
run_dir = "run"
[[steps]]
id = "p"
protocol = "steps"
retries = 1
command = """
if [ "$FLEET_PHASE" = 0 ]; then
  sleep 0.3
  printf '[[steps]]\\nid = "c1"\\ncommand = "sleep 0.3"\\n' > "$FLEET_SUBMIT_DIR/k.toml"
  exit 3
fi
if [ "$FLEET_ATTEMPT" = 1 ]; then
  printf '[[steps]]\\nid = "c2"\\ncommand = "sleep 2"\\n' > "$FLEET_SUBMIT_DIR/k2.toml"
  exit 1
fi
sleep 1
exit 0
"""
'''


def test_the_children_a_failed_attempt_submitted_run_beside_its_retry_not_before_it(tmp_path):
    # (before: c2 was taken for the first stage's child, and the retry, after that wait,
    # was chained behind it: 'floor 6.31 s (p -> p/c2 -> p)' for a 4.68 s wall)
    r = fleet("run", str(write_suite(tmp_path / "s.toml", FAILED_SUBMITTED)), "--nodes", "2", cwd=tmp_path,
              timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "run"
    exits = [(e["step"], e["attempt"], e["outcome"]) for e in events(run) if e["kind"] == "exit"]
    assert [x for x in exits if x[0] == "p"] == [("p", 1, "wait"), ("p", 1, "failed"), ("p", 2, "succeeded")]
    j = _report(run, tmp_path)
    # The failed stage adds no work (its retry ran it again); c2 follows it, beside the retry.
    assert j["floor_path"] == ["p", "p/c1", "p", "p/c2"], j["floor_path"]
    first = next(e["work_s"] for e in events(run) if e["kind"] == "exit" and e["outcome"] == "wait")
    assert j["floor_s"] == pytest.approx(first + _work(run, "p/c1", "p/c2"), abs=1e-5)
    assert j["floor_s"] <= j["wall_s"], (j["floor_s"], j["wall_s"])


RESUBMITTED = r'''
[suite]
name = "resub"
run_dir = "run"
[[steps]]
id = "p"
protocol = "steps"
command = """
kid='[[steps]]\\nid = "c"\\ncommand = "if [ -e HERE/mark ]; then sleep 1; else touch HERE/mark; exit 1; fi"\\n'
[ -e HERE/again ] && { sleep 2; exit 0; }
case "$FLEET_PHASE" in
0) sleep 0.2; printf "$kid" > "$FLEET_SUBMIT_DIR/k.toml"; exit 3;;
*) printf "$kid" > "$FLEET_SUBMIT_DIR/k.toml"; touch HERE/again; GO_ON;;
esac
"""
'''


@pytest.mark.parametrize("go_on", ["next", "restart"])
def test_a_child_submitted_again_follows_the_stage_that_submitted_it_again(tmp_path, go_on):
    # (before: the child was anchored at its first submission, so the stage after the
    # wait followed its second run and the last stage came after both: 'floor 6.22 s
    # (p -> p/c -> p)' for a 3.29 s wall)
    how = 'echo s2 > "$FLEET_NEXT_STAGE"; exit 2' if go_on == "next" else "exit 4"
    text = RESUBMITTED.replace("HERE", str(tmp_path)).replace("GO_ON", how)
    r = fleet("run", str(write_suite(tmp_path / "s.toml", text)), "--nodes", "2", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "run"
    exits = [e for e in events(run) if e["kind"] == "exit"]
    assert [e["outcome"] for e in exits if e["step"] == "p"] == ["wait", go_on, "succeeded"]
    assert [e["outcome"] for e in exits if e["step"] == "p/c"] == ["failed", "succeeded"]
    assert len([e for e in events(run) if e["kind"] == "step" and e["step"] == "p/c"]) == 2
    j = _report(run, tmp_path)
    # The child's second run (1 s) follows the second stage, beside the last one (2 s).
    assert j["floor_path"] == ["p"], j["floor_path"]
    assert j["floor_s"] == pytest.approx(_work(run, "p"), abs=1e-5)
    assert j["floor_s"] <= j["wall_s"], (j["floor_s"], j["wall_s"])


def test_a_child_declared_again_while_it_runs_keeps_the_stage_that_first_submitted_it():
    # A stream in a real run's shape: p's first stage submits c and goes on (next); c
    # runs 2 s beside p's second stage (1 s), which declares it again; that run is its
    # last. Anchored at that later declaration, c would follow the second stage: 3.1 s
    # for a run of 2.1 s.
    recs, t = [], 1000.0

    def add(dt: float, kind: str, **fields) -> None:
        recs.append(E.parse({"t": t + dt, "kind": kind, "fleet": "f", **fields}))

    def start(dt: float, step: str) -> None:
        node = "node2" if step == "p/c" else "node1"
        add(dt, "start", step=step, attempt=1, node=node, cores=[0])
        add(dt, "started", step=step, attempt=1, node=node, pid=9, at=t + dt)

    def end(dt: float, step: str, outcome: str, work: float) -> None:
        node = "node2" if step == "p/c" else "node1"
        add(dt, "exit", step=step, attempt=1, node=node, outcome=outcome, work_s=work, startup_s=0.0)

    add(0.0, "submitted", submission=1, steps=1)
    add(0.0, "step", step="p", submission=1)
    add(0.0, "entered", submission=1, steps=1)
    start(0.0, "p")
    end(0.1, "p", "next", 0.1)
    add(0.1001, "step", step="p/c", submission=1, parent="p")  # (its children go in before it goes on)
    start(0.1001, "p/c")
    start(0.1002, "p")
    end(1.1002, "p", "next", 1.0)
    add(1.1003, "step", step="p/c", submission=1, parent="p")  # (while it runs: adds no run)
    start(1.1004, "p")
    end(1.2004, "p", "succeeded", 0.1)
    end(2.1001, "p/c", "succeeded", 2.0)
    floor_s, path, _ = dependency_floor(gather(recs).steps, t + 3.0)
    assert path == ["p", "p/c"] and floor_s == pytest.approx(0.1 + 2.0), (floor_s, path)


ONE = '''
[suite]
name = "one"
run_dir = "run"
[[steps]]
id = "s"
command = ["sleep", "0.2"]
'''


def test_a_floor_above_the_wall_is_said_to_be_a_defect_of_the_report_not_a_negative_time_more(tmp_path):
    # (before: 'the run took -1636.0 ms more (0.74 x the floor)', and no note.) No run of
    # fleet's gives such a floor now: a real run's stream, its step's work made longer
    # than the whole run, stands for the next defect of the floor.
    r = fleet("run", str(write_suite(tmp_path / "s.toml", ONE)), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "run"
    lines = []
    for e in events(run):
        if e["kind"] == "exit":
            e["work_s"] = 60.0
        lines.append(json.dumps(e))
    (run / "events.jsonl").write_text("\n".join(lines) + "\n")
    j = _report(run, tmp_path)
    assert j["floor_s"] > j["wall_s"]
    assert [n for n in j["notes"] if "above the wall" in n and "a defect of fleet's report" in n], j["notes"]
    text = fleet("report", str(run), cwd=tmp_path, timeout=60, check=True).stdout
    assert "above the wall: a defect of fleet's report" in text, text
    assert " more (" not in text and "x the floor" not in text, text
