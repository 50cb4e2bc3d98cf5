"""Reading suite files: fields, defaults, arrays, shared steps and every problem at once."""

from __future__ import annotations

import textwrap
import tracemalloc
from pathlib import Path

import pytest

from fleet.control.checks import load_suite
from fleet.core.problems import Problem, SuiteError
from fleet.core.suite import STEP_FIELDS, StepSpec, parse_array, parse_suite, read_suite
from fleet.core.units import array_ranges, array_size, format_memory, parse_memory

GiB = 2**30


def write(tmp_path: Path, text: str, name: str = "suite.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def parse(*steps: dict, defaults: dict | None = None, suite: dict | None = None,
          path: Path = Path("/x/suite.toml")):
    raw: dict = {"steps": list(steps)}
    if defaults is not None:
        raw["defaults"] = defaults
    if suite is not None:
        raw["suite"] = suite
    return parse_suite(raw, path)


def problems_of(*steps: dict, **kw) -> list[Problem]:
    with pytest.raises(SuiteError) as e:
        parse(*steps, **kw)
    return e.value.problems


def where(problems: list[Problem]) -> set[tuple[str | None, str | None]]:
    return {(p.step, p.field) for p in problems}


# --- fields -----------------------------------------------------------------------------

def test_the_step_fields_are_exactly_the_documented_names():
    assert STEP_FIELDS == {
        "id", "task", "call", "command", "args", "cores", "min_cores", "gpus", "memory",
        "span", "mpi", "ranks", "min_ranks", "threads", "deps", "inputs", "outputs",
        "workdir", "priority", "concurrent", "retries", "estimate", "timeout", "grace", "array",
        "protocol", "env",
    }


def test_a_steps_env_is_its_variables_by_name_on_top_of_the_defaults_numbers_as_text():
    [a, b] = parse({"id": "a", "command": "x", "env": {"Z": "last", "N": 3, "X": 0.5}},
                   {"id": "b", "command": "x"}, defaults={"env": {"N": "1", "D": "d"}}).steps
    assert a.env == (("D", "d"), ("N", "3"), ("X", "0.5"), ("Z", "last"))
    assert b.env == (("D", "d"), ("N", "1"))
    assert parse({"id": "c", "command": "x"}).steps[0].env == ()
    arr = parse({"id": "a/{i}", "array": "1-2", "command": "x", "env": {"CASE": "case {i}", "N": "{i}"}}).steps
    assert [s.env for s in arr] == [(("CASE", "case 1"), ("N", "1")), (("CASE", "case 2"), ("N", "2"))]


@pytest.mark.parametrize("env,said", [
    ({"FLEET_ID": "x"}, "FLEET_ID is fleet's own: a step's env may not set FLEET_* variables"),
    ({"MKL_NUM_THREADS": "2"}, "MKL_NUM_THREADS is set from the step's cores (an MPI step's threads): change those instead"),
    ({"A-B": "x"}, "'A-B' is not an environment variable's name (ASCII letters, digits and _, not starting with a digit)"),
    ({"A\n": "x"}, "'A\\n' is not an environment variable's name (ASCII letters, digits and _, not starting with a digit)"),
    ({"A": True}, "A: expected a string (or a number), got True"),
    ({"A": ["x"]}, "A: expected a string (or a number), got ['x']"),
    (["A=1"], 'expected a table of NAME = "value", got [\'A=1\']'),
    ({"bad name": "x", "OK": "1", "": "y", "FLEET_X": "z"},  # every wrong variable said at once
     "'bad name' is not an environment variable's name (ASCII letters, digits and _, not starting with a digit); "
     "'' is not an environment variable's name (ASCII letters, digits and _, not starting with a digit); "
     "FLEET_X is fleet's own: a step's env may not set FLEET_* variables"),
])
def test_an_env_that_is_not_a_table_of_plain_names_and_values_is_refused_naming_why(env, said):
    problems = problems_of({"id": "a", "command": "x", "env": env})
    assert [(p.step, p.field, p.message) for p in problems] == [("a", "env", said)]


def test_every_field_of_a_call_step_is_read_into_its_spec(tmp_path):
    path = write(tmp_path, """
        [suite]
        name = "ocean"
        run_dir = "out/here"
        preload = ["numpy", "scipy.sparse"]

        [[steps]]
        id = "prep"
        command = ["prep", "--all"]
        outputs = ["mesh.nc"]

        [[steps]]
        id = "ocean/init.1"
        task = "init"
        call = "pkg.mod:run_it"
        args = {level = 3, name = "x", nested = {a = [1, 2]}}
        cores = 8
        min_cores = 2
        gpus = 1
        memory = "4GiB"
        span = true
        deps = ["prep"]
        inputs = ["mesh.nc"]
        outputs = ["init.nc", "log/init.txt"]
        workdir = "work/init"
        priority = 1
        concurrent = false
        retries = 2
        estimate = 12.5
        """)
    suite = load_suite(path)
    assert suite.name == "ocean"
    assert suite.preload == ("numpy", "scipy.sparse")
    assert suite.run_dir == (tmp_path / "out/here").resolve()
    assert [s.id for s in suite.steps] == ["prep", "ocean/init.1"]
    s = suite.step("ocean/init.1")
    assert s == StepSpec(
        id="ocean/init.1", order=1, call="pkg.mod:run_it", command=None,
        args={"level": 3, "name": "x", "nested": {"a": [1, 2]}}, task="init",
        cores=8, min_cores=2, gpus=1, memory=4 * GiB, span=True, mpi=False,
        ranks=1, min_ranks=1, threads=1, deps=("prep",), inputs=("mesh.nc",),
        outputs=("init.nc", "log/init.txt"), workdir="work/init", priority=1,
        concurrent=False, retries=2, estimate=12.5, source=str(path))
    assert s.kind == "call"
    assert suite.step("prep").kind == "command"
    assert suite.step("prep").command == ("prep", "--all")


