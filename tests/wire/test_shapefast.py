"""The generated decoders of the per-step messages (fleet.wire.shapefast): a full array
decodes through one generated function per class, to the very message the general path
makes, with the same checks and errors."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from fleet.wire import messages as P
from fleet.wire import shapes
from fleet.wire.messages import Exited, Launch, ProtocolError, Started, decode, encode


def exited(**kw) -> Exited:
    fields = dict(step="s/1", attempt=2, pid=7, outcome="succeeded", returncode=0, signal=None, decided_at=1.5,
                  first_at=1.6, work_start=1.7, work_end=1.8, ended_at=1.9, utime=0.1, stime=0.0, maxrss_kb=900,
                  affinity=(3, 4), placement_ok=True, error=None, control={"stage": "b"}, memory_peak=5)
    fields.update(kw)
    return Exited(**fields)


def launch(**kw) -> Launch:
    fields = dict(step="a/b", attempt=1, kind="call", call="m:f", args={"n": 3}, command=["x", "y"], cores=(0, 1),
                  gpus=(), memory=1 << 30, workdir="/w", log="/w/log", run_dir="/r",
                  placement=(("node1", (0, 1), (), 1 << 30),), env={"A": "1"}, timeout=None)
    fields.update(kw)
    return Launch(**fields)


def as_map(msg) -> bytes:
    return msgpack.packb({"v": P.VERSION, "type": msg.TYPE, **msg.__dict__}, use_bin_type=True)


MESSAGES = [Started("s/1", 2, 7, 7, 1.5), exited(), exited(returncode=None, signal=9, error="boom", affinity=()),
            exited(decided_at=3, utime=1), launch(), launch(timeout=2.5, command="true", cores=(5,))]


@pytest.mark.parametrize("msg", MESSAGES)
def test_a_full_array_decodes_through_its_generated_function_to_what_the_general_path_makes(msg):
    got = decode(encode(msg))
    assert shapes._SHAPES[type(msg)]._decoder is not None  # the generated function took it
    general = decode(as_map(msg))
    assert got == general == msg and type(got) is type(msg)
    assert list(got.__dict__) == [f.name for f in dataclasses.fields(msg)]
    assert {k: type(v) for k, v in got.__dict__.items()} == {k: type(v) for k, v in general.__dict__.items()}
    assert encode(got) == encode(msg)


def test_list_fields_become_tuples_nested_ones_too_and_a_step_cores_stay_ints():
    body = [P.VERSION, "exited", *exited().__dict__.values()]
    body[body.index((3, 4))] = [3, 4]
    got = decode(msgpack.packb(body))
    assert got.affinity == (3, 4) and type(got.affinity) is tuple
    placement = decode(encode(launch(placement=(("n1", (0, 1), (7,), 5), ("n2", (2,), (), 6))))).placement
    assert placement == (("n1", (0, 1), (7,), 5), ("n2", (2,), (), 6))
    assert all(type(p) is tuple and type(p[1]) is tuple for p in placement)


@pytest.mark.parametrize("field, value, error", [
    ("outcome", 5, "'outcome' is not a str"), ("attempt", "1", "'attempt' is not a int"),
    ("attempt", True, "'attempt' is not a int"), ("placement_ok", 1, "'placement_ok' is not a bool"),
    ("affinity", "0-3", "'affinity' is not a tuple"), ("returncode", 1.5, "'returncode' is not a int | None"),
    ("control", [], "'control' is not a dict")])
def test_a_full_array_with_a_field_of_the_wrong_type_is_refused_as_the_general_path_refuses_it(field, value, error):
    fields = dict(exited().__dict__, **{field: value})
    with pytest.raises(ProtocolError, match=error):
        decode(msgpack.packb([P.VERSION, "exited", *fields.values()]))
    with pytest.raises(ProtocolError, match=error):
        decode(msgpack.packb({"v": P.VERSION, "type": "exited", **fields}))


def test_an_int_where_a_float_is_wanted_is_taken_as_it_comes_as_before():
    got = decode(encode(exited(work_end=2, utime=0)))
    assert got.work_end == 2 and type(got.work_end) is int
