"""A call step's set-up with what the zygote prepared once (fleet.node.childprep): the
same environment, streams, stdin and context as a child that makes them itself."""

from __future__ import annotations

import dataclasses
import fractions
import json
import os

import pytest

from fleet.node import child, childprep, threads
from fleet.node.spare import _pack, _unpack
from fleet.node.stepcontext import StepContext

from test_call_pieces import launch as piece
from test_zygote import CORES, launch, log_of, zygote  # noqa: F401  (fixture)


def _environment_in_a_forked_child(msg, restore_env) -> dict:
    """os.environ of a forked child after child._set_environment (prepared before the fork)."""
    childprep.prepare(restore_env)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            child._set_environment(msg, restore_env)
            os.write(w, json.dumps(dict(os.environ)).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.parametrize("cores,given_threads", [((0,), 0), ((0, 1, 2), 0), ((0,), 4)])
def test_a_prepared_childs_environment_is_exactly_what_step_environment_says(
        monkeypatch, cores, given_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("FLEET_TEST_AGENT_HAD", "zygote")
    monkeypatch.setenv("FLEET_TEST_GONE", "x")
    monkeypatch.setenv("ZE_AFFINITY_MASK", "0.1")
    restore = {"FLEET_TEST_AGENT_HAD": "agent", "FLEET_TEST_GONE": None}
    msg = piece(cores=cores, threads=given_threads, gpus=(),
                gpu_vars=("CUDA_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"),
                env={"FLEET_STEP": "s", "MKL_NUM_THREADS": "7", "FLEET_TEST_N": 3})
    want = child.step_environment(
        os.environ, {**restore, **threads.thread_env(threads.step_threads(msg))},
        msg.env, msg.gpus, msg.gpu_vars, msg.workdir)
    assert _environment_in_a_forked_child(msg, restore) == want
    assert want["MKL_NUM_THREADS"] == "7" and "FLEET_TEST_GONE" not in want


def test_the_step_context_built_in_the_child_has_every_field_as_the_dataclass_would():
    msg = piece(args={"n": 1}, placement=(("vm", (0,), (), 0),), stage="two", phase=2)
    ctx = child._context(msg)
    assert set(ctx.__dict__) == {f.name for f in dataclasses.fields(StepContext)}
    assert ctx == StepContext(**ctx.__dict__)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.id = "other"


def test_a_launch_reaches_the_spare_marshalled_or_else_pickled_and_equal_to_what_was_sent():
    plain = piece(args={"n": [1, 2], "t": (3, 4)}, env={"A": "b"})
    assert _pack(plain)[:1] == b"m"
    assert _unpack(_pack(plain)) == plain
    odd = piece(args={"f": fractions.Fraction(1, 3)})  # marshal cannot hold it
    assert _pack(odd)[:1] == b"p"
    assert _unpack(_pack(odd)) == odd


def test_a_spares_step_holds_only_stdin_from_dev_null_and_its_log_and_collects_garbage(
        zygote, tmp_path):
    z = zygote()
    for name in ("a", "b"):  # the second one from a spare forked after the first ran
        z.send(launch(tmp_path, name, "steps:descriptors", cores=CORES[:1]))
        assert z.exited(name).outcome == "succeeded"
        rec = json.loads((tmp_path / "steps" / name / "descriptors.json").read_text())
        log = str(tmp_path / "steps" / name / "log")
        fds = {int(fd): path for fd, path in rec["fds"].items()}
        assert {fd: path for fd, path in fds.items() if fd <= 2} == {0: "/dev/null", 1: log, 2: log}
        others = [path for fd, path in fds.items() if fd > 2]
        assert len(others) == 1 and others[0].startswith("pipe:")  # the zygote's report pipe
        assert rec["stdin"] == "" and rec["gc"] is True
        assert rec["env"]["OMP_NUM_THREADS"] == "1"
        assert "to the log through sys.stdout" in log_of(tmp_path, name)


def _only_ctx(ctx):
    return ctx


def _ctx_with_default(ctx=None):
    return ctx


def _ctx_and_more(ctx, n=1):
    return ctx


def test_a_plain_ctx_function_without_args_is_called_with_its_context_as_the_general_path_would():
    from fleet.node.params import only_ctx
    ctx = object()
    for func in (_only_ctx, _ctx_with_default, _ctx_and_more, lambda ctx, /: ctx):
        assert child.call_arguments(func, ctx, {}, "m:f")[1:] == ({} if func.__code__.co_posonlyargcount
                                                               else {"ctx": ctx},)
    assert only_ctx(_only_ctx) and only_ctx(_ctx_with_default)
    assert not only_ctx(_ctx_and_more) and not only_ctx(lambda ctx, /: ctx) and not only_ctx(print)


def test_the_log_header_time_has_the_zones_offset_with_a_colon(monkeypatch):
    import time
    import datetime
    for tz in ("UTC", "America/St_Johns", "Asia/Kolkata", "Europe/Paris"):
        monkeypatch.setenv("TZ", tz)
        time.tzset()
        for at in (0.0, 1_750_000_000.0, 1_765_000_000.0):
            want = datetime.datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")
            assert child._local_iso(at) == want, tz
    monkeypatch.delenv("TZ")
    time.tzset()