def test_a_step_that_gives_only_an_id_and_a_command_gets_every_default():
    s = parse({"id": "a", "command": "echo hi"}).steps[0]
    assert (s.command, s.call, dict(s.args), s.task) == ("echo hi", None, {}, "a")
    assert (s.cores, s.min_cores, s.gpus, s.memory) == (1, 1, 0, None)
    assert (s.span, s.mpi, s.ranks, s.min_ranks, s.threads) == (False, False, 1, 1, 1)
    assert (s.deps, s.inputs, s.outputs) == ((), (), ())
    assert (s.workdir, s.priority, s.concurrent, s.retries, s.estimate) == ("steps/a", 3, True, 0, None)


def test_min_cores_defaults_to_cores_not_to_one():
    s = parse({"id": "a", "command": "x", "cores": 6}).steps[0]
    assert (s.cores, s.min_cores) == (6, 6)


def test_the_defaults_table_applies_to_every_step_and_a_step_overrides_it():
    suite = parse({"id": "a", "command": "x"}, {"id": "b", "command": "x", "cores": 2, "priority": 5},
                  defaults={"cores": 4, "priority": 2, "retries": 1, "memory": "1GiB"})
    a, b = suite.steps
    assert (a.cores, a.min_cores, a.priority, a.retries, a.memory) == (4, 4, 2, 1, GiB)
    assert (b.cores, b.min_cores, b.priority, b.retries, b.memory) == (2, 2, 5, 1, GiB)


def test_a_cores_default_does_not_make_an_mpi_step_wrong_nor_a_ranks_default_a_plain_one():
    suite = parse({"id": "m", "command": "model", "mpi": True, "ranks": 4},
                  {"id": "p", "command": "post"},
                  defaults={"cores": 2, "threads": 2})
    m, p = suite.steps
    assert (m.mpi, m.ranks, m.threads, m.cores, m.min_cores) == (True, 4, 2, 8, 8)
    assert (p.mpi, p.threads, p.cores) == (False, 1, 2)


def test_a_default_id_is_an_error():
    assert where(problems_of({"id": "a", "command": "x"}, defaults={"id": "z"})) == {(None, "defaults.id")}


@pytest.mark.parametrize("argv,said", [(["", "x"], "empty"), (["  ", "x"], "blank"), ([""], "empty")])
def test_an_argv_command_with_no_program_name_is_refused_before_it_runs(argv, said):
    (p,) = problems_of({"id": "a", "command": argv})
    assert (p.step, p.field) == ("a", "command")
    assert p.message.endswith(f"command[0], the program to run, is {said}"), p.message


def test_an_argv_command_and_a_shell_command_are_both_accepted():
    a, b = parse({"id": "a", "command": ["ls", "-l"]}, {"id": "b", "command": "ls -l | wc"}).steps
    assert a.command == ("ls", "-l")
    assert b.command == "ls -l | wc"


# --- problems -----------------------------------------------------------------------------

def test_unknown_fields_are_reported_naming_file_step_and_field():
    problems = problems_of({"id": "a", "command": "x", "coers": 2},
                           defaults={"prio": 1}, suite={"name": "s", "rundir": "x"},
                           path=Path("/x/my.toml"))
    assert where(problems) == {("a", "coers"), (None, "defaults.prio"), (None, "suite.rundir")}
    step_problem = next(p for p in problems if p.field == "coers")
    assert step_problem.file == "/x/my.toml"
    assert str(step_problem) == "/x/my.toml: step 'a': field 'coers': unknown field (did you mean 'cores'?)"


@pytest.mark.parametrize("key,meant", [
    ("after", "'deps'"), ("depends_on", "'deps'"), ("walltime", "'timeout'"), ("mem", "'memory'"),
    ("ntasks", "'ranks'"), ("cmd", "'command'"), ("exclusive", "concurrent = false"), ("Retry", "'retries'"),
])
def test_an_unknown_field_another_tool_would_take_names_the_field_fleet_means(key, meant):
    problems = problems_of({"id": "a", "command": "x", key: 1}, defaults={key: 1})
    said = {(p.step, p.field): p.message for p in problems}
    assert said[("a", key)] == f"unknown field (did you mean {meant}?)"
    assert said[(None, f"defaults.{key}")] == f"unknown field (did you mean {meant}?)"


def test_an_unknown_field_close_to_nothing_gets_no_guess_and_a_suite_field_lists_the_known_ones():
    problems = problems_of({"id": "a", "command": "x", "colour": 1}, suite={"name": "s", "flavour": 1})
    said = {(p.step, p.field): p.message for p in problems}
    assert said[("a", "colour")] == "unknown field"
    assert said[(None, "suite.flavour")] == "unknown field (expected name, run_dir, preload, max_steps)"
    assert "did you mean 'run_dir'" in problems_of({"id": "a", "command": "x"}, suite={"rundir": "x"})[0].message


def test_an_unknown_top_level_table_is_reported():
    with pytest.raises(SuiteError) as e:
        parse_suite({"steps": [{"id": "a", "command": "x"}], "step": [{"id": "b"}]}, Path("s.toml"))
    assert where(e.value.problems) == {(None, "step")}


