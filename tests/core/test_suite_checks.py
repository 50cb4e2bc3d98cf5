"""Suite problems found before anything starts, each naming file, step and field: a path
inside another step's output, an output on fleet's own files, an MPI step's min_cores,
a step defined twice with a nan in its args, a memory size past any number. Suites as
text, checked as `fleet validate` checks them (the disk aside)."""

from __future__ import annotations

import textwrap

import pytest

from fleet.core import unparsedgraph
from fleet.core.graph import build_graph
from fleet.core.suite import read_toml


def said(text: str) -> list[str]:
    """Every problem with the suite `text` (file s.toml), the graph's too, as printed."""
    reading = read_toml(textwrap.dedent(text), "s.toml")
    later = build_graph(reading.suite.steps, known_done=reading.unparsed)[1]  # (as fleet.control.checks does)
    later += unparsedgraph.problems("s.toml", reading.partial, reading.suite.steps, reading.unparsed)
    return [str(p) for p in reading.merged(later)]


def test_an_output_inside_another_steps_output_is_refused_naming_both_steps():
    assert said("""
        [[steps]]
        id = "a"
        command = "echo a > ../../d"
        outputs = ["d"]
        [[steps]]
        id = "b"
        command = "echo b > ../../d/x/y"
        outputs = ["./d/x/y"]
        deps = ["a"]
        """) == ["s.toml: step 'b': field 'outputs': './d/x/y' is inside 'd', an output of step 'a': an output is a "
                 "file, so no other step's path can be inside it"]


def test_an_output_inside_a_later_steps_output_is_refused_too_in_setup_order():
    assert said("""
        [[steps]]
        id = "b"
        command = "true"
        outputs = ["d/x"]
        [[steps]]
        id = "a"
        command = "true"
        outputs = ["d"]
        [[steps]]
        id = "c"
        command = "true"
        """) == ["s.toml: step 'b': field 'outputs': 'd/x' is inside 'd', an output of step 'a': an output is a "
                 "file, so no other step's path can be inside it"]


def test_a_workdir_on_or_inside_another_steps_output_is_refused():
    assert said("""
        [[steps]]
        id = "a"
        command = "true"
        outputs = ["d", "e"]
        [[steps]]
        id = "w"
        command = "true"
        workdir = "d"
        [[steps]]
        id = "v"
        command = "true"
        workdir = "e/sub"
        """) == ["s.toml: step 'w': field 'workdir': 'd' is an output of step 'a': an output is a file, and a "
                 "workdir a directory",
                 "s.toml: step 'v': field 'workdir': 'e/sub' is inside 'e', an output of step 'a': an output is a "
                 "file, and a workdir a directory"]


def test_outputs_side_by_side_in_one_directory_and_a_steps_own_nested_outputs_are_fine():
    assert said("""
        [[steps]]
        id = "a"
        command = "true"
        outputs = ["d/x", "d/y", "e", "e/f"]
        workdir = "e/w"
        [[steps]]
        id = "b"
        command = "true"
        outputs = ["d/z", "dd/x", "steps/b/own"]
        inputs = ["e/f"]
        """) == []


@pytest.mark.parametrize("path,what", [
    ("events.jsonl", "events.jsonl"), ("./coordinator.log", "coordinator.log"), ("fleet.json", "fleet.json"),
    ("fleet-node1-123.json", "fleet-node1-123.json"), ("shards.json", "shards.json"),
    ("agents/node1.log", "in agents/"), ("agents", "in agents/")])
def test_an_output_or_workdir_on_the_files_fleet_writes_at_the_top_of_the_run_directory_is_refused(path, what):
    why = (f"may not be {what}: fleet writes its own files at the top of the run directory (events.jsonl, "
           f"coordinator.log, fleet.json and fleet-*.json, shards.json, agents/), got {path!r}")
    assert said(f"""
        [[steps]]
        id = "a"
        command = "true"
        outputs = ["{path}"]
        [[steps]]
        id = "w"
        command = "true"
        workdir = "{path}"
        """) == [f"s.toml: step 'a': field 'outputs': {why}", f"s.toml: step 'w': field 'workdir': {why}"]


def test_reading_the_files_fleet_writes_is_no_problem_of_the_suite():
    reading = read_toml(textwrap.dedent("""
        [[steps]]
        id = "a"
        command = "true"
        outputs = ["out/events.jsonl", "coordinator.log.txt", "fleet-results.csv", "my-fleet.json", "agents.txt",
                   "data/agents/x"]
        inputs = ["events.jsonl", "agents/launcher.log"]
        workdir = "work/agents"
        """), "s.toml")
    assert reading.problems == ()
    assert reading.suite.steps[0].inputs == ("events.jsonl", "agents/launcher.log")


def test_min_cores_on_an_mpi_step_is_refused_under_its_own_name():
    assert said("""
        [[steps]]
        id = "a"
        command = "hostname"
        mpi = true
        min_cores = 2
        [[steps]]
        id = "b"
        command = "hostname"
        mpi = true
        cores = 4
        min_cores = 2
        """) == ["s.toml: step 'a': field 'min_cores': an MPI step declares ranks and threads, not min_cores",
                 "s.toml: step 'b': field 'cores': an MPI step declares ranks and threads, not cores",
                 "s.toml: step 'b': field 'min_cores': an MPI step declares ranks and threads, not min_cores"]


