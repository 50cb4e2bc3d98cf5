"""How a call step's function is called, and how many threads a step is given: the
pieces the child uses, checked on their own (the whole path: tests/control/test_calls.py; a different basename, as pytest needs)."""

from __future__ import annotations

import os
import time

import pytest

from fleet.node import threads
from fleet.node.child import ArgumentMismatch, call_arguments, log_header, unproduced
from fleet.node.stepcontext import StepContext
from fleet.wire.messages import Launch

CTX = StepContext(id="s", attempt=1, workdir="/w", run_dir="/r", cores=(0,), gpus=(), memory=0,
                  placement=(), inputs=(), outputs=(), args={"n": 1}, log="/w/log")


def launch(**kw) -> Launch:
    base = dict(step="s", attempt=2, kind="call", call="m:f", args={}, command=None, cores=(0, 1),
                gpus=(), memory=0, workdir="/r/steps/s", log="/r/steps/s/log", run_dir="/r")
    return Launch(**{**base, **kw})


def old_form(ctx):
    return ctx


def new_form(ctx, n, label="x"):
    return ctx, n, label


def plain(n, *, label="x"):
    return n, label


def anything(**kw):
    return kw


def positional_ctx(ctx, /, n):
    return ctx, n


def test_a_function_whose_only_parameter_is_ctx_gets_just_the_context():
    assert call_arguments(old_form, CTX, {"n": 1}, "m:old_form") == ((), {"ctx": CTX})


def test_a_function_with_ctx_and_parameters_gets_both_by_name():
    assert call_arguments(new_form, CTX, {"n": 1}, "t") == ((), {"ctx": CTX, "n": 1})
    assert call_arguments(positional_ctx, CTX, {"n": 1}, "t") == ((CTX,), {"n": 1})


def test_a_function_without_ctx_gets_exactly_its_args():
    assert call_arguments(plain, CTX, {"n": 1, "label": "y"}, "t") == ((), {"n": 1, "label": "y"})
    assert call_arguments(anything, CTX, {"a": 1, "b": 2}, "t") == ((), {"a": 1, "b": 2})
    assert call_arguments(print, CTX, {"sep": ","}, "t") == ((), {"sep": ","})


def test_a_wrong_or_missing_argument_is_named_before_the_call():
    with pytest.raises(ArgumentMismatch, match=r"m:plain has no parameter 'm' \(it takes n, label\)"):
        call_arguments(plain, CTX, {"n": 1, "m": 2}, "m:plain")
    with pytest.raises(ArgumentMismatch, match=r"m:plain needs 'n': add it to the step's args"):
        call_arguments(plain, CTX, {"label": "y"}, "m:plain")
    with pytest.raises(ArgumentMismatch, match="'ctx' is the step context"):
        call_arguments(new_form, CTX, {"ctx": 1, "n": 1}, "t")


def test_a_steps_thread_count_is_its_threads_else_its_cores_per_rank_else_its_cores():
    assert threads.step_threads(launch(cores=(0, 1, 2))) == 3
    mpi = launch(kind="command", cores=tuple(range(8)), env={"FLEET_RANKS": "n1:0,1,2,3;n1:4,5,6,7"})
    assert threads.step_threads(mpi) == 4
    assert threads.step_threads(launch(cores=())) == len(os.sched_getaffinity(0))
    assert threads.thread_env(3)["OMP_NUM_THREADS"] == "3"
    assert set(threads.thread_env(3)) == set(threads.THREAD_VARS)


def test_missing_outputs_are_named_as_the_suite_wrote_them(tmp_path):
    made = tmp_path / "made.txt"
    made.write_text("")
    msg = launch(run_dir=str(tmp_path), outputs=(str(made), str(tmp_path / "sub/gone.txt")))
    assert unproduced(msg) == "declared output sub/gone.txt was not produced"
    assert unproduced(launch(run_dir=str(tmp_path), outputs=(str(made),))) is None


def test_the_log_header_names_step_attempt_fleet_node_and_time():
    msg = launch(env={"FLEET_ID": "host-1-abc"}, placement=(("node7", (0,), (), 0),))
    line = log_header(msg, time.time()).decode()
    assert line.startswith("==== fleet: step s attempt 2 fleet host-1-abc on node7 at ")
    assert line.endswith(" ====\n")