@pytest.mark.parametrize("field,value", [
    ("id", 5), ("task", 1), ("call", "no_colon"), ("call", "a.b:c d"), ("command", []),
    ("command", "   "), ("command", ["ls", 1]), ("args", [1]), ("cores", 0), ("cores", "2"),
    ("cores", 1.5), ("cores", True), ("min_cores", 0), ("gpus", -1), ("memory", "4 parsecs"),
    ("memory", -5), ("memory", 1.5), ("memory", True), ("memory", 0), ("memory", "0GiB"), ("span", "yes"), ("mpi", 1),
    ("deps", "a"), ("deps", [1]), ("inputs", "x"), ("inputs", [""]), ("outputs", [3]),
    ("workdir", ""), ("workdir", 3), ("priority", 0), ("priority", 6), ("priority", "1"),
    ("concurrent", "no"), ("retries", -1), ("estimate", -1), ("estimate", "5s"),
    ("estimate", float("nan")), ("estimate", float("inf")),
    ("array", 5), ("array", "1-"), ("array", "a-b"), ("array", "5-3"),
])
def test_a_mistyped_field_is_reported_naming_its_step_and_field(field, value):
    table = {"id": "s{i}" if field == "array" else "s", "call": "m:f"}
    if field in ("command",):
        del table["call"]
    table[field] = value
    problems = problems_of(table)
    assert len(problems) == 1, problems
    (p,) = problems
    assert p.field == field
    assert p.step in ("s", "s{i}", "#1")  # (an id that is no string: the table's place)
    assert p.file == "/x/suite.toml"


def test_every_problem_in_a_suite_is_reported_in_one_go(tmp_path):
    path = write(tmp_path, """
        [suite]
        name = "many"
        colour = "red"

        [defaults]
        cors = 2

        [[steps]]
        id = "a"
        command = "x"
        priority = 9

        [[steps]]
        id = "b"
        call = "m:f"
        command = "x"

        [[steps]]
        id = "c"
        memory = "lots"

        [[steps]]
        id = "bad id"
        command = "x"

        [[steps]]
        id = "d"
        command = "x"
        cores = 2
        min_cores = 4
        """)
    with pytest.raises(SuiteError) as e:
        load_suite(path)
    problems = e.value.problems
    assert where(problems) == {
        (None, "suite.colour"), (None, "defaults.cors"), ("a", "priority"), ("b", "call"),
        ("c", "memory"), ("c", "call"), ("bad id", "id"), ("d", "min_cores"),
    }
    assert all(p.file == str(path) for p in problems)
    text = str(e.value)
    for p in problems:
        assert str(p) in text.splitlines()


def test_a_step_with_an_unknown_field_still_has_its_mistyped_fields_reported():
    problems = problems_of({"id": "a", "command": "x", "coers": 2, "priority": 9, "gpus": "one"})
    assert where(problems) == {("a", "coers"), ("a", "priority"), ("a", "gpus")}


def test_a_step_without_an_id_is_reported_by_its_position():
    problems = problems_of({"id": "a", "command": "x"}, {"command": "y"})
    assert where(problems) == {("#2", "id")}


def test_both_call_and_command_is_an_error():
    (p,) = problems_of({"id": "a", "call": "m:f", "command": "x"})
    assert (p.step, p.field) == ("a", "call")
    assert "both" in p.message


def test_neither_call_nor_command_is_an_error():
    (p,) = problems_of({"id": "a"})
    assert (p.step, p.field) == ("a", "call")
    assert "neither" in p.message


def test_args_on_a_command_step_is_an_error():
    assert where(problems_of({"id": "a", "command": "x", "args": {"n": 1}})) == {("a", "args")}


@pytest.mark.parametrize("bad", ["a b", "a:b", "a*", "", "ünï", "a,b", "{i}", "a\n"])
def test_a_step_id_with_characters_other_than_letters_digits_dot_underscore_dash_slash_is_rejected(bad):
    problems = problems_of({"id": bad, "command": "x"})
    assert [(p.field) for p in problems] == ["id"]
    assert problems[0].step == bad


@pytest.mark.parametrize("good", ["a", "0", "a.b_c-d/e", "ocean/global/QU240.init-1"])
def test_a_step_id_of_letters_digits_dot_underscore_dash_slash_is_accepted(good):
    assert parse({"id": good, "command": "x"}).steps[0].id == good


def test_a_dep_that_is_not_a_step_id_is_reported():
    assert where(problems_of({"id": "a", "command": "x", "deps": ["b c"]})) == {("a", "deps")}


def test_duplicate_deps_are_kept_once_in_order():
    suite = parse({"id": "b", "command": "x"}, {"id": "c", "command": "x"},
                  {"id": "a", "command": "x", "deps": ["c", "b", "c"]})
    assert suite.step("a").deps == ("c", "b")


# --- memory -------------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("4GiB", 4 * 2**30), ("512MB", 512 * 10**6), ("512MiB", 512 * 2**20), ("16G", 16 * 2**30),
    ("1.5GiB", 3 * 2**29), ("2 TB", 2 * 10**12), ("100", 100), ("100B", 100), ("8kb", 8000),
    (1048576, 1048576),
])
def test_memory_is_read_from_sizes_and_byte_counts(text, value):
    assert parse_memory(text) == value
    assert parse({"id": "a", "command": "x", "memory": text}).steps[0].memory == value


def test_a_size_of_0_is_a_size_but_not_a_steps_memory():
    # (a limit of nothing, which the nodes took for no limit at all)
    assert parse_memory(0) == parse_memory("0GiB") == 0
    (p,) = problems_of({"id": "a", "command": "x", "memory": 0})
    assert (p.step, p.field) == ("a", "memory") and "more than 0" in p.message


