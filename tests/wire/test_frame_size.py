"""The bound validation holds a step's launch to is the wire's, and never under what
msgpack takes; the coordinator's transport refuses a frame over it rather than send it."""

from __future__ import annotations

import msgpack
import pytest

from fleet.control.transport import Transport
from fleet.core import launchsize
from fleet.wire import framesize
from fleet.wire import messages as P


def test_the_launch_bound_is_the_frame_limit_of_the_sockets():
    assert launchsize.LAUNCH_MAX == P.MAX_FRAME


@pytest.mark.parametrize("value", [
    {"s": "c" * 70_000, "n": [1, -2**63, 2**64 - 1, 1.5, True, None], "t": {"k": ["é" * 40_000, {}]}},
    ("echo", "ü" * 100_000, "x" * 65_536), "y" * 31, {"A": "b" * 300}, [[[[]]]], 2**64 - 1,
])
def test_a_values_counted_size_is_never_under_what_msgpack_takes(value):
    assert launchsize.packed(value) >= len(msgpack.packb(value, use_bin_type=True))


def test_the_transport_refuses_a_message_over_the_frame_limit_and_queues_nothing():
    t = Transport()
    try:
        launch = P.Launch(step="s", attempt=1, kind="call", call="m:f", args={"s": "c" * P.MAX_FRAME}, command=None,
                          cores=(0,), gpus=(), memory=0, workdir="/w", log="/l", run_dir="/r")
        with pytest.raises(framesize.TooBig, match=r"the Launch for node1 is [\d,]+ bytes, over the 1,048,576"):
            t.send(b"node1", launch)
        assert t._out == {}
    finally:
        t.close()
