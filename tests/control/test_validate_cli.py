"""Bad input through the real `fleet` command: refused before anything runs, exit 2,
every problem at once naming file, step and field; and `fleet validate --imports`."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleetharness import env, fleet, records, write_suite

from fleet.node.probe import usable_cores
from fleet.wire import events as E

EXIT_INVALID = 2


def refused(r: subprocess.CompletedProcess, count: int) -> list[str]:
    """The error lines of a refusal, after checking its exit code and last line."""
    assert r.returncode == EXIT_INVALID, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1] == f"{count} problem{'s' if count != 1 else ''} found; nothing was started", r.stderr
    errors = lines[:-1]
    assert len(errors) == count and all(e.startswith("error: ") for e in errors), r.stderr
    return [e[len("error: "):] for e in errors]


def test_step_ids_workdirs_outputs_and_inputs_that_leave_the_run_directory_are_refused(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "paths"
[[steps]]
id = "../escape"
command = "true"
[[steps]]
id = "a//b"
command = "true"
[[steps]]
id = "x/.fleet"
command = "true"
[[steps]]
id = "w"
command = "true"
workdir = "/tmp"
[[steps]]
id = "o"
command = "true"
outputs = ["fine.nc", "../../etc/out.nc"]
[[steps]]
id = "i"
command = "true"
inputs = ["/an/absolute/dataset/is/fine/when/it/exists", "../outside.nc"]
""")
    for command in ("validate", "run"):
        errors = refused(fleet(command, str(suite), cwd=tmp_path, timeout=60), 6)
        assert [e.split(": ")[1:3] for e in errors] == [
            ["step '../escape'", "field 'id'"], ["step 'a//b'", "field 'id'"], ["step 'x/.fleet'", "field 'id'"],
            ["step 'w'", "field 'workdir'"], ["step 'o'", "field 'outputs'"], ["step 'i'", "field 'inputs'"]]
        assert all(e.startswith(f"{suite}: ") for e in errors)
    assert not (tmp_path / "runs").exists(), "nothing may start, not even the run directory"


