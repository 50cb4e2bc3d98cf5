"""A step's directory (its id) or workdir on another step's log file, steps/<id>/log:
refused with the suite's problems and with a step's children (fleet.core.steppaths).
Before 2026-12-06 such a step passed validate and `fleet run` waited on it for good."""

from __future__ import annotations

from pathlib import Path

from fleet.core.childsteps import expand
from fleet.core.graph import build_graph
from fleet.core.suite import parse_suite


def problems(*steps: dict) -> list[str]:
    suite = parse_suite({"suite": {"name": "s"}, "steps": list(steps)}, Path("suite.toml"))
    return [str(p) for p in build_graph(suite.steps)[1]]


def test_a_step_named_after_another_steps_log_file_is_refused_naming_the_file_the_step_and_the_field():
    said = problems({"id": "plot", "command": "true"}, {"id": "plot/log", "command": "true"},
                    {"id": "plot/log/x", "command": "true"})
    assert said == [
        "suite.toml: step 'plot/log': field 'id': its directory steps/plot/log would be steps/plot/log, the log file "
        "of step 'plot': give it another name (a step's directory holds its log, named 'log')",
        "suite.toml: step 'plot/log/x': field 'id': its directory steps/plot/log/x would be inside steps/plot/log, the "
        "log file of step 'plot': give it another name (a step's directory holds its log, named 'log')"]


def test_a_log_part_that_is_no_steps_log_file_is_a_name_like_any_other():
    assert problems({"id": "log", "command": "true"}, {"id": "runs/log", "command": "true"},
                    {"id": "a/logs", "command": "true"}, {"id": "a", "command": "true"}) == []


def test_a_workdir_on_another_steps_log_file_is_refused():
    said = problems({"id": "plot", "command": "true"}, {"id": "b", "command": "true", "workdir": "./steps/plot/log"},
                    {"id": "c", "command": "true", "workdir": "steps/c"})
    assert said == ["suite.toml: step 'b': field 'workdir': './steps/plot/log' is, or is inside, steps/plot/log, "
                    "the log file of step 'plot': a workdir is a directory"]


def test_a_child_named_log_is_refused_where_it_is_submitted_naming_the_child_and_its_id():
    steps, said = expand("plot", [{"id": "lin", "command": "echo"}, {"id": "log", "command": "echo"}],
                         "plot: ctx.submit")
    assert [str(p) for p in said] == [
        "plot: ctx.submit: step 'plot/log': field 'id': its directory steps/plot/log would be steps/plot/log, the log "
        "file of step 'plot': give it another name (a step's directory holds its log, named 'log')"]


def test_a_child_inside_the_log_of_a_sibling_submitted_before_is_refused_too():
    _, said = expand("p", [{"id": "a/log/z", "command": "echo"}], "p: ctx.submit", siblings={"a"})
    assert [(p.step, p.field) for p in said] == [("p/a/log/z", "id")]
    _, said = expand("p", [{"id": "b/log", "command": "echo"}], "p: ctx.submit", siblings={"a"})
    assert said == []


def test_an_output_that_is_another_steps_directory_or_log_or_above_one_is_refused_naming_the_step_and_field():
    said = problems({"id": "a", "command": "true", "outputs": ["steps/b", "./steps/c/log", "steps/plot", "steps/a/x"]},
                    {"id": "b", "command": "true"}, {"id": "c", "command": "true"},
                    {"id": "plot/lin", "command": "true"}, {"id": "d", "command": "true", "outputs": ["steps"]})
    assert said == [
        "suite.toml: step 'a': field 'outputs': 'steps/b' is steps/b, the directory of step 'b', which holds its log "
        "and records: an output is a file of its own; put it elsewhere (or inside its step's directory)",
        "suite.toml: step 'a': field 'outputs': './steps/c/log' is steps/c/log, the log file of step 'c', which the "
        "fleet writes: an output is a file of its own; put it elsewhere (or inside its step's directory)",
        "suite.toml: step 'a': field 'outputs': 'steps/plot' is steps/plot, a directory that steps' own directories "
        "are in: an output is a file of its own; put it elsewhere (or inside its step's directory)",
        "suite.toml: step 'd': field 'outputs': 'steps' is steps, a directory that steps' own directories are in: an "
        "output is a file of its own; put it elsewhere"]


def test_an_output_inside_a_steps_directory_or_named_like_one_elsewhere_is_fine():
    assert problems({"id": "a", "command": "true", "outputs": ["steps/a/out.nc", "steps/b/extra", "steps/zz",
                                                                "data/steps/b", "steps/b/logs"]},
                    {"id": "b", "command": "true"}) == []