@pytest.mark.parametrize("bad", ["4 parsecs", "GiB", "-1GiB", "", -1, 1.5, True, None, [4]])
def test_a_memory_that_is_not_a_size_is_an_error(bad):
    with pytest.raises(ValueError):
        parse_memory(bad)


def test_memory_is_formatted_shortly():
    assert format_memory(3 * 2**29) == "1.5GiB"
    assert format_memory(512) == "512B"


def test_memory_just_below_the_next_unit_is_no_scientific_notation():
    # 999.5 to 1023.99 of a unit rounded to three digits is 1e+03 in :.3g.
    assert format_memory(1010 * 2**20) == "1010MiB"
    assert format_memory(int(999.5 * 2**20)) == "1000MiB"
    assert format_memory(1024 * 2**20 - 1) == "1024MiB"
    assert format_memory(999 * 2**20) == "999MiB"
    assert format_memory(3000 * 2**40) == "3000TiB"
    assert format_memory(1000) == "1000B"


# --- priority -----------------------------------------------------------------------------

@pytest.mark.parametrize("priority", [1, 2, 3, 4, 5])
def test_priorities_from_one_to_five_are_accepted(priority):
    assert parse({"id": "a", "command": "x", "priority": priority}).steps[0].priority == priority


@pytest.mark.parametrize("priority", [0, 6, -1, 100])
def test_a_priority_outside_one_to_five_is_an_error(priority):
    (p,) = problems_of({"id": "a", "command": "x", "priority": priority})
    assert (p.step, p.field) == ("a", "priority")
    assert "from 1 to 5" in p.message


# --- MPI ------------------------------------------------------------------------------------

def test_an_mpi_step_gets_its_cores_from_ranks_times_threads_and_spans_by_default():
    s = parse({"id": "m", "command": "model", "mpi": True, "ranks": 4, "min_ranks": 2,
               "threads": 3}).steps[0]
    assert (s.mpi, s.ranks, s.min_ranks, s.threads) == (True, 4, 2, 3)
    assert (s.cores, s.min_cores, s.span) == (12, 6, True)


def test_min_ranks_defaults_to_ranks_and_an_mpi_step_may_be_told_not_to_span():
    s = parse({"id": "m", "command": "model", "mpi": True, "ranks": 4, "span": False}).steps[0]
    assert (s.cores, s.min_cores, s.min_ranks, s.threads, s.span) == (4, 4, 4, 1, False)


def test_an_mpi_step_that_declares_cores_is_an_error():
    assert where(problems_of({"id": "m", "command": "x", "mpi": True, "ranks": 2, "cores": 4})) == {("m", "cores")}


@pytest.mark.parametrize("field", ["ranks", "min_ranks", "threads"])
def test_ranks_and_threads_on_a_step_that_is_not_mpi_are_errors(field):
    assert where(problems_of({"id": "p", "command": "x", field: 2})) == {("p", field)}


def test_min_ranks_above_ranks_and_min_cores_above_cores_are_errors():
    problems = problems_of({"id": "m", "command": "x", "mpi": True, "ranks": 2, "min_ranks": 3},
                           {"id": "p", "command": "x", "cores": 2, "min_cores": 3})
    assert where(problems) == {("m", "min_ranks"), ("p", "min_cores")}


# --- arrays -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,indices", [
    ("0-3,7,9", [0, 1, 2, 3, 7, 9]), ("5", [5]), ("0-99", list(range(100))),
    (" 2 - 2 ".replace(" ", ""), [2]), ("9,0-2", [9, 0, 1, 2]), ("1-3,2-4", [1, 2, 3, 4]),
    ("0-1, 4", [0, 1, 4]),
])
def test_array_indices_are_expanded_inclusively_in_written_order(text, indices):
    assert parse_array(text) == indices


@pytest.mark.parametrize("bad", ["", "a", "1-", "-3", "3-1", "1,,2", "1-2-3", "0x3"])
def test_an_array_that_is_not_indices_is_an_error(bad):
    with pytest.raises(ValueError):
        parse_array(bad)


def test_an_array_step_is_one_step_per_index_with_i_replaced_in_every_string():
    suite = parse(
        {"id": "first", "command": "x"},
        {"id": "case{i}", "array": "0-3,7,9", "call": "pkg.m{i}:run", "task": "t{i}",
         "args": {"n": "{i}", "fixed": 3, "nested": {"file": "in{i}.nc", "list": ["a{i}", 1, "{i}"]}},
         "deps": ["prep{i}"], "inputs": ["in/{i}.nc"], "outputs": ["out/{i}.nc"],
         "workdir": "w/{i}"},
        {"id": "cmd{i}", "array": "1", "command": ["run", "--case={i}"]},
        {"id": "sh{i}", "array": "2", "command": "run {i} && echo {i}"},
        {"id": "prep{i}", "array": "0-9", "command": "x"},
        {"id": "last", "command": "x"},
    )
    ids = [s.id for s in suite.steps]
    assert ids == (["first"] + [f"case{i}" for i in (0, 1, 2, 3, 7, 9)] + ["cmd1", "sh2"]
                   + [f"prep{i}" for i in range(10)] + ["last"])
    assert [s.order for s in suite.steps] == list(range(len(ids)))
    c7 = suite.step("case7")
    assert c7.call == "pkg.m7:run"
    assert c7.task == "t7"
    # An args value that is exactly "{i}" is the index itself; inside a longer string it stays text.
    assert c7.args == {"n": 7, "fixed": 3, "nested": {"file": "in7.nc", "list": ["a7", 1, 7]}}
    assert (c7.deps, c7.inputs, c7.outputs, c7.workdir) == (("prep7",), ("in/7.nc",), ("out/7.nc",), "w/7")
    assert suite.step("cmd1").command == ("run", "--case=1")
    assert suite.step("sh2").command == "run 2 && echo 2"
    assert suite.step("prep4").workdir == "steps/prep4"