def test_validate_counts_one_step_in_the_singular_and_more_in_the_plural(tmp_path):
    for count, said in ((1, "1 step,"), (2, "2 steps,")):
        suite = write_suite(tmp_path / f"s{count}.toml", "".join(
            f'[[steps]]\nid = "a{i}"\ncommand = "true"\n' for i in range(count)))
        r = fleet("validate", str(suite), cwd=tmp_path, timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"is valid: {said} run dir" in r.stdout, r.stdout


def test_a_suite_name_that_would_put_the_run_dir_elsewhere_is_refused_but_a_run_dir_may_be_anywhere(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "../../elsewhere"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    (error,) = refused(fleet("validate", str(suite), cwd=tmp_path, timeout=60), 1)
    assert error.startswith(f"{suite}: field 'suite.name': ")
    write_suite(suite, '[suite]\nname = "ok"\nrun_dir = "../../elsewhere"\n[[steps]]\nid = "a"\ncommand = "true"\n')
    r = fleet("validate", str(suite), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"run dir {(tmp_path / '../../elsewhere').resolve()}" in r.stdout


def _fleet_with_memory_limit(*args: str, cwd: Path, limit: int, timeout: float = 60.0):
    """`fleet ARGS` as fleetharness.fleet runs it, with its address space capped."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    p = subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=cwd, env=env(), preexec_fn=cap,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"fleet {' '.join(args)} timed out\nstderr:\n{err}")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_an_array_of_a_hundred_million_steps_is_refused_in_little_memory(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[[steps]]
id = "case/{i}"
array = "0-99999999"
command = "true"
""")
    for command in ("validate", "run"):
        r = _fleet_with_memory_limit(command, str(suite), cwd=tmp_path, limit=1 << 30)
        (error,) = refused(r, 1)
        assert error.startswith(f"{suite}: step 'case/{{i}}': field 'array': '0-99999999' declares 100000000 steps")
        assert "max_steps" in error
    assert not (tmp_path / "runs").exists()


def test_max_steps_in_the_suite_table_sets_the_limit(tmp_path):
    text = '[suite]\nmax_steps = {}\n[[steps]]\nid = "c/{{i}}"\narray = "1-20"\ncommand = "true"\n'
    suite = write_suite(tmp_path / "s.toml", text.format(19))
    (error,) = refused(fleet("validate", str(suite), cwd=tmp_path, timeout=60), 1)
    assert "declares 20 steps, more than the 19" in error
    write_suite(suite, text.format(20))
    r = fleet("validate", str(suite), cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and "20 steps" in r.stdout, r.stderr


def test_an_mpi_call_step_is_refused_by_validate_and_run_before_a_fleet_starts(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
run_dir = "run"
[[steps]]
id = "m"
call = "steps:record"
mpi = true
ranks = 2
""")
    for command in ("validate", "run"):
        (error,) = refused(fleet(command, str(suite), cwd=tmp_path, timeout=60), 1)
        assert error.startswith(f"{suite}: step 'm': field 'mpi': ")
    assert not (tmp_path / "run").exists()


def test_with_no_fleet_up_run_refuses_what_the_embedded_fleet_would_before_it_starts_one(tmp_path):
    # A step no node of the machine can hold, an input that does not exist, and an
    # unselected dependency (through inputs): a fleet's to refuse once it has its nodes
    # and run directory; without one, fleet run knows both before it starts it.
    steps = '''
[suite]
run_dir = "run"
[[steps]]
id = "a"
command = "echo a > a.txt"
outputs = ["steps/a/a.txt"]
[[steps]]
id = "b"
command = "cat ../a/a.txt"
inputs = ["steps/a/a.txt"]
'''
    suite = write_suite(tmp_path / "s.toml", steps + f"""
[[steps]]
id = "wide"
command = "true"
cores = {len(usable_cores()) + 1}
[[steps]]
id = "reads"
command = "true"
inputs = ["absent.txt"]
""")
    run = tmp_path / "run"
    r = fleet("run", str(suite), cwd=tmp_path, timeout=60)
    errors = refused(r, 2)
    assert [e.split(": ")[1:3] for e in errors] == [["step 'wide'", "field 'cores'"], ["step 'reads'", "field 'inputs'"]]
    assert "can never run on this allocation" in errors[0] and "does not exist in " + str(run) in errors[1]
    assert "starting an embedded fleet" not in r.stderr
    assert not run.exists(), "nothing may start, not even the run directory"
    chain = write_suite(tmp_path / "chain.toml", steps)
    r = fleet("run", str(chain), "--only", "b", cwd=tmp_path, timeout=60)
    (error,) = refused(r, 1)
    assert error.startswith(f"{chain}: step 'b': field 'inputs': 'steps/a/a.txt' is an output of 'a', which is not "
                            f"selected and has not succeeded in {run}"), error
    assert "starting an embedded fleet" not in r.stderr and not run.exists()
    # More pretend nodes than this machine has cores: a usage error, before anything starts.
    r = fleet("run", str(chain), "--nodes", str(len(usable_cores()) + 1), cwd=tmp_path, timeout=60)
    assert r.returncode == EXIT_INVALID and "cannot split" in r.stderr, r.stderr
    assert not run.exists()


def test_with_no_fleet_up_a_shard_count_other_than_the_recorded_one_is_refused_and_nothing_written(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\nrun_dir = "run"\n[[steps]]\nid = "s/{i}"\narray = "0-5"\n'
                                             'command = "true"\n')
    run = tmp_path / "run"
    run.mkdir()
    (run / "shards.json").write_text(json.dumps({"shards": 2, "generation": 1}))
    (error,) = refused(fleet("run", str(suite), "--shard", "0/3", cwd=tmp_path, timeout=60), 1)
    assert "split 2 ways" in error and "--new-generation" in error
    assert sorted(p.name for p in run.iterdir()) == ["shards.json"]
    assert json.loads((run / "shards.json").read_text()) == {"shards": 2, "generation": 1}


@pytest.mark.skipif(len(usable_cores()) < 2, reason="needs two usable cores")
def test_the_fit_is_checked_on_the_embedded_fleets_nodes_this_machines_cores_split_by_nodes(tmp_path):
    suite = write_suite(tmp_path / "s.toml", f'[suite]\nrun_dir = "run"\n[[steps]]\nid = "all"\n'
                                             f'command = "true"\ncores = {len(usable_cores())}\n')
    (error,) = refused(fleet("run", str(suite), "--nodes", "2", cwd=tmp_path, timeout=60), 1)
    assert error.startswith(f"{suite}: step 'all': field 'cores': can never run on this allocation"), error
    assert not (tmp_path / "run").exists()
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [e.step for e in records(tmp_path / "run") if isinstance(e, E.Exit)] == ["all"]


def test_an_mpi_step_whose_threads_no_node_holds_is_refused_under_threads_naming_the_largest_node(tmp_path):
    suite = write_suite(tmp_path / "th.toml", '[suite]\nrun_dir = "run"\n[[steps]]\nid = "a"\ncommand = "true"\n'
                                              'mpi = true\nranks = 1\nthreads = 3\n')
    (error,) = refused(fleet("validate", str(suite), "--nodes", "4", "--cores-per-node", "2",
                             cwd=tmp_path, timeout=60), 1)
    assert error == (f"{suite}: step 'a': field 'threads': can never run on this allocation: "
                     "a rank needs 3 cores on one node; the largest node has 2")


def test_every_problem_comes_at_once_field_and_graph_problems_in_setup_order(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
run_dir = "run"
[[steps]]
id = "a"
command = "true"
deps = ["b"]
[[steps]]
id = "typo"
command = "true"
cores = "two"
[[steps]]
id = "b"
command = "true"
deps = ["a"]
[[steps]]
id = "c"
command = "true"
deps = ["ghost"]
inputs = ["never-made.nc"]
[[steps]]
id = "d"
command = "true"
outputs = ["same.nc"]
[[steps]]
id = "e"
command = "true"
outputs = ["same.nc"]
[[steps]]
id = "f"
command = "true"
memory = "lots"
""")
    errors = refused(fleet("validate", str(suite), cwd=tmp_path, timeout=60), 6)
    f = str(suite)
    assert errors == [
        f"{f}: step 'a': field 'deps': dependency cycle through steps a -> b -> a",
        f"{f}: step 'typo': field 'cores': expected an integer, got 'two'",
        f"{f}: step 'c': field 'deps': 'ghost' names no step",
        f"{f}: step 'c': field 'inputs': 'never-made.nc' is produced by no step and does not exist in "
        f"{tmp_path / 'run'}",
        f"{f}: step 'e': field 'outputs': 'same.nc' is also produced by step 'd'",
        f"{f}: step 'f': field 'memory': expected a size such as \"4GiB\", \"512MB\" or a number of bytes, got 'lots'",
    ]


def test_a_step_with_a_field_problem_still_has_its_own_unknown_deps_and_shared_outputs_said(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
run_dir = "run"
[[steps]]
id = "a"
command = "true"
outputs = ["x.nc"]
[[steps]]
id = "bad"
command = "true"
cores = "two"
deps = ["ghost", "a", "worse"]
outputs = ["x.nc", "../out.nc", "y.nc"]
[[steps]]
id = "worse"
command = 3
outputs = ["./y.nc"]
[[steps]]
id = "arr/{i}"
array = "1-3"
command = "true"
cores = 0
deps = ["phantom"]
""")
    errors = refused(fleet("validate", str(suite), cwd=tmp_path, timeout=60), 8)
    f = str(suite)
    assert [e for e in errors if "field 'deps'" in e or "also produced" in e] == [
        # (a dep on "worse", itself unread, is no problem: its own are said)
        f"{f}: step 'bad': field 'deps': 'ghost' names no step",
        f"{f}: step 'bad': field 'outputs': 'x.nc' is also produced by step 'a'",
        f"{f}: step 'worse': field 'outputs': './y.nc' is also produced by step 'bad'",
        f"{f}: step 'arr/1': field 'deps': 'phantom' names no step",
    ]
    assert errors[0].startswith(f"{f}: step 'bad': field 'cores'") and errors[1].startswith(f"{f}: step 'bad': field 'outputs'")


def test_an_args_value_that_is_exactly_i_is_the_integer_index_in_a_real_run(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
run_dir = "run"
[[steps]]
id = "rec/{i}"
array = "2-3"
call = "steps:record"
args = { n = "{i}", label = "case {i}", nested = ["{i}", "x{i}"] }
""")
    r = fleet("run", str(suite), cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    for i in (2, 3):
        seen = json.loads((tmp_path / f"run/steps/rec/{i}/record.json").read_text())["args"]
        assert seen == {"n": i, "label": f"case {i}", "nested": [i, f"x{i}"]}


# --- fleet validate --imports --------------------------------------------------------------------

MODULES = {
    "good_steps.py": "import os\nprint('chatty on import')\n"
                     "open(os.environ['IMPORT_LOG'], 'a').write(f'{os.getpid()}\\n')\n"
                     "def run(ctx):\n    pass\nNOT_CALLABLE = 3\n",
    "broken_steps.py": "import os\nopen(os.environ['IMPORT_LOG'], 'a').write(f'{os.getpid()}\\n')\n"
                       "raise RuntimeError('this module is broken')\n",
    "needs_missing.py": "import no_such_dependency_xyz\n",
}

IMPORTS_SUITE = """
[suite]
run_dir = "run"
[[steps]]
id = "ok"
call = "good_steps:run"
[[steps]]
id = "nofunc"
call = "good_steps:walk"
[[steps]]
id = "notcallable"
call = "good_steps:NOT_CALLABLE"
[[steps]]
id = "nomod/{i}"
array = "1-3"
call = "no_such_module_xyz.sub:run"
[[steps]]
id = "broken"
call = "broken_steps:run"
[[steps]]
id = "dep"
call = "needs_missing:run"
[[steps]]
id = "cmd"
command = "true"
"""


def test_validate_imports_reports_missing_modules_and_functions_by_step_and_field(tmp_path, monkeypatch):
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    log = tmp_path / "imports.log"
    monkeypatch.setenv("IMPORT_LOG", str(log))
    suite = write_suite(tmp_path / "s.toml", IMPORTS_SUITE)
    # Without --imports nothing is imported: the suite is well formed.
    r = fleet("validate", str(suite), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not log.exists()
    errors = refused(fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120), 5)
    f = str(suite)
    assert errors == [
        f"{f}: step 'nofunc': field 'call': module 'good_steps' has no function 'walk'",
        f"{f}: step 'notcallable': field 'call': module 'good_steps' has no function 'NOT_CALLABLE'",
        f"{f}: step 'nomod/1': field 'call': module 'no_such_module_xyz.sub' not found (and in 2 more steps)",
        f"{f}: step 'broken': field 'call': module 'broken_steps' cannot be imported: "
        "RuntimeError: this module is broken",
        f"{f}: step 'dep': field 'call': module 'needs_missing' cannot be imported: "
        "ModuleNotFoundError: No module named 'no_such_dependency_xyz'",
    ]
    # Each module once, all in one child process (not the validating one: it exited 2 cleanly).
    pids = log.read_text().split()
    assert len(pids) == 2 and len(set(pids)) == 1


def test_validate_imports_accepts_a_suite_whose_call_targets_all_import(tmp_path):
    (tmp_path / "good_steps.py").write_text("def run(ctx):\n    pass\n")
    suite = write_suite(tmp_path / "s.toml", '[[steps]]\nid = "a/{i}"\narray = "0-9"\ncall = "good_steps:run"\n'
                        '[[steps]]\nid = "b"\ncall = "steps:record"\n')
    r = fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "11 steps" in r.stdout


def test_validate_imports_refuses_a_generator_function_as_a_call_step_and_accepts_an_async_def(tmp_path):
    # A generator's body never runs when it is called (fleet.node.stepend): before 2026-12-06
    # --imports called such a step valid, and it "succeeded" having done nothing.
    suite = write_suite(tmp_path / "s.toml", '[[steps]]\nid = "g"\ncall = "ending_steps:generator"\n'
                        '[[steps]]\nid = "ag"\ncall = "ending_steps:async_generator"\n'
                        '[[steps]]\nid = "co"\ncall = "ending_steps:coroutine"\n')
    errors = refused(fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120), 2)
    assert errors == [
        f"{suite}: step 'g': field 'call': ending_steps:generator is a generator function (it yields): calling it "
        "runs none of its body; a call step's function must return (a plain def, or an async def that returns), "
        "not yield",
        f"{suite}: step 'ag': field 'call': ending_steps:async_generator is an async generator function (it yields): "
        "calling it runs none of its body; a call step's function must return (a plain def, or an async def that "
        "returns), not yield"]


def test_a_nul_in_a_command_an_env_value_or_a_path_is_refused_naming_file_step_and_field(tmp_path):
    # Before 2026-12-06 these passed validation and failed when they ran ("embedded null byte").
    suite = write_suite(tmp_path / "s.toml", '[[steps]]\nid = "argv"\ncommand = ["echo", "a\\u0000b"]\n'
                        '[[steps]]\nid = "sh"\ncommand = "echo \\u0000"\nworkdir = "w\\u0000"\n'
                        '[[steps]]\nid = "env"\ncommand = "true"\nenv = { X = "1\\u0000" }\n')
    errors = refused(fleet("validate", str(suite), cwd=tmp_path, timeout=60), 4)
    assert errors == [
        f"{suite}: step 'argv': field 'command': command[1] holds a NUL character (\\u0000), which no command, "
        "environment variable or file name can: 'a\\x00b'",
        f"{suite}: step 'sh': field 'command': the command holds a NUL character (\\u0000), which no command, "
        "environment variable or file name can: 'echo \\x00'",
        f"{suite}: step 'sh': field 'workdir': the path holds a NUL character (\\u0000), which no command, "
        "environment variable or file name can: 'w\\x00'",
        f"{suite}: step 'env': field 'env': X: its value holds a NUL character (\\u0000), which no environment "
        "variable can: '1\\x00'"]


def test_validate_imports_imports_the_preload_modules_as_a_zygote_and_reports_them_under_suite_preload(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\npreload = ["json", "preload_starts_thread", '
                        '"no_such_module_xyz", "preload_fails"]\n[[steps]]\nid = "a"\ncall = "json:dumps"\n'
                        'args = { obj = 1 }\n')  # (json.dumps needs its obj: args are checked too)
    # Without --imports the preload is not imported: the suite is well formed.
    r = fleet("validate", str(suite), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    errors = refused(fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120), 3)
    f = str(suite)
    assert errors == [
        f"{f}: field 'suite.preload': module 'preload_starts_thread' starts a thread when imported "
        "(2 threads after importing it); a zygote forks, which needs exactly 1",
        f"{f}: field 'suite.preload': module 'no_such_module_xyz' not found",
        f"{f}: field 'suite.preload': module 'preload_fails' cannot be imported: "
        "RuntimeError: this module cannot be imported"]


def test_validate_imports_pins_the_thread_pools_as_a_zygote_does_so_numpy_may_be_preloaded(tmp_path):
    pytest.importorskip("numpy")
    count = "import numpy; print(open('/proc/self/status').read().split('Threads:')[1].split()[0])"
    unpinned = {k: v for k, v in env().items() if not k.endswith("_THREADS")}
    r = subprocess.run([sys.executable, "-c", count], env=unpinned, capture_output=True, text=True, timeout=60)
    if r.stdout.strip() == "1":
        pytest.skip("numpy starts no thread pool here: nothing to tell apart")
    suite = write_suite(tmp_path / "s.toml", '[suite]\npreload = ["numpy"]\n[[steps]]\nid = "a"\ncommand = "true"\n')
    r = fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120)  # OpenBLAS would start its pool
    assert r.returncode == 0 and "is valid: 1 step," in r.stdout, r.stdout + r.stderr


def test_validate_imports_reports_field_problems_and_import_problems_together(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[[steps]]\nid = "a"\ncall = "no_such_module_xyz:run"\n'
                        '[[steps]]\nid = "b"\ncommand = "true"\npriority = 0\n')
    errors = refused(fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120), 2)
    assert [e.split(": ")[1:3] for e in errors] == [["step 'a'", "field 'call'"], ["step 'b'", "field 'priority'"]]


# --- option values that make no sense --------------------------------------------------------------

@pytest.mark.parametrize("args,option", [
    (("status", "--interval", "-1"), "--interval"),
    (("status", "--interval", "0"), "--interval"),
    (("up", "--local", "--timeout", "-5"), "--timeout"),
    (("up", "--local", "--timeout", "0"), "--timeout"),
    (("up", "--local", "--nodes", "0"), "--nodes"),
    (("up", "--local", "--heartbeat", "0"), "--heartbeat"),
    (("up", "--local", "--heartbeat-timeout", "0"), "--heartbeat-timeout"),
    (("run", "s.toml", "--nodes", "0"), "--nodes"),
    (("run", "s.toml", "--stale-after", "-1"), "--stale-after"),
    (("run", "s.toml", "--max-attempts", "-1"), "--max-attempts"),
    (("run", "s.toml", "--heartbeat", "-1"), "--heartbeat"),
    (("validate", "s.toml", "--nodes", "0", "--cores-per-node", "1"), "--nodes"),
    (("validate", "s.toml", "--nodes", "1", "--cores-per-node", "0"), "--cores-per-node"),
    (("validate", "s.toml", "--nodes", "1", "--cores-per-node", "1", "--gpus-per-node", "-1"), "--gpus-per-node"),
    (("simulate", "s.toml", "--nodes", "-2", "--cores-per-node", "1"), "--nodes"),
    (("audit", ".", "--stale-after", "-5"), "--stale-after"),
    (("report", ".", "--session", "0"), "--session"),
])
def test_a_numeric_option_out_of_its_range_is_refused_before_anything_starts(tmp_path, args, option):
    write_suite(tmp_path / "s.toml", '[[steps]]\nid = "a"\ncommand = "true"\n')
    r = fleet(*args, "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=60) if args[0] in ("up", "status") \
        else fleet(*args, cwd=tmp_path, timeout=60)
    assert r.returncode == EXIT_INVALID, r.stdout + r.stderr
    assert f"Invalid value for '{option}'" in r.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()


def test_a_shard_of_a_suite_whose_task_is_a_digit_python_cannot_read_as_a_number_runs_instead_of_failing(tmp_path):
    # ("²".isdigit() but int("²") fails: `fleet run --shard` said only "invalid literal for int()")
    from fleet.control.shard import owner
    assert owner("12", 5) == 2 and owner("١٢", 5) == 2  # (digits int() reads: owners as before)
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "uni"\n[[steps]]\nid = "a"\ntask = "²"\ncommand = "true"\n'
                     '[[steps]]\nid = "b"\ntask = "7"\ncommand = "true"\n')
    ran = []
    for i in (0, 1):
        r = fleet("run", str(suite), "--shard", f"{i}/2", "--run-dir", str(tmp_path / "run"), cwd=tmp_path,
                  timeout=120)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
        ran += [s for s in "ab" if f"succeeded  {s}" in r.stdout]
    assert sorted(ran) == ["a", "b"], ran


def test_a_mistake_in_an_array_table_is_one_line_for_the_table_not_one_per_step(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "a"
[[steps]]
id = "h/{i}"
array = "0-99999"
command = "true"
cores = 0
[[steps]]
id = "f/{i}"
array = "1-1000"
command = "true"
outputs = ["out.nc"]
""")
    for command in ("validate", "run"):
        errors = refused(fleet(command, str(suite), cwd=tmp_path, timeout=120), 2)
        assert errors == [
            f"{suite}: step 'h/{{i}}': field 'cores': expected an integer at least 1, got 0 "
            f"(in all 100000 steps of the array)",
            f"{suite}: step 'f/{{i}}': field 'outputs': 'out.nc' has no {{i}}: all 1000 steps of the array would "
            f"produce it, and at most one step may produce a path"]
    assert not (tmp_path / "runs").exists()


def test_a_fit_problem_naming_a_node_s_memory_or_gpus_not_given_says_what_was_assumed_and_the_option(tmp_path):
    suite = write_suite(tmp_path / "adm.toml", '[suite]\nrun_dir = "run"\n[[steps]]\nid = "big"\ncommand = "true"\n'
                                               'memory = "20GiB"\n[[steps]]\nid = "g"\ncommand = "true"\ngpus = 1\n')
    alloc = ("--nodes", "1", "--cores-per-node", "2")
    big, g = refused(fleet("validate", str(suite), *alloc, cwd=tmp_path, timeout=60), 2)
    assert big.endswith("no node has 20GiB of memory (the step may not span nodes); "
                        "assumed 4GiB per core, 8GiB a node: give --memory-per-node"), big
    assert g.endswith("no node has 1 GPU (the step may not span nodes); assumed no GPUs: give --gpus-per-node"), g
    # Given, nothing is assumed: the problem alone.
    big, g = refused(fleet("validate", str(suite), *alloc, "--memory-per-node", "16GiB", "--gpus-per-node", "0",
                           cwd=tmp_path, timeout=60), 2)
    assert big.endswith("no node has 20GiB of memory (the step may not span nodes)") and g.endswith("(the step may not span nodes)")
    (big,) = refused(fleet("simulate", str(suite), *alloc, "--gpus-per-node", "1", cwd=tmp_path, timeout=60), 1)
    assert big.endswith("8GiB a node: give --memory-per-node"), big


def test_an_output_that_is_another_steps_directory_is_refused_by_validate_naming_file_step_and_field(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "s"\n[[steps]]\nid = "a"\ncommand = "echo data > ../b"\n'
                        'outputs = ["steps/b"]\n[[steps]]\nid = "b"\ncommand = "echo hi"\ndeps = ["a"]\n')
    (error,) = refused(fleet("validate", str(suite), cwd=tmp_path, timeout=60), 1)
    assert error == (f"{suite}: step 'a': field 'outputs': 'steps/b' is steps/b, the directory of step 'b', which "
                     f"holds its log and records: an output is a file of its own; put it elsewhere (or inside its "
                     f"step's directory)"), error
