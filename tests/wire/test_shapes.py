"""The per-step messages by shape (fleet.wire.shapes): Launch, Started and Exited
cross as msgpack arrays, decode to the same messages, and are checked as maps are."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from fleet.wire import messages as P
from fleet.wire.messages import Exited, Kill, Launch, ProtocolError, Started, decode, encode


def exited(**kw) -> Exited:
    fields = dict(step="s/1", attempt=2, pid=7, outcome="succeeded", returncode=0, signal=None, decided_at=1.5,
                  first_at=1.6, work_start=1.7, work_end=1.8, ended_at=1.9, utime=0.1, stime=0.0, maxrss_kb=900,
                  affinity=(3, 4), placement_ok=True, error=None)
    fields.update(kw)
    return Exited(**fields)


def launch() -> Launch:
    return Launch(step="a/b", attempt=1, kind="call", call="m:f", args={"n": 3}, command=None, cores=(0, 1),
                  gpus=(), memory=1 << 30, workdir="/w", log="/w/log", run_dir="/r",
                  placement=(("node1", (0, 1), (), 1 << 30),), env={"A": "1"})


@pytest.mark.parametrize("msg", [Started("s/1", 2, 7, 7, 1.5), exited(), exited(control={"stage": "b"},
                                                                              memory_peak=5), launch()])
def test_the_per_step_messages_cross_as_arrays_of_their_fields_in_order_and_decode_equal(msg):
    body = msgpack.unpackb(encode(msg))
    assert body == [P.VERSION, msg.TYPE, *[_plain(getattr(msg, f.name)) for f in dataclasses.fields(msg)]]
    got = decode(encode(msg))
    assert got == msg and type(got) is type(msg)
    assert list(got.__dict__) == [f.name for f in dataclasses.fields(msg)]  # re-encoded the same
    assert encode(got) == encode(msg)


def _plain(v):
    return [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v


def test_an_array_takes_the_same_type_checks_and_tuple_conversion_as_a_map():
    body = [P.VERSION, "exited", *exited().__dict__.values()]
    body[body.index((3, 4))] = [3, 4]
    assert decode(msgpack.packb(body)).affinity == (3, 4)
    placement = decode(encode(launch())).placement
    assert placement == (("node1", (0, 1), (), 1 << 30),) and isinstance(placement[0][1], tuple)
    with pytest.raises(ProtocolError, match="'outcome' is not a str"):
        decode(msgpack.packb([P.VERSION, "exited", "s/1", 1, 7, 5, *list(exited().__dict__.values())[4:]]))


def test_an_array_may_leave_out_fields_with_defaults_and_they_get_fresh_ones():
    body = [P.VERSION, "exited", *list(exited().__dict__.values())[:17]]
    a, b = decode(msgpack.packb(body)), decode(msgpack.packb(body))
    assert a == exited() and a.control == {} and a.control is not b.control
    assert list(a.__dict__) == [f.name for f in dataclasses.fields(Exited)]


def test_a_map_of_a_per_step_message_still_decodes_and_other_messages_stay_maps():
    msg = exited()
    assert decode(msgpack.packb({"v": P.VERSION, "type": "exited", **msg.__dict__})) == msg
    assert isinstance(msgpack.unpackb(encode(Kill("s", 1, 9))), dict)


def test_an_array_of_the_earlier_protocol_version_is_refused_as_a_version_mismatch():
    with pytest.raises(P.VersionMismatch):
        decode(msgpack.packb([1, "started", "s/1", 2, 7, 7, 1.5]))