def test_an_array_step_whose_id_lacks_i_is_an_error():
    assert where(problems_of({"id": "case", "array": "0-3", "command": "x"})) == {("case", "id")}


def test_a_bad_array_is_reported_naming_the_step_and_field():
    assert where(problems_of({"id": "case{i}", "array": "0-x", "command": "x"})) == {("case{i}", "array")}


# --- shared steps -----------------------------------------------------------------------------

def test_the_same_step_defined_twice_identically_is_one_shared_step_in_its_first_place():
    mesh = {"id": "mesh", "command": ["mesh", "--res", "240"], "cores": 2, "outputs": ["mesh.nc"]}
    suite = parse(dict(mesh), {"id": "a", "command": "x", "deps": ["mesh"]}, dict(mesh),
                  {"id": "b", "command": "x", "deps": ["mesh"]})
    assert [(s.id, s.order) for s in suite.steps] == [("mesh", 0), ("a", 1), ("b", 2)]


def test_a_shared_step_reached_through_two_arrays_is_one_step():
    suite = parse({"id": "m{i}", "array": "0-2", "command": "mesh {i}"},
                  {"id": "m{i}", "array": "2-4", "command": "mesh {i}"})
    assert [s.id for s in suite.steps] == ["m0", "m1", "m2", "m3", "m4"]


def test_the_same_id_defined_twice_differently_is_an_error_naming_the_field():
    problems = problems_of({"id": "mesh", "command": "mesh", "cores": 2},
                           {"id": "mesh", "command": "mesh", "cores": 4})
    assert where(problems) == {("mesh", "cores")}
    assert "defined twice differently" in problems[0].message


def test_a_shared_step_that_differs_only_by_a_default_is_still_an_error():
    problems = problems_of({"id": "mesh", "command": "mesh"},
                           {"id": "mesh", "command": "mesh", "retries": 2},
                           defaults={"retries": 0})
    assert where(problems) == {("mesh", "retries")}


# --- the suite table ---------------------------------------------------------------------------

def test_the_run_dir_is_relative_to_the_suite_file_not_the_working_directory(tmp_path, monkeypatch):
    sub = tmp_path / "suites"
    sub.mkdir()
    path = write(sub, """
        [suite]
        name = "s"
        run_dir = "../scratch/run1"
        [[steps]]
        id = "a"
        command = "x"
        """)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_suite(path).run_dir == (tmp_path / "scratch" / "run1").resolve()
    monkeypatch.chdir(sub)
    assert load_suite("suite.toml").run_dir == (tmp_path / "scratch" / "run1").resolve()


def test_the_run_dir_defaults_to_runs_slash_name_beside_the_suite_file(tmp_path):
    path = write(tmp_path, """
        [suite]
        name = "ocean"
        [[steps]]
        id = "a"
        command = "x"
        """)
    assert load_suite(path).run_dir == (tmp_path / "runs" / "ocean").resolve()


def test_the_suite_name_defaults_to_the_file_stem_and_an_absolute_run_dir_is_kept(tmp_path):
    path = write(tmp_path, f"""
        [suite]
        run_dir = "{tmp_path / 'abs'}"
        [[steps]]
        id = "a"
        command = "x"
        """, name="nightly.toml")
    suite = load_suite(path)
    assert suite.name == "nightly"
    assert suite.run_dir == tmp_path / "abs"


def test_bad_suite_table_values_are_reported():
    problems = problems_of({"id": "a", "command": "x"},
                           suite={"name": "has space", "run_dir": 3, "preload": "numpy"})
    assert where(problems) == {(None, "suite.name"), (None, "suite.run_dir"), (None, "suite.preload")}


@pytest.mark.parametrize("file, fit", [("my suite.toml", "my_suite"), ("\u00fcmlaut.toml", "mlaut"),
                                       ("...toml", "suite")])
def test_a_file_name_that_is_no_suite_name_is_said_to_be_the_file_s_with_a_name_to_write_not_a_field(file, fit):
    # (it was "field 'suite.name': expected a name ...": a field the file did not have)
    (p,) = problems_of({"id": "a", "command": "x"}, path=Path("/x") / file)
    assert (p.step, p.field) == (None, None), p
    assert p.message.startswith(f"the suite has no [suite] name, so it takes the file's name, {file[:-5]!r}, which "
                                "is not a suite name"), p.message
    assert p.message.endswith(f'give it one, e.g. [suite] name = "{fit}"'), p.message
    (named,) = problems_of({"id": "a", "command": "x"}, path=Path("/x") / file, suite={"name": "has space"})
    assert named.field == "suite.name"  # one written in the file is that field's
    # "letters" alone read as if the file's "ü" were one: only ASCII letters are.
    assert "(ASCII letters, digits and . _ -" in p.message and "a name of ASCII letters" in named.message
    assert parse({"id": "a", "command": "x"}, path=Path("/x") / file, suite={"name": fit}).name == fit


def test_a_toml_date_or_time_in_a_call_step_s_args_is_refused_naming_where_it_is(tmp_path):
    path = write(tmp_path, """\
        [[steps]]
        id = "a"
        call = "m:f"
        args = { when = 1979-05-27T07:32:00Z, more = [1, { at = 07:32:00 }] }
        """)
    with pytest.raises(SuiteError) as e:
        load_suite(path)
    (p,) = e.value.problems
    assert (p.file, p.step, p.field) == (str(path), "a", "args"), p
    assert "is a TOML" in p.message and ("args.when" in p.message or "args.more[1].at" in p.message), p.message


