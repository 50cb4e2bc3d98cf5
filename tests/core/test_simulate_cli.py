"""`fleet simulate` and `fleet validate`: the what-if runner and the command line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

from fleet.cli import main
from fleet.core.graph import build_graph
from fleet.core.resources import NodeSpec
from fleet.core.scheduler import Start
from fleet.core.simulate import SimStep, pretend_nodes, simulate
from fleet.core.suite import parse_suite

GiB = 2**30


def write(tmp_path: Path, text: str, name: str = "suite.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


SMALL = """
    [suite]
    name = "small"

    [[steps]]
    id = "a"
    command = "x"
    estimate = 2

    [[steps]]
    id = "b"
    call = "pkg.mod:fn"
    estimate = 3

    [[steps]]
    id = "c"
    command = ["x", "--y"]
    cores = 2
    deps = ["a", "b"]
    estimate = 1
    """


# --- pretend nodes and simulate() -----------------------------------------------------------------

def test_pretend_nodes_are_named_in_order_with_their_own_cores_gpus_and_memory():
    nodes = pretend_nodes(3, 4, 8 * GiB, 2, memory_of={1: 4 * GiB})
    assert nodes == [
        NodeSpec("node1", (0, 1, 2, 3), (0, 1), 8 * GiB),
        NodeSpec("node2", (0, 1, 2, 3), (0, 1), 4 * GiB),
        NodeSpec("node3", (0, 1, 2, 3), (0, 1), 8 * GiB),
    ]
    assert [n.name for n in pretend_nodes(10, 1)][:2] == ["node01", "node02"]
    assert pretend_nodes(10, 1)[-1].name == "node10"


def test_simulate_runs_each_step_for_its_estimate_and_reports_makespan_work_floor_and_utilization():
    s = parse_suite({"steps": [
        {"id": "a", "command": "x", "estimate": 2}, {"id": "b", "command": "x", "estimate": 3},
        {"id": "c", "command": "x", "cores": 2, "deps": ["a", "b"], "estimate": 1},
        {"id": "d", "command": "x"},  # no estimate: 1 s
    ]}, Path("/x/s.toml"))
    graph, _ = build_graph(s.steps)
    r = simulate(s.steps, graph, pretend_nodes(1, 2, 8 * GiB))
    assert r.steps == {
        "a": SimStep(("node1",), 1, 0.0, 2.0), "b": SimStep(("node1",), 1, 0.0, 3.0),
        "d": SimStep(("node1",), 1, 2.0, 3.0), "c": SimStep(("node1",), 2, 3.0, 4.0),
    }
    assert (r.makespan_s, r.work_s, r.core_s, r.floor_s) == (4.0, 7.0, 8.0, 4.0)
    assert r.utilization == 8.0 / (2 * 4.0)
    assert r.unrunnable == {} and r.blocked == {}
    assert r.log == ()


def test_simulate_reports_steps_that_cannot_run_and_leaves_them_out_of_the_floor():
    s = parse_suite({"steps": [
        {"id": "big", "command": "x", "cores": 8, "estimate": 100},
        {"id": "after", "command": "x", "deps": ["big"], "estimate": 100},
        {"id": "ok", "command": "x", "estimate": 5},
    ]}, Path("/x/s.toml"))
    graph, _ = build_graph(s.steps)
    r = simulate(s.steps, graph, pretend_nodes(2, 4, 8 * GiB))
    assert list(r.steps) == ["ok"]
    assert set(r.unrunnable) == {"big"} and r.blocked == {"after": "big"}
    assert (r.makespan_s, r.floor_s) == (5.0, 5.0)
    j = r.to_json()
    assert j["unrunnable"] == r.unrunnable and j["blocked"] == {"after": "big"}


def test_a_spanning_step_lists_every_node_it_ran_on():
    s = parse_suite({"steps": [{"id": "m", "command": "x", "mpi": True, "ranks": 6}]}, Path("/x/s.toml"))
    graph, _ = build_graph(s.steps)
    r = simulate(s.steps, graph, pretend_nodes(2, 4, 8 * GiB), keep_log=True)
    assert r.to_json()["steps"] == {"m": {"node": ["node1", "node2"], "cores": 6, "start_s": 0.0, "end_s": 1.0}}
    (start,) = [d for _, d in r.log if isinstance(d, Start)]
    assert [len(sl.cores) for sl in start.placement] == [4, 2]


def test_an_empty_suite_simulates_to_nothing():
    r = simulate((), build_graph(())[0], pretend_nodes(1, 1))
    assert (r.makespan_s, r.work_s, r.utilization, r.steps) == (0.0, 0.0, 0.0, {})


# --- fleet validate -----------------------------------------------------------------------------------

def test_validate_accepts_a_good_suite(tmp_path):
    path = write(tmp_path, SMALL)
    r = run("validate", path)
    assert r.exit_code == 0, r.output
    assert r.stdout == f"{path}: suite 'small' is valid: 3 steps, run dir {(tmp_path / 'runs' / 'small').resolve()}\n"


def test_validate_exits_2_and_prints_every_problem_naming_file_step_and_field(tmp_path):
    path = write(tmp_path, """
        [suite]
        name = "bad"
        [[steps]]
        id = "a"
        command = "x"
        priority = 9
        colour = "red"
        [[steps]]
        id = "b"
        call = "m:f"
        command = "x"
        [[steps]]
        id = "c"
        command = "x"
        memory = "lots"
        """)
    r = run("validate", path)
    assert r.exit_code == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert sorted(lines[:-1]) == sorted([
        f"error: {path}: step 'a': field 'colour': unknown field",
        f"error: {path}: step 'a': field 'priority': expected an integer from 1 to 5, got 9",
        f"error: {path}: step 'b': field 'call': give exactly one of call and command (both given)",
        f"error: {path}: step 'c': field 'memory': expected a size such as \"4GiB\", \"512MB\" or a number of bytes, got 'lots'",
    ])
    assert lines[-1] == "4 problems found; nothing was started"


def test_validate_reports_graph_problems_too(tmp_path):
    path = write(tmp_path, """
        [[steps]]
        id = "a"
        command = "x"
        deps = ["c"]
        inputs = ["missing.nc"]
        [[steps]]
        id = "c"
        command = "x"
        deps = ["a"]
        [[steps]]
        id = "d"
        command = "x"
        deps = ["ghost"]
        """)
    r = run("validate", path)
    assert r.exit_code == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3
    assert any("step 'a': field 'inputs'" in e and "missing.nc" in e for e in errors)
    assert any("step 'a': field 'deps': dependency cycle through steps a -> c -> a" in e for e in errors)
    assert any("step 'd': field 'deps': 'ghost' names no step" in e for e in errors)


def test_validate_with_an_allocation_reports_minimums_it_can_never_meet(tmp_path):
    path = write(tmp_path, """
        [[steps]]
        id = "wide"
        command = "x"
        cores = 16
        min_cores = 8
        [[steps]]
        id = "gpu"
        command = "x"
        gpus = 2
        [[steps]]
        id = "fat"
        command = "x"
        memory = "40GiB"
        [[steps]]
        id = "mpi"
        command = "x"
        mpi = true
        ranks = 8
        [[steps]]
        id = "fine"
        command = "x"
        cores = 16
        min_cores = 2
        """)
    assert run("validate", path).exit_code == 0
    r = run("validate", path, "--nodes", 2, "--cores-per-node", 4, "--memory-per-node", "32GiB",
            "--gpus-per-node", 1)
    assert r.exit_code == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert [e.split(": ")[2:4] for e in errors] == [
        ["step 'wide'", "field 'min_cores'"], ["step 'gpu'", "field 'gpus'"], ["step 'fat'", "field 'memory'"]]
    assert r.stderr.splitlines()[-1] == "3 problems found; nothing was started"
    # 4 GiB per core by default: 10-core nodes hold the 40 GiB step.
    r = run("validate", path, "--nodes", 2, "--cores-per-node", 10, "--gpus-per-node", 2)
    assert r.exit_code == 0, r.stderr


def test_validate_needs_both_nodes_and_cores_to_describe_an_allocation(tmp_path):
    path = write(tmp_path, SMALL)
    r = run("validate", path, "--nodes", 2)
    assert r.exit_code == 2
    assert "give both --nodes and --cores-per-node" in r.stderr


def test_validate_reports_a_missing_or_broken_file(tmp_path):
    r = run("validate", tmp_path / "nope.toml")
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0] == f"error: {tmp_path / 'nope.toml'}: no such file"
    r = run("validate", write(tmp_path, "[[steps]\n", name="broken.toml"))
    assert r.exit_code == 2
    assert "not valid TOML" in r.stderr


# --- fleet simulate --------------------------------------------------------------------------------------

def test_simulate_json_prints_makespan_work_floor_utilization_and_every_steps_placement(tmp_path):
    path = write(tmp_path, SMALL)
    r = run("simulate", path, "--nodes", 1, "--cores-per-node", 2, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["makespan_s"], out["work_s"], out["floor_s"], out["utilization"]) == (4.0, 6.0, 4.0, 7.0 / 8.0)
    assert out["steps"] == {
        "a": {"node": "node1", "cores": 1, "start_s": 0.0, "end_s": 2.0},
        "b": {"node": "node1", "cores": 1, "start_s": 0.0, "end_s": 3.0},
        "c": {"node": "node1", "cores": 2, "start_s": 3.0, "end_s": 4.0},
    }
    assert out["unrunnable"] == {} and out["blocked"] == {}


def test_simulate_prints_a_summary_in_words(tmp_path):
    path = write(tmp_path, SMALL)
    r = run("simulate", path, "--nodes", 1, "--cores-per-node", 2)
    assert r.exit_code == 0, r.output
    lines = [" ".join(line.split()) for line in r.stdout.splitlines()]
    assert lines[0] == "suite 'small': 3 steps on 1 node x 2 cores (8GiB each)"
    assert lines[1] == "makespan 4.0 s"
    assert lines[2].startswith("work 6.0 s")
    assert lines[3].startswith("floor 4.0 s")
    assert lines[4] == "utilization 87.5 % of 2 cores"
    assert lines[5] == "speedup 1.50 x against one at a time"


def test_simulate_gives_the_same_answer_every_time(tmp_path):
    tables = "\n".join(f"""
        [[steps]]
        id = "s{i}"
        command = "x"
        cores = {1 + i % 3}
        estimate = {1 + (i * 7) % 5}
        priority = {1 + i % 5}
        deps = {[f"s{j}" for j in range(max(0, i - 3), i) if (i + j) % 2]}
        """.replace("'", '"') for i in range(25))
    path = write(tmp_path, tables)
    first = run("simulate", path, "--nodes", 2, "--cores-per-node", 3, "--json")
    second = run("simulate", path, "--nodes", 2, "--cores-per-node", 3, "--json")
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    assert len(json.loads(first.stdout)["steps"]) == 25


def test_simulate_refuses_a_suite_that_cannot_fit_the_pretend_allocation(tmp_path):
    path = write(tmp_path, """
        [[steps]]
        id = "wide"
        command = "x"
        cores = 8
        """)
    r = run("simulate", path, "--nodes", 2, "--cores-per-node", 4)
    assert r.exit_code == 2
    assert "step 'wide': field 'cores'" in r.stderr  # the field the user wrote: no min_cores there
    r = run("simulate", path, "--cores-per-node", 4)
    assert r.exit_code == 2
    assert "--nodes" in r.stderr


def test_simulate_does_not_look_for_inputs_on_disk(tmp_path):
    path = write(tmp_path, """
        [[steps]]
        id = "a"
        command = "x"
        inputs = ["observations.nc"]
        """)
    assert run("validate", path).exit_code == 2
    r = run("simulate", path, "--nodes", 1, "--cores-per-node", 1, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["steps"]["a"]["end_s"] == 1.0


def test_the_fleet_command_runs_validate_and_simulate_as_real_processes(tmp_path):
    path = write(tmp_path, SMALL)
    fleet = shutil.which("fleet")
    cmd = [fleet] if fleet else [sys.executable, "-c", "from fleet.cli import main; main()"]
    r = subprocess.run(cmd + ["simulate", str(path), "--nodes", "1", "--cores-per-node", "2", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["makespan_s"] == 4.0
    bad = write(tmp_path, "[[steps]]\nid = 'a'\n", name="bad.toml")
    r = subprocess.run(cmd + ["validate", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"error: {bad}: step 'a': field 'call': give exactly one of call and command (neither given)" in r.stderr