def test_a_step_defined_twice_identically_with_nan_in_its_args_is_one_step():
    reading = read_toml(textwrap.dedent("""
        [[steps]]
        id = "a"
        call = "m:f"
        args = { x = nan, y = [1, nan], z = { w = -nan } }
        [[steps]]
        id = "a"
        call = "m:f"
        args = { x = nan, y = [1, nan], z = { w = -nan } }
        """), "s.toml")
    assert reading.problems == ()
    assert [s.id for s in reading.suite.steps] == ["a"]


def test_a_step_defined_twice_with_different_args_is_still_refused():
    assert said("""
        [[steps]]
        id = "a"
        call = "m:f"
        args = { x = nan }
        [[steps]]
        id = "a"
        call = "m:f"
        args = { x = 1.0 }
        """) == ["s.toml: step 'a': field 'args': defined twice differently (fields differ: args)"]


def test_a_memory_size_too_large_for_any_number_is_a_problem_naming_the_step_and_field():
    huge = "1" + "0" * 400 + "T"
    assert said(f"""
        [[steps]]
        id = "a"
        command = "true"
        memory = "{huge}"
        [[steps]]
        id = "b"
        command = "true"
        memory = "8388608T"
        [[steps]]
        id = "c"
        command = "true"
        memory = "8388607T"
        """) == [f"s.toml: step 'a': field 'memory': a size too large: more than 2**63-1 bytes (8EiB), got "
                 f"{huge[:60]!r}... (402 characters)",
                 "s.toml: step 'b': field 'memory': a size too large: more than 2**63-1 bytes (8EiB), got '8388608T'"]


def test_an_output_that_is_a_steps_directory_is_said_once_not_again_for_what_is_inside_it():
    assert said("""
        [[steps]]
        id = "a"
        command = "true"
        outputs = ["steps/b", "steps/a/x"]
        [[steps]]
        id = "b"
        command = "true"
        outputs = ["steps/b/y", "steps/a/x/z", "abcdefb/q"]
        [[steps]]
        id = "c"
        command = "true"
        outputs = ["abcdefb"]
        """) == ["s.toml: step 'a': field 'outputs': 'steps/b' is steps/b, the directory of step 'b', which holds its "
                 "log and records: an output is a file of its own; put it elsewhere (or inside its step's directory)",
                 "s.toml: step 'b': field 'outputs': 'steps/a/x/z' is inside 'steps/a/x', an output of step 'a': an "
                 "output is a file, so no other step's path can be inside it",
                 "s.toml: step 'b': field 'outputs': 'abcdefb/q' is inside 'abcdefb', an output of step 'c': an "
                 "output is a file, so no other step's path can be inside it"]


def test_a_graph_problem_that_a_value_from_defaults_takes_part_in_says_so():
    assert said("""
        [defaults]
        outputs = ["o.txt"]
        deps = ["mesh"]
        [[steps]]
        id = "a"
        command = "true"
        [[steps]]
        id = "b"
        command = "true"
        [[steps]]
        id = "c"
        command = "true"
        outputs = ["o.txt"]
        deps = ["a"]
        """) == ["s.toml: step 'a': field 'deps': 'mesh' names no step (from [defaults])",
                 "s.toml: step 'b': field 'outputs': 'o.txt' is also produced by step 'a' (from [defaults])",
                 "s.toml: step 'b': field 'deps': 'mesh' names no step (from [defaults])",
                 "s.toml: step 'c': field 'outputs': 'o.txt' is also produced by step 'a'"]


def test_an_array_from_defaults_on_a_step_without_i_in_its_id_says_where_the_array_came_from():
    assert said("""
        [defaults]
        array = "0-2"
        outputs = ["o.txt"]
        [[steps]]
        id = "b"
        command = "true"
        [[steps]]
        id = "c/{i}"
        command = "true"
        """) == ["s.toml: step 'b': field 'id': an array step's id must contain {i} (array from [defaults])",
                 "s.toml: step 'c/{i}': field 'outputs': 'o.txt' has no {i}: all 3 steps of the array would produce "
                 "it, and at most one step may produce a path (outputs, array from [defaults])"]


def test_a_field_problem_does_not_hide_the_same_steps_workdir_on_another_steps_log():
    assert said("""
        [[steps]]
        id = "plot"
        command = "true"
        [[steps]]
        id = "w"
        command = "true"
        workdir = "steps/plot/log/x"
        outputs = [".fleet/x", "steps/plot"]
        [[steps]]
        id = "plot/log"
        command = "true"
        cores = 0
        """) == ["s.toml: step 'w': field 'outputs': may not be in a .fleet directory (the fleet's own records), "
                 "got '.fleet/x'",
                 "s.toml: step 'w': field 'outputs': 'steps/plot' is steps/plot, the directory of step 'plot', which "
                 "holds its log and records: an output is a file of its own; put it elsewhere (or inside its step's "
                 "directory)",
                 "s.toml: step 'w': field 'workdir': 'steps/plot/log/x' is, or is inside, steps/plot/log, the log "
                 "file of step 'plot': a workdir is a directory",
                 "s.toml: step 'plot/log': field 'cores': expected an integer at least 1, got 0",
                 "s.toml: step 'plot/log': field 'id': its directory steps/plot/log would be steps/plot/log, the log "
                 "file of step 'plot': give it another name (a step's directory holds its log, named 'log')"]
