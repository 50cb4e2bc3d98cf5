"""An absolute input that points inside the run directory names the file a step's
output there is: it is matched to the step that produces it (a dependency, as for a
relative input), not looked for on disk before the run. Real suite files and run
directories; the `fleet` command for what a user sees."""

from __future__ import annotations

import os

import pytest
from fleetharness import fleet, write_suite

from fleet.control.checks import checked_suite
from fleet.core.problems import SuiteError


def suite_reading(tmp_path, path: str, name: str = "norm"):
    return write_suite(tmp_path / f"{name}.toml", f'''[suite]
name = "{name}"
run_dir = "runs/{name}"
[[steps]]
id = "p3"
command = "echo b > ../../res/b.txt"
outputs = ["res/b.txt"]
[[steps]]
id = "c3"
command = "cat {path}"
inputs = ["{path}"]
''')


def test_an_absolute_input_inside_the_run_directory_depends_on_the_step_that_produces_it(tmp_path):
    absolute = tmp_path / "runs" / "norm" / "res" / "b.txt"
    suite = suite_reading(tmp_path, str(absolute))
    _, graph = checked_suite(suite)
    assert graph.deps["c3"] == ("p3",)
    r = fleet("validate", str(suite), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # The dependency is named by the input it comes from, as a relative input's is.
    r = fleet("run", str(suite), "--only", "c3", cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"step 'c3': field 'inputs': '{absolute}' is an output of 'p3', which is not selected" in r.stderr
    r = fleet("run", str(suite), cwd=tmp_path, timeout=90)  # c3 reads what p3 wrote: after it
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_absolute_input_through_a_symbolic_link_to_the_run_directory_is_matched_too(tmp_path):
    (tmp_path / "runs").mkdir()
    os.symlink(tmp_path / "runs", tmp_path / "link")
    suite = suite_reading(tmp_path, str(tmp_path / "link" / "norm" / "./res//b.txt"))
    _, graph = checked_suite(suite)
    assert graph.deps["c3"] == ("p3",)


def test_an_absolute_input_outside_the_run_directory_is_still_looked_for_on_disk(tmp_path):
    outside = tmp_path / "runs" / "normal" / "res" / "b.txt"  # (a sibling whose name begins alike)
    suite = suite_reading(tmp_path, str(outside))
    with pytest.raises(SuiteError) as e:
        checked_suite(suite)
    assert [str(p).split(": ", 1)[1] for p in e.value.problems] == [
        f"step 'c3': field 'inputs': '{outside}' is produced by no step and does not exist"]
