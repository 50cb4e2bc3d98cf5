"""The step graph: explicit and file dependencies, unknown deps, cycles, missing
inputs, two producers of one output, and a stable order."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fleet.control.checks import checked_suite, load_suite, missing_on_disk
from fleet.core.graph import build_graph, critical_path, dependency_on, find_cycles, topological_order
from fleet.core.problems import Problem, SuiteError
from fleet.core.suite import parse_suite


def steps(*tables: dict):
    for t in tables:
        t.setdefault("command", "x")
    return parse_suite({"steps": list(tables)}, Path("/x/suite.toml")).steps


def where(problems):
    return {(p.step, p.field) for p in problems}


def test_explicit_deps_become_edges_in_setup_order():
    graph, problems = build_graph(steps({"id": "a"}, {"id": "b"}, {"id": "c", "deps": ["b", "a"]}))
    assert problems == []
    assert graph.deps == {"a": (), "b": (), "c": ("b", "a")}
    assert graph.dependents() == {"a": ["c"], "b": ["c"], "c": []}


def test_an_input_that_another_step_outputs_makes_a_file_dependency():
    graph, problems = build_graph(steps(
        {"id": "mesh", "outputs": ["mesh/grid.nc", "mesh/graph.info"]},
        {"id": "init", "inputs": ["./mesh/grid.nc"], "outputs": ["init.nc"]},
        {"id": "run", "inputs": ["init.nc", "mesh//graph.info"], "deps": ["init"]},
    ))
    assert problems == []
    assert graph.deps == {"mesh": (), "init": ("mesh",), "run": ("init", "mesh")}



def test_a_dependency_is_said_to_come_from_deps_when_named_there_else_from_the_input_it_produces():
    mesh, init, run = steps(
        {"id": "mesh", "outputs": ["mesh/grid.nc", "mesh/graph.info"]},
        {"id": "init", "inputs": ["x.nc", "./mesh/grid.nc"]},
        {"id": "run", "inputs": ["mesh/graph.info"], "deps": ["mesh"]},
    )
    assert dependency_on(init, mesh) == ("inputs", "'./mesh/grid.nc' is an output of 'mesh'")
    assert dependency_on(run, mesh) == ("deps", "depends on 'mesh'")


def test_an_unknown_dep_is_reported_naming_the_step_and_the_missing_id():
    graph, problems = build_graph(steps({"id": "a", "deps": ["nope"]}, {"id": "b", "deps": ["a"]}))
    assert where(problems) == {("a", "deps")}
    assert "'nope'" in problems[0].message
    assert problems[0].file == "/x/suite.toml"
    assert graph.deps["a"] == ()


def test_a_dep_on_a_step_known_to_be_done_elsewhere_is_not_a_problem():
    graph, problems = build_graph(steps({"id": "a", "deps": ["earlier"]}), known_done=frozenset({"earlier"}))
    assert problems == []
    assert graph.deps == {"a": ()}


def test_a_cycle_is_reported_once_naming_every_step_on_it_in_walking_order():
    graph, problems = build_graph(steps(
        {"id": "free"},
        {"id": "a", "deps": ["c"]},
        {"id": "b", "deps": ["a", "free"]},
        {"id": "c", "deps": ["b"]},
        {"id": "after", "deps": ["c"]},
    ))
    assert find_cycles(graph) == [["a", "c", "b"]]
    (p,) = problems
    assert (p.step, p.field) == ("a", "deps")
    assert p.message == "dependency cycle through steps a -> c -> b -> a"


def test_a_step_that_depends_on_itself_is_a_cycle():
    graph, problems = build_graph(steps({"id": "a", "deps": ["a"]}))
    assert find_cycles(graph) == [["a"]]
    assert [p.message for p in problems] == ["dependency cycle through steps a -> a"]


def test_two_separate_cycles_are_each_reported_in_setup_order():
    graph, problems = build_graph(steps(
        {"id": "x1", "deps": ["x2"]}, {"id": "y1", "deps": ["y2"]},
        {"id": "x2", "deps": ["x1"]}, {"id": "y2", "deps": ["y3"]}, {"id": "y3", "deps": ["y1"]},
    ))
    assert find_cycles(graph) == [["x1", "x2"], ["y1", "y2", "y3"]]
    assert [p.step for p in problems] == ["x1", "y1"]


def test_a_cycle_made_of_files_is_found_too():
    graph, problems = build_graph(steps(
        {"id": "a", "inputs": ["b.out"], "outputs": ["a.out"]},
        {"id": "b", "inputs": ["a.out"], "outputs": ["b.out"]},
    ))
    assert [p.message for p in problems] == ["dependency cycle through steps a -> b -> a"]


def test_every_member_of_a_tangled_cycle_is_named():
    # a -> b -> a and b -> c -> b: one component, no single simple cycle through all.
    graph, problems = build_graph(steps(
        {"id": "a", "deps": ["b"]}, {"id": "b", "deps": ["a", "c"]}, {"id": "c", "deps": ["b"]},
    ))
    (cycle,) = find_cycles(graph)
    assert sorted(cycle) == ["a", "b", "c"] and cycle[0] == "a"
    (p,) = problems
    for sid in "abc":
        assert f"{sid} ->" in p.message or f"-> {sid}" in p.message


def test_a_long_cycle_does_not_hit_the_recursion_limit():
    n = 5000
    graph, problems = build_graph(steps(*({"id": f"s{i}", "deps": [f"s{(i + 1) % n}"]} for i in range(n))))
    (cycle,) = find_cycles(graph)
    assert cycle == [f"s{i}" for i in range(n)]
    assert len(problems) == 1


def test_an_input_no_step_produces_that_is_missing_on_disk_is_reported(tmp_path):
    (tmp_path / "present.nc").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "also.nc").write_text("")
    graph, problems = build_graph(steps(
        {"id": "a", "inputs": ["present.nc", "sub/also.nc", "absent.nc"]},
        {"id": "b", "inputs": ["sub/absent.nc"]},
    ), unproduced=missing_on_disk(tmp_path))
    assert where(problems) == {("a", "inputs"), ("b", "inputs")}
    assert "'absent.nc'" in next(p.message for p in problems if p.step == "a")
    assert "'sub/absent.nc'" in next(p.message for p in problems if p.step == "b")
    assert graph.deps == {"a": (), "b": ()}


def test_an_input_that_exists_on_disk_needs_no_producer(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "obs.nc").write_text("")
    graph, problems = build_graph(steps({"id": "a", "inputs": ["data/obs.nc"]}), unproduced=missing_on_disk(tmp_path))
    assert problems == []


def test_the_graph_alone_never_looks_for_inputs_on_disk(monkeypatch):
    # build_graph is pure: an input no step produces is not a problem of the graph's,
    # and nothing on the filesystem is asked (control.checks looks, through `unproduced`).
    import os
    import pathlib

    def no_disk(*a, **k):
        raise AssertionError("the graph touched the filesystem")
    for name in ("exists", "is_file", "is_dir", "stat", "lstat", "resolve", "open", "read_text"):
        monkeypatch.setattr(pathlib.Path, name, no_disk)
    for name in ("stat", "lstat", "access", "listdir", "scandir"):
        monkeypatch.setattr(os, name, no_disk)
    monkeypatch.setattr(os.path, "exists", no_disk)
    specs = steps({"id": "a", "inputs": ["nowhere.nc"]}, {"id": "b", "inputs": ["a.nc"], "deps": ["a"]})
    graph, problems = build_graph(specs)
    assert problems == []
    assert graph.deps == {"a": (), "b": ("a",)}
    asked = []
    graph, problems = build_graph(specs, unproduced=lambda s, inp: asked.append((s.id, inp)))
    assert problems == [] and asked == [("a", "nowhere.nc"), ("b", "a.nc")]


def test_a_produced_input_is_not_looked_for_on_disk(tmp_path):
    graph, problems = build_graph(steps({"id": "a", "outputs": ["x.nc"]}, {"id": "b", "inputs": ["x.nc"]}),
                                  unproduced=missing_on_disk(tmp_path))
    assert problems == []
    assert graph.deps["b"] == ("a",)


def test_two_steps_producing_one_output_is_reported_naming_both():
    graph, problems = build_graph(steps(
        {"id": "a", "outputs": ["out/x.nc"]}, {"id": "b", "outputs": ["./out/x.nc", "y.nc"]},
        {"id": "c", "outputs": ["out/x.nc"]},
    ))
    assert [(p.step, p.field) for p in problems] == [("b", "outputs"), ("c", "outputs")]
    assert all("'a'" in p.message for p in problems)


def test_a_step_listing_its_own_output_twice_is_one_producer():
    graph, problems = build_graph(steps({"id": "a", "outputs": ["x", "./x"]}))
    assert problems == []


def test_all_graph_problems_are_reported_together(tmp_path):
    graph, problems = build_graph(steps(
        {"id": "a", "deps": ["ghost"], "outputs": ["o"]},
        {"id": "b", "outputs": ["o"], "inputs": ["missing"]},
        {"id": "c", "deps": ["d"]}, {"id": "d", "deps": ["c"]},
    ), unproduced=missing_on_disk(tmp_path))
    assert sorted(where(problems)) == [("a", "deps"), ("b", "inputs"), ("b", "outputs"), ("c", "deps")]


def test_the_topological_order_breaks_ties_by_setup_order():
    graph, _ = build_graph(steps(
        {"id": "z"}, {"id": "y", "deps": ["x"]}, {"id": "x"}, {"id": "w", "deps": ["z"]}, {"id": "v"},
    ))
    assert topological_order(graph) == ["z", "x", "y", "w", "v"]
    assert [s.id for s in graph.steps] == ["z", "y", "x", "w", "v"]


def test_a_suite_written_deps_first_takes_setup_order_without_a_search_and_has_no_cycle(monkeypatch):
    import fleet.core.graph as graph_mod

    def no_search(graph):
        raise AssertionError("searched for cycles in a graph whose deps all come first")
    monkeypatch.setattr(graph_mod, "find_cycles", no_search)
    graph, problems = build_graph(steps(
        {"id": "mesh", "outputs": ["m.nc"]}, {"id": "a", "inputs": ["m.nc"]}, {"id": "b", "deps": ["a", "mesh"]},
    ))
    assert problems == [] and graph.forward
    assert topological_order(graph) == ["mesh", "a", "b"]


def test_a_suite_whose_setup_order_puts_a_dep_late_still_gets_deps_first_and_its_cycles_reported():
    graph, problems = build_graph(steps({"id": "late"}, {"id": "b", "deps": ["c"]}, {"id": "c"}))
    assert problems == [] and not graph.forward
    assert topological_order(graph) == ["late", "c", "b"]
    # A file dep on a later producer counts the same as an explicit one.
    graph, _ = build_graph(steps({"id": "use", "inputs": ["f"]}, {"id": "make", "outputs": ["f"]}))
    assert not graph.forward and topological_order(graph) == ["make", "use"]
    graph, problems = build_graph(steps({"id": "a", "deps": ["b"]}, {"id": "b", "deps": ["a"]}, {"id": "x"}))
    assert not graph.forward
    assert [p.message for p in problems] == ["dependency cycle through steps a -> b -> a"]
    graph, problems = build_graph(steps({"id": "me", "deps": ["me"]}))
    assert not graph.forward and [p.step for p in problems] == ["me"]


def test_the_fast_order_is_the_searched_order_on_many_shapes_of_graph():
    import random
    rng = random.Random(3)
    for _ in range(60):
        n = rng.randint(1, 25)
        tables = [{"id": f"s{i}", "deps": [f"s{j}" for j in range(n) if j != i and rng.random() < 0.08
                                           and (j < i or rng.random() < 0.3)]} for i in range(n)]
        graph, problems = build_graph(steps(*tables))
        slow = type(graph)(graph.steps, graph.deps)  # not known to be forward: the full search
        assert topological_order(graph) == topological_order(slow)
        assert bool(find_cycles(slow)) == any("cycle" in p.message for p in problems)
        if graph.forward:
            assert find_cycles(slow) == []


def test_the_graph_is_the_same_however_often_it_is_built():
    specs = steps(*({"id": f"s{i}", "deps": [f"s{j}" for j in range(i) if (i * j) % 3 == 1]} for i in range(40)))
    first, _ = build_graph(specs)
    for _ in range(3):
        again, _ = build_graph(specs)
        assert again.deps == first.deps
        assert list(again.deps) == list(first.deps)
        assert topological_order(again) == topological_order(first)


def test_the_critical_path_is_the_longest_chain_of_durations():
    graph, _ = build_graph(steps(
        {"id": "a"}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": ["a"]}, {"id": "d", "deps": ["b", "c"]},
        {"id": "lone"},
    ))
    floor, chain = critical_path(graph.deps, {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0, "lone": 6.5})
    assert (floor, chain) == (7.0, ["a", "b", "d"])
    assert critical_path(graph.deps, {"lone": 9.0}) == (9.0, ["lone"])
    empty, _ = build_graph(())
    assert critical_path(empty.deps, {}) == (0.0, [])


def test_checked_suite_raises_every_graph_problem_with_the_file_name(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent("""
        [suite]
        run_dir = "."
        [[steps]]
        id = "a"
        command = "x"
        deps = ["b"]
        inputs = ["in.nc"]
        [[steps]]
        id = "b"
        command = "x"
        deps = ["a"]
        """))
    with pytest.raises(SuiteError) as e:
        checked_suite(path)
    assert where(e.value.problems) == {("a", "inputs"), ("a", "deps")}
    assert all(p.file == str(path) for p in e.value.problems)
    (tmp_path / "in.nc").write_text("")
    with pytest.raises(SuiteError) as e:
        checked_suite(path)
    assert [p.message for p in e.value.problems] == ["dependency cycle through steps a -> b -> a"]


def test_a_missing_input_is_no_problem_of_the_graph_and_checked_suite_reports_it_in_setup_order(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent("""
        [suite]
        run_dir = "run"
        [[steps]]
        id = "a"
        command = "x"
        inputs = ["in.nc"]
        [[steps]]
        id = "b"
        command = "x"
        deps = ["ghost"]
        """))
    suite = load_suite(path)
    assert build_graph(suite.steps)[1] == [Problem(str(path), "b", "deps", "'ghost' names no step")]
    with pytest.raises(SuiteError) as e:
        checked_suite(path)
    assert e.value.problems == [
        Problem(str(path), "a", "inputs", f"'in.nc' is produced by no step and does not exist in {tmp_path / 'run'}"),
        Problem(str(path), "b", "deps", "'ghost' names no step"),
    ]
    with pytest.raises(SuiteError) as e:
        checked_suite(path, check_inputs=False)
    assert [p.step for p in e.value.problems] == ["b"]


def test_the_critical_path_ignores_deps_on_unknown_ids_and_ids_with_no_entry_in_deps():
    deps = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c", "nowhere"]}
    assert critical_path(deps, {"a": 1, "b": 5, "c": 2, "d": 1, "stranger": 99}) == (7, ["a", "b", "d"])
    assert critical_path({}, {"x": 1.0}) == (0.0, [])
    assert critical_path({"a": (), "b": iter(["a"])}, {}) == (0.0, ["a"])


def test_the_critical_path_breaks_ties_by_what_comes_first_and_leaves_out_cycles():
    # Chains of 4 end at d and at y; Kahn's order (a, x, b, c, y, d) reaches y first.
    deps = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"], "x": [], "y": ["x"]}
    assert critical_path(deps, {"a": 1, "b": 1, "c": 1, "d": 1, "x": 2, "y": 2}) == (4, ["x", "y"])
    # d is as long through b as through c: through b, its first dependency to get there.
    assert critical_path(deps, {"a": 1, "b": 1, "c": 1, "d": 2}) == (4, ["a", "b", "d"])
    # A dependency that adds no time is not a link: the chain starts where time does.
    assert critical_path(deps, {"c": 1, "b": 1}) == (1, ["b"])
    # p and q wait on each other, r after them: none of the three is on any chain.
    cyclic = {"p": ["q"], "q": ["p"], "r": ["p", "s"], "s": []}
    assert critical_path(cyclic, {"p": 5, "q": 5, "r": 5, "s": 1}) == (1, ["s"])


SETUP_ORDER = """
    [suite]
    run_dir = "run"
    [[steps]]
    id = "a"
    command = "x"
    deps = ["b"]
    [[steps]]
    id = "bad"
    command = "x"
    priority = 9
    [[steps]]
    id = "b"
    command = "x"
    deps = ["a"]
    [[steps]]
    id = "c"
    command = "x"
    deps = ["ghost"]
    inputs = ["in.nc"]
    [[steps]]
    id = "d"
    command = "x"
    mpi = true
    outputs = ["o.nc"]
    [[steps]]
    id = "e"
    command = "x"
    outputs = ["o.nc"]
    """


def test_field_problems_do_not_hide_graph_problems_and_everything_comes_in_setup_order(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(SETUP_ORDER))
    with pytest.raises(SuiteError) as e:
        checked_suite(path)
    assert [(p.step, p.field) for p in e.value.problems] == [
        ("a", "deps"), ("bad", "priority"), ("c", "deps"), ("c", "inputs"), ("e", "outputs")]
    assert e.value.problems[0].message == "dependency cycle through steps a -> b -> a"


def test_a_dep_on_or_an_input_from_a_step_with_problems_is_not_reported_again(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent("""
        [[steps]]
        id = "mesh"
        command = "x"
        cores = 0
        outputs = ["mesh.nc"]
        [[steps]]
        id = "cases/{i}"
        array = "1-3"
        command = "x"
        bogus = 1
        outputs = ["case{i}.nc"]
        [[steps]]
        id = "use"
        command = "x"
        deps = ["mesh", "cases/2"]
        inputs = ["mesh.nc", "case3.nc", "/nowhere/at/all.nc"]
        """))
    with pytest.raises(SuiteError) as e:
        checked_suite(path)
    assert [(p.step, p.field) for p in e.value.problems] == [
        ("mesh", "cores"), ("cases/{i}", "bogus"), ("use", "inputs")]
    assert "'/nowhere/at/all.nc' is produced by no step" in e.value.problems[-1].message