def test_arguments_nested_too_deeply_to_read_are_one_problem_naming_the_file_not_a_traceback(tmp_path):
    deep = write(tmp_path, '[[steps]]\nid = "a"\ncall = "m:f"\nargs = { x = ' + "[" * 2000 + "]" * 2000 + " }\n")
    with pytest.raises(SuiteError) as e:
        load_suite(deep)
    (p,) = e.value.problems
    assert p.file == str(deep) and p.message == "nested too deeply to read"


def test_a_file_that_is_not_toml_or_does_not_exist_is_one_problem_naming_the_file(tmp_path):
    bad = write(tmp_path, "[[steps]\nid = 'a'\n")
    with pytest.raises(SuiteError) as e:
        load_suite(bad)
    (p,) = e.value.problems
    assert p.file == str(bad) and "not valid TOML" in p.message
    with pytest.raises(SuiteError) as e:
        load_suite(tmp_path / "missing.toml")
    (p,) = e.value.problems
    assert p.file == str(tmp_path / "missing.toml") and p.message == "no such file"


def test_a_suite_with_no_steps_is_valid_and_empty(tmp_path):
    suite = load_suite(write(tmp_path, "[suite]\nname = 'empty'\n"))
    assert suite.steps == ()
    with pytest.raises(KeyError):
        suite.step("a")


def test_a_step_with_an_unknown_field_is_not_also_reported_as_a_differing_shared_step():
    problems = problems_of({"id": "m", "command": "x", "coers": 2}, {"id": "m", "command": "x", "cores": 2})
    assert where(problems) == {("m", "coers")}


# --- paths: step ids, workdirs, outputs and inputs stay inside the run directory ---------------

@pytest.mark.parametrize("bad", ["../x", "a/../b", "..", "./a", "a/.", ".", "a//b", "/a", "a/", "/",
                                 ".fleet", "a/.fleet", "a/.fleet/b"])
def test_a_step_id_that_is_not_a_clean_relative_path_is_rejected(bad):
    (p,) = problems_of({"id": bad, "command": "x"})
    assert (p.step, p.field) == (bad, "id")
    assert "clean relative path" in p.message


@pytest.mark.parametrize("good", ["a/b/c", ".a", "a.", "..a", "a..", ".fleetx", "a/x.fleet", "fleet"])
def test_a_step_id_with_dots_inside_its_segments_is_accepted(good):
    assert parse({"id": good, "command": "x"}).steps[0].id == good


def test_an_array_step_id_is_checked_after_the_index_is_put_in():
    assert where(problems_of({"id": "{i}/../x", "array": "0", "command": "x"})) == {("0/../x", "id")}


@pytest.mark.parametrize("field,value", [
    ("workdir", "/tmp/elsewhere"), ("workdir", "../sibling"), ("workdir", "a/../../b"),
    ("outputs", ["/tmp/out.nc"]), ("outputs", ["ok.nc", "../out.nc"]), ("outputs", ["."]), ("outputs", ["a/.."]),
    ("inputs", ["../in.nc"]), ("inputs", ["a/../../in.nc"]), ("inputs", [""]),
    ("outputs", ["steps/b/.fleet/done.json"]), ("workdir", "steps/b/.fleet"),
])
def test_a_workdir_output_or_relative_input_that_leaves_the_run_directory_is_rejected(field, value):
    (p,) = problems_of({"id": "s", "command": "x", field: value})
    assert (p.step, p.field) == ("s", field)


def test_every_bad_entry_of_outputs_and_inputs_is_reported_each_on_its_own_line():
    problems = problems_of({"id": "s", "command": "x", "outputs": ["../x.txt", "/tmp/y", "ok.nc", "."],
                            "inputs": ["/data/fine.nc", "../a.nc", "b/../../c.nc"]},
                           defaults={"outputs": ["../d1", "/d2"]})
    assert [(p.step, p.field) for p in problems] == [
        (None, "defaults.outputs"), (None, "defaults.outputs"),
        ("s", "outputs"), ("s", "outputs"), ("s", "outputs"), ("s", "inputs"), ("s", "inputs")]
    said = [p.message for p in problems]
    assert "'../d1'" in said[0] and "'/d2'" in said[1]
    assert "'../x.txt' leads out" in said[2] and "absolute path '/tmp/y'" in said[3] and "'.'" in said[4]
    assert "'../a.nc'" in said[5] and "'b/../../c.nc'" in said[6]


def test_an_absolute_input_is_a_shared_dataset_and_relative_paths_inside_the_run_directory_are_fine():
    s = parse({"id": "s", "command": "x", "inputs": ["/data/shared/mesh.nc", "a/../b.nc"],
               "outputs": ["out/x.nc"], "workdir": "."}).steps[0]
    assert (s.inputs, s.outputs, s.workdir) == (("/data/shared/mesh.nc", "a/../b.nc"), ("out/x.nc",), ".")


@pytest.mark.parametrize("name", ["a/b", "..", ".", "../up", "/abs"])
def test_a_suite_name_that_would_put_the_default_run_dir_elsewhere_is_rejected(name):
    problems = problems_of({"id": "a", "command": "x"}, suite={"name": name})
    assert where(problems) == {(None, "suite.name")}


# --- the size of arrays ------------------------------------------------------------------------

@pytest.mark.parametrize("text,size", [
    ("0-99", 100), ("5", 1), ("0-3,7,9", 6), ("1-3,2-4", 4), ("9,0-2", 4), ("0-9,3-5,5", 10),
    ("0-99999999", 100_000_000), ("0-4,0-4,10-12", 8),
])
def test_the_size_of_an_array_is_counted_without_expanding_it(text, size):
    assert array_size(array_ranges(text)) == size
    if size < 1000:
        assert size == len(parse_array(text))


