"""`fleet validate --imports` checks a call step's `args` against its function, by the rule
the step's child applies before the call (fleet.node.child.call_arguments): before
2026-12-06 it said valid of a suite whose steps then failed with ArgumentMismatch."""

from __future__ import annotations

import functools
import shutil
import subprocess

from fleetharness import fleet, write_suite

from fleet.node.child import ArgumentMismatch, call_arguments

EXIT_INVALID = 2

ARGS_STEPS = """
import functools

def with_ctx(ctx, x=1):
    pass

def any_keywords(x, **more):
    pass

def only_ctx(ctx):
    pass

def two(x, y):
    pass

partial = functools.partial(two, 1)
"""

ARGS_SUITE = """
[suite]
run_dir = "run"
[[steps]]
id = "typo"
call = "shutil:copyfile"
args = { source = "a", dst = "b" }
[[steps]]
id = "short/{i}"
array = "0-4"
call = "shutil:copyfile"
args = { src = "a{i}" }
[[steps]]
id = "fine/{i}"
array = "0-4"
call = "shutil:copyfile"
args = { src = "a{i}", dst = "b{i}" }
[[steps]]
id = "ctx-arg"
call = "args_steps:with_ctx"
args = { ctx = 1 }
[[steps]]
id = "ctx-ok"
call = "args_steps:with_ctx"
args = { x = 2 }
[[steps]]
id = "keywords"
call = "args_steps:any_keywords"
args = { x = 1, anything = 2 }
[[steps]]
id = "keywords-short"
call = "args_steps:any_keywords"
args = { anything = 2 }
[[steps]]
id = "old-form"
call = "args_steps:only_ctx"
[[steps]]
id = "partial"
call = "args_steps:partial"
args = { y = 1 }
[[steps]]
id = "partial-typo"
call = "args_steps:partial"
args = { z = 1 }
"""


def refusals(r: subprocess.CompletedProcess, count: int) -> list[str]:
    assert r.returncode == EXIT_INVALID, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1] == f"{count} problems found; nothing was started", r.stderr
    return [line.removeprefix("error: ") for line in lines[:-1]]


def childs_refusal(func, target: str, args: dict) -> str:
    """What the step's child would fail with, before the call."""
    try:
        call_arguments(func, None, args, target)
    except ArgumentMismatch as e:
        return str(e)
    raise AssertionError(f"{target} takes {args}")


def test_validate_imports_refuses_args_a_call_step_s_function_does_not_take_as_its_child_would(tmp_path):
    (tmp_path / "args_steps.py").write_text(ARGS_STEPS)
    suite = write_suite(tmp_path / "s.toml", ARGS_SUITE)
    # Without --imports nothing is imported: the suite is well formed.
    assert fleet("validate", str(suite), cwd=tmp_path, timeout=60).returncode == 0
    errors = refusals(fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120), 5)
    two = functools.partial(lambda x, y: None, 1)
    assert errors == [
        f"{suite}: step 'typo': field 'args': "
        + childs_refusal(shutil.copyfile, "shutil:copyfile", {"source": "a", "dst": "b"}),
        f"{suite}: step 'short/0': field 'args': "
        + childs_refusal(shutil.copyfile, "shutil:copyfile", {"src": "a0"}) + " (and in 4 more steps)",
        f"{suite}: step 'ctx-arg': field 'args': args_steps:with_ctx: 'ctx' is the step context, not an argument; "
        "rename it in args",
        f"{suite}: step 'keywords-short': field 'args': args_steps:any_keywords needs 'x': add it to the step's args",
        f"{suite}: step 'partial-typo': field 'args': " + childs_refusal(two, "args_steps:partial", {"z": 1}),
    ]
    assert errors[0].endswith("shutil:copyfile has no parameter 'source' (it takes src, dst, follow_symlinks)")


COUNTED_STEPS = """
import os

class Counted:
    # A callable whose signature is read through __signature__: each read is logged.
    @property
    def __signature__(self):
        with open(os.environ["SIGNATURE_LOG"], "a") as f:
            f.write("read\\n")
        import inspect
        return inspect.Signature([inspect.Parameter("n", inspect.Parameter.KEYWORD_ONLY)])

    def __call__(self, *, n):
        pass

run = Counted()
"""


def test_an_array_s_args_are_checked_once_per_distinct_keys_not_once_per_step(tmp_path, monkeypatch):
    (tmp_path / "counted_steps.py").write_text(COUNTED_STEPS)
    log = tmp_path / "signature.log"
    monkeypatch.setenv("SIGNATURE_LOG", str(log))
    suite = write_suite(tmp_path / "s.toml", '[suite]\nrun_dir = "run"\n'
                        '[[steps]]\nid = "good/{i}"\narray = "0-1999"\ncall = "counted_steps:run"\nargs = { n = "{i}" }\n'
                        '[[steps]]\nid = "bad/{i}"\narray = "0-1999"\ncall = "counted_steps:run"\nargs = { m = "{i}" }\n')
    r = fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120)
    assert r.returncode == EXIT_INVALID, r.stdout + r.stderr
    assert r.stderr.splitlines()[0] == (f"error: {suite}: step 'bad/0': field 'args': counted_steps:run has no "
                                        "parameter 'm' (it takes n) (and in 1999 more steps)")
    # Two sets of keys: the signature read for each (a few reads apiece), not for 4,000 steps.
    assert 2 <= len(log.read_text().split()) <= 8