def test_an_array_beyond_a_million_steps_is_refused_in_constant_memory():
    tracemalloc.start()
    try:
        problems = problems_of({"id": "s{i}", "array": "0-99999999", "command": "x"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert where(problems) == {("s{i}", "array")}
    assert "100000000 steps" in problems[0].message and "max_steps" in problems[0].message
    assert peak < 1_000_000


def test_the_limit_counts_every_step_of_the_suite_and_max_steps_sets_it():
    steps = ({"id": "a", "command": "x"}, {"id": "s{i}", "array": "1-4", "command": "x"})
    assert len(parse(*steps, suite={"max_steps": 5}).steps) == 5
    problems = problems_of(*steps, {"id": "b", "command": "x"}, suite={"max_steps": 5})
    assert where(problems) == {("b", "id")}
    problems = problems_of(*steps, suite={"max_steps": 4})
    assert where(problems) == {("s{i}", "array")}
    assert "room for" in problems[0].message


@pytest.mark.parametrize("bad", [0, -1, "many", True, 1.5])
def test_a_max_steps_that_is_not_a_positive_integer_is_reported(bad):
    assert where(problems_of({"id": "a", "command": "x"}, suite={"max_steps": bad})) == {(None, "suite.max_steps")}


# --- mpi and call ------------------------------------------------------------------------------

def test_an_mpi_call_step_is_rejected_naming_the_mpi_field():
    (p,) = problems_of({"id": "m", "call": "pkg.mod:fn", "mpi": True, "ranks": 4})
    assert (p.step, p.field) == ("m", "mpi")
    assert "command" in p.message


def test_an_mpi_default_is_for_the_command_steps_and_leaves_a_call_step_alone():
    # (before 2026-12-06 it made every call step of the suite wrong: field 'mpi')
    c, m = parse({"id": "c", "call": "pkg.mod:fn"}, {"id": "m", "command": "model"},
                 defaults={"mpi": True, "ranks": 4, "protocol": "steps"}).steps
    assert (c.mpi, c.ranks, c.cores, c.protocol) == (False, 1, 1, "")
    assert (m.mpi, m.ranks, m.cores, m.protocol) == (True, 4, 4, "steps")


def test_defaults_of_one_kind_of_step_apply_to_the_steps_of_that_kind_only():
    # (an args default made every command step wrong: "step 'a': field 'args': args are
    # keyword arguments for a call step", as if the step had written it)
    a, b = parse({"id": "a", "command": "x"}, {"id": "b", "call": "m:f", "args": {"y": 2}},
                 defaults={"args": {"x": 1}}).steps
    assert (a.args, b.args) == ({}, {"y": 2})
    (b,) = parse({"id": "b", "call": "m:f"}, defaults={"args": {"x": 1}, "command": "x"}).steps
    assert (b.call, b.command, b.args) == ("m:f", None, {"x": 1})
    (a,) = parse({"id": "a", "command": "y"}, defaults={"call": "m:f"}).steps
    assert (a.call, a.command) == (None, "y")


def test_a_problem_a_default_takes_part_in_says_it_comes_from_the_defaults():
    said = [str(p) for p in problems_of({"id": "a", "command": "x", "cores": 1}, defaults={"min_cores": 2})]
    assert said == ["/x/suite.toml: step 'a': field 'min_cores': min_cores (2) is larger than cores (1) "
                    "(min_cores from [defaults])"]
    said = [str(p) for p in problems_of({"id": "a"}, defaults={"args": {"x": 1}})]
    assert said == ["/x/suite.toml: step 'a': field 'call': give exactly one of call and command (neither given)",
                    "/x/suite.toml: step 'a': field 'args': args are keyword arguments for a call step "
                    "(from [defaults])"]
    (p,) = problems_of({"id": "m", "command": "x", "cores": 2}, defaults={"mpi": True})
    assert p.message == "an MPI step declares ranks and threads, not cores (mpi from [defaults])"
    (p,) = problems_of({"id": "a", "command": "x", "min_cores": 3, "cores": 2})  # its own: nothing added
    assert p.message == "min_cores (3) is larger than cores (2)"


def test_a_bad_default_is_said_once_for_the_defaults_table_not_again_for_each_step():
    problems = problems_of({"id": "a", "command": "x"}, {"id": "b", "call": "m:f"}, defaults={"cores": 0})
    assert [(p.step, p.field) for p in problems] == [(None, "defaults.cores")]


# --- reading what reads ------------------------------------------------------------------------

def test_reading_keeps_the_steps_that_parse_and_the_ids_and_outputs_of_those_that_do_not():
    r = read_suite({"steps": [
        {"id": "a", "command": "x"}, {"id": "b", "command": "x", "priority": 9, "outputs": ["b.nc"]},
        {"id": "c{i}", "array": "0-x", "command": "x", "outputs": ["c{i}.nc"]}, {"id": "d", "command": "x"},
    ]}, Path("/x/s.toml"))
    assert [s.id for s in r.suite.steps] == ["a", "d"]
    assert [(p.step, p.field) for p in r.problems] == [("b", "priority"), ("c{i}", "array")]
    assert "b" in r.unparsed and "c7" in r.unparsed and "d" not in r.unparsed and "c" not in r.unparsed
    assert "b.nc" in r.unparsed_outputs and "c12.nc" in r.unparsed_outputs
    with pytest.raises(SuiteError):
        r.check()


def test_later_problems_take_their_place_in_setup_order_among_the_field_problems():
    r = read_suite({"steps": [
        {"id": "a", "command": "x"}, {"id": "b", "command": "x", "priority": 9}, {"id": "c", "command": "x"},
    ]}, Path("/x/s.toml"))
    later = [Problem("f", "c", "deps", "late c"), Problem("f", None, None, "about no step"),
             Problem("f", "a", "inputs", "late a")]
    assert [p.message.split(",")[0] for p in r.merged(later)] == [
        "late a", "expected an integer from 1 to 5", "late c", "about no step"]


def test_a_suite_an_editor_saved_with_a_byte_order_mark_reads_as_without_one(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + b'[suite]\nname = "bom"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    s = load_suite(path)
    assert (s.name, [x.id for x in s.steps]) == ("bom", ["a"])


def test_a_preload_that_cannot_be_a_module_name_is_refused_without_importing_anything():
    problems = problems_of({"id": "a", "command": "x"},
                           suite={"preload": ["numpy", "not a module!", "scipy..linalg", "os.path"]})
    assert [(p.field, p.message.split(" is not")[0]) for p in problems] == [
        ("suite.preload", "'not a module!'"), ("suite.preload", "'scipy..linalg'")]


@pytest.mark.parametrize("step_id,said", [
    ("s" * 256, "has a part of 256 characters between '/', and a directory's name ends at 255"),
    ("/".join(["d" * 100] * 19), "is 1918 characters long, and at most 1900 fit"),
])
def test_a_step_id_too_long_to_name_its_directory_is_refused_naming_the_step_and_field(tmp_path, step_id, said):
    p = tmp_path / "s.toml"
    p.write_text(f'[[steps]]\nid = "{step_id}"\ncommand = "true"\n[[steps]]\nid = "{"s" * 255}"\ncommand = "true"\n')
    with pytest.raises(SuiteError) as e:
        load_suite(p)
    assert len(e.value.problems) == 1, e.value.problems  # (255 is a name: that one reads)
    msg = str(e.value.problems[0])
    assert "s.toml" in msg and "field 'id'" in msg and said in msg, msg


def test_a_workdir_output_or_input_with_a_name_too_long_to_make_is_refused_as_a_step_id_is():
    # (before 2026-12-06 validate said valid and the step failed when it started: "File name
    # too long"; an absolute input that long was a traceback in validate)
    long, ok = "a" * 256, "é" * 127  # (254 bytes: a name)
    problems = problems_of({"id": "wd", "command": "x", "workdir": f"w/{long}"},
                           {"id": "out", "command": "x", "outputs": [f"{long}/x", f"{ok}/y"]},
                           {"id": "in", "command": "x", "inputs": [f"/d/{long}", f"{ok}/z"]},
                           {"id": "wide", "command": "x", "workdir": "b/" * 951},
                           {"id": "utf", "command": "x", "outputs": ["é" * 128]})
    assert where(problems) == {("wd", "workdir"), ("out", "outputs"), ("in", "inputs"), ("wide", "workdir"),
                               ("utf", "outputs")}, problems
    said = {p.step: p.message for p in problems}
    assert "a part of 256 bytes between '/', and a name ends at 255" in said["wd"], said
    assert "a part of 256 bytes" in said["utf"] and "is 1902 bytes long, and at most 1900" in said["wide"], said
    assert parse({"id": "a", "command": "x", "workdir": "/".join([ok] * 7), "outputs": [f"{ok}/o"]}).steps


def test_an_args_integer_too_big_to_travel_to_its_node_is_refused_naming_where_it_is():
    # (TOML takes any integer; the step failed at its launch, "OverflowError: Integer value
    # out of range", pointing at a log that did not exist)
    problems = problems_of({"id": "flat", "call": "m:f", "args": {"x": 10**20}},
                           {"id": "deep", "call": "m:f", "args": {"x": [1, {"y": -2**63 - 1}]}})
    assert [(p.step, p.field) for p in problems] == [("flat", "args"), ("deep", "args")], problems
    assert "args.x is an integer of 67 bits" in problems[0].message and "as a string" in problems[0].message
    assert "args.x[1].y is an integer" in problems[1].message, problems[1].message
    edges = {"lo": -2**63, "hi": 2**64 - 1, "t": True, "f": 1.5}
    assert parse({"id": "a", "call": "m:f", "args": edges}).steps[0].args == edges


def test_a_nul_in_a_command_an_env_value_or_a_path_is_refused_in_the_suite_and_in_submitted_children():
    # (no argv entry, variable or file name can hold one: before 2026-12-06 it failed only at run time)
    from fleet.core.childsteps import expand
    bad = [{"id": "argv", "command": ["echo", "a\0b"]}, {"id": "sh", "command": "echo \0"},
           {"id": "env", "command": "x", "env": {"X": "1\0"}}, {"id": "out", "command": "x", "outputs": ["o\0"]},
           {"id": "wd", "command": "x", "workdir": "w\0"}, {"id": "in", "command": "x", "inputs": ["/d/\0"]}]
    problems = problems_of(*bad)
    assert where(problems) == {("argv", "command"), ("sh", "command"), ("env", "env"), ("out", "outputs"),
                               ("wd", "workdir"), ("in", "inputs")}
    assert all("NUL character" in p.message for p in problems), problems
    _, problems = expand("p", bad, "ctx.submit")  # ctx.submit's children: the same checks
    assert where(problems) == {("p/argv", "command"), ("p/sh", "command"), ("p/env", "env"), ("p/out", "outputs"),
                               ("p/wd", "workdir"), ("p/in", "inputs")}
    assert problems_of({"id": "a", "command": "x"}, suite={"run_dir": "r\0"})[0].field == "suite.run_dir"
