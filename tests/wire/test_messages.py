"""The one message set and its codec (fleet.wire.messages), and the pipes' framing
of it (fleet.wire.framing)."""

from __future__ import annotations

import os
import struct
import threading

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.wire import framing, messages
from fleet.wire.framing import MAX_FRAME, FrameReader, frame, read_message, write_message
from fleet.wire.messages import (VERSION, Exited, Hello, Join, Kill, Launch, ProgressReply,
                                 ProtocolError, Refused, Shutdown, Started, Submit, Tick,
                                 VersionMismatch, decode, encode)

text = st.text(max_size=20)
ints = st.integers(min_value=-(2**31), max_value=2**31)
small = st.integers(min_value=0, max_value=4096)
floats = st.floats(allow_nan=False)
ids = st.lists(small, max_size=8).map(tuple)
placement = st.lists(st.tuples(text, ids, ids, small), max_size=3).map(tuple)
json_like = st.recursive(st.none() | st.booleans() | ints | floats | text,
                         lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(text, inner, max_size=3), max_leaves=8)

any_message = st.one_of(
    st.builds(Launch, step=text, attempt=ints, kind=st.sampled_from(["call", "command"]),
              call=text, args=st.dictionaries(text, json_like, max_size=4),
              command=st.none() | text | st.lists(text, max_size=4), cores=ids, gpus=ids,
              memory=st.integers(min_value=0, max_value=2**62), workdir=text, log=text,
              run_dir=text, inputs=st.lists(text, max_size=3).map(tuple),
              outputs=st.lists(text, max_size=3).map(tuple), placement=placement,
              decided_at=floats, env=st.dictionaries(text, text, max_size=3),
              gpu_vars=st.lists(text, max_size=2).map(tuple)),
    st.builds(Kill, step=text, attempt=ints, signal=small),
    st.builds(Shutdown, grace=floats),
    st.just(Tick()),
    st.builds(Hello, pid=small, threads=small, preload=st.lists(text, max_size=3).map(tuple),
              import_s=floats),
    st.builds(Refused, reason=text),
    st.builds(Started, step=text, attempt=ints, pid=small, pgid=small, at=floats),
    st.builds(Exited, step=text, attempt=ints, pid=small,
              outcome=st.sampled_from(["succeeded", "failed", "terminated"]),
              returncode=st.none() | ints, signal=st.none() | small, decided_at=floats,
              first_at=floats, work_start=floats, work_end=floats, ended_at=floats,
              utime=floats, stime=floats, maxrss_kb=small, affinity=ids,
              placement_ok=st.booleans(), error=st.none() | text),
    st.builds(Join, node=text, host=text, cores=st.lists(small, max_size=4),
              gpus=st.lists(small, max_size=2), memory=small, pid=small, zygote_pid=small,
              preload=st.lists(text, max_size=2)),
    st.builds(Submit, suite=text, force=st.booleans(), shard=text),
    st.builds(ProgressReply, submission=small, done=st.booleans(),
              counts=st.dictionaries(text, small, max_size=3),
              finished=st.lists(st.lists(text, max_size=3), max_size=3), next=small),
)


def launch(**kw) -> Launch:
    fields = dict(step="a/b", attempt=1, kind="call", call="pkg.mod:func",
                  args={"n": 3}, command=None, cores=(0, 1), gpus=(), memory=1 << 30,
                  workdir="/w", log="/w/log", run_dir="/r", inputs=("in",),
                  outputs=("out",), placement=(("node1", (0, 1), (), 1 << 30),),
                  decided_at=12.5, env={"A": "1"}, gpu_vars=("CUDA_VISIBLE_DEVICES",))
    fields.update(kw)
    return Launch(**fields)


@given(any_message)
def test_every_message_survives_encode_and_decode_unchanged(msg):
    assert decode(encode(msg)) == msg


def test_every_message_type_carries_its_type_and_protocol_version_4():
    assert VERSION == 4
    assert {"launch", "kill", "shutdown", "tick", "hello", "refused", "started",
            "exited"} <= set(messages._TYPES)
    body = msgpack.unpackb(encode(Refused("no")))
    assert body == {"v": 4, "type": "refused", "reason": "no", "preload": False}


def test_one_launch_class_serves_the_coordinator_and_the_zygote_whatever_sequence_it_was_given():
    as_lists = launch(cores=[0, 1], inputs=["in"], outputs=["out"], gpu_vars=["CUDA_VISIBLE_DEVICES"],
                      placement=[["node1", [0, 1], [], 1 << 30]])
    assert encode(as_lists) == encode(launch())
    assert decode(encode(as_lists)) == launch()


def test_tuple_fields_come_back_as_tuples_even_nested_in_placement():
    msg = decode(encode(launch()))
    assert msg.cores == (0, 1) and msg.inputs == ("in",)
    assert msg.placement == (("node1", (0, 1), (), 1 << 30),)
    assert isinstance(msg.placement[0][1], tuple)
    assert msg.command is None


def test_a_command_keeps_its_form_as_a_list_or_a_shell_string():
    assert decode(encode(launch(kind="command", command=["ls", "-l"]))).command == ["ls", "-l"]
    assert decode(encode(launch(kind="command", command="ls | wc"))).command == "ls | wc"


@pytest.mark.parametrize("body, why", [
    ({"type": "launchx", "v": 4}, "unknown message type"),
    ({"v": 4, "reason": "x"}, "unknown message type"),
    ({"type": ["refused"], "v": 4, "reason": "x"}, "unknown message type"),
    ({"type": "refused", "v": 1, "reason": "x"}, "protocol version"),  # version 1: maps only, before shapes
    ({"type": "refused", "v": 2, "reason": "x"}, "protocol version"),  # 2: queued steps started behind a go-on
    ({"type": "refused", "v": 3, "reason": "x"}, "protocol version"),  # 3: a dead zygote was not restarted, and queued steps started behind a wait
    ({"type": "refused", "reason": "x"}, "protocol version"),
    ({"type": "refused", "v": True, "reason": "x"}, "protocol version"),
    ({"type": "refused", "v": 4}, "refused"),
    ({"type": "refused", "v": 4, "reason": "x", "extra": 1}, "unknown fields"),
    ({"type": "kill", "v": 4, "step": "s", "attempt": True, "signal": 9}, "attempt"),
    ({"type": "kill", "v": 4, "step": b"s", "attempt": 1, "signal": 9}, "step"),
    ({"type": "started", "v": 4, "step": "s", "attempt": 1, "pid": 1, "pgid": 1, "at": "now"}, "at"),
    ({"type": "exited", **{f: 0 for f in Exited.__dataclass_fields__}, "v": 4, "step": "s",
      "outcome": "failed", "affinity": [], "placement_ok": True, "error": 3}, "error"),
    ([1, 2, 3], "protocol version"),
    ("refused", "not a map"),
    ([4], "without its version and type"),
    ([4, "started", "s", 1, 1, 1], "missing fields"),
    ([4, "started", "s", 1, 1, 1, 0.5, "extra"], "6 fields, it has 5"),
    ([4, "started", "s", True, 1, 1, 0.5], "attempt"),
    ([4, "nope", "s"], "unknown message type"),
])
def test_decode_rejects_what_is_not_a_known_message_with_a_protocol_error(body, why):
    with pytest.raises(ProtocolError, match=why):
        decode(msgpack.packb(body))


def test_a_version_mismatch_names_the_version_it_got():
    with pytest.raises(VersionMismatch) as e:
        decode(msgpack.packb({"type": "tick", "v": 7}))
    assert e.value.got == 7 and "protocol version 7" in str(e.value)


def test_optional_fields_may_be_left_out_and_take_their_defaults():
    assert decode(msgpack.packb({"type": "shutdown", "v": 4})) == Shutdown(None)  # each step its own grace
    assert decode(msgpack.packb({"type": "submit", "v": 4, "suite": "/s.toml"})) == Submit("/s.toml")


def test_an_unknown_field_is_refused_on_the_zeromq_bound_and_on_the_pipe_bound_alike():
    body = msgpack.unpackb(encode(Kill("s", 1, 9)))
    bad = msgpack.packb({**body, "colour": "red"})
    with pytest.raises(ProtocolError, match="unknown fields"):
        decode(bad)
    with pytest.raises(ProtocolError, match="unknown fields"):
        framing.decode(bad)
    reader = FrameReader()
    assert reader.feed(framing.frame_payload(bad) + frame(Kill("t", 1, 9))) == [Kill("t", 1, 9)]
    assert len(reader.dropped) == 1 and "colour" in reader.dropped[0]


def test_each_transport_keeps_its_own_size_bound():
    big = encode(launch(args={"blob": "x" * (messages.MAX_FRAME + 1)}))
    with pytest.raises(ProtocolError, match="limit"):
        decode(big)
    assert framing.decode(big).args["blob"] == "x" * (messages.MAX_FRAME + 1)


def test_decode_rejects_bytes_that_are_not_msgpack_with_value_error():
    with pytest.raises(ProtocolError):
        decode(b"\xc1")
    with pytest.raises(ProtocolError):
        decode(b"\x92\x01")  # truncated


def test_encode_refuses_what_is_not_a_message():
    with pytest.raises(TypeError):
        encode({"type": "kill"})


def test_a_frame_is_a_big_endian_length_then_the_msgpack_map():
    data = frame(Kill("s", 2, 15))
    (length,) = struct.unpack(">I", data[:4])
    assert length == len(data) - 4
    assert decode(data[4:]) == Kill("s", 2, 15)


@settings(max_examples=50)
@given(st.lists(any_message, min_size=1, max_size=5), st.data())
def test_a_frame_reader_returns_the_same_messages_however_the_stream_is_split(msgs, data):
    stream = b"".join(frame(m) for m in msgs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader, got = FrameReader(), []
    for lo, hi in zip([0] + cuts, cuts + [len(stream)]):
        got += reader.feed(stream[lo:hi])
    assert got == msgs
    assert reader.pending == 0 and reader.dropped == []


def test_a_frame_reader_fed_one_byte_at_a_time_waits_for_whole_frames():
    data = frame(Shutdown(1.5))
    reader = FrameReader()
    assert all(reader.feed(data[i:i + 1]) == [] for i in range(len(data) - 1))
    assert reader.pending == len(data) - 1
    assert reader.feed(data[-1:]) == [Shutdown(1.5)]


def test_a_frame_reader_drops_a_malformed_frame_and_keeps_the_ones_around_it():
    bad = msgpack.packb({"type": "nonsense", "v": 4})
    stream = frame(Kill("a", 1, 9)) + struct.pack(">I", len(bad)) + bad + frame(Kill("b", 1, 9))
    reader = FrameReader()
    assert reader.feed(stream) == [Kill("a", 1, 9), Kill("b", 1, 9)]
    assert len(reader.dropped) == 1 and "nonsense" in reader.dropped[0]


def test_a_frame_reader_refuses_a_length_over_the_limit():
    with pytest.raises(ValueError, match="exceeds"):
        FrameReader().feed(struct.pack(">I", MAX_FRAME + 1))


def test_write_and_read_carry_a_message_larger_than_the_pipe_buffer_over_a_real_pipe():
    msg = launch(args={"blob": "x" * 300_000})  # several times a 64 KiB pipe
    r, w = os.pipe()
    try:
        # The pipe fills, so the writer needs a reader at the same time.
        writer = threading.Thread(target=write_message, args=(w, msg))
        writer.start()
        got = read_message(r)
        writer.join(timeout=10)
        assert not writer.is_alive()
        assert got == msg
    finally:
        os.close(r)
        os.close(w)


def test_read_message_returns_none_at_a_clean_end_of_file():
    r, w = os.pipe()
    write_message(w, Hello(1, 1, (), 0.0))
    os.close(w)
    try:
        assert read_message(r) == Hello(1, 1, (), 0.0)
        assert read_message(r) is None
    finally:
        os.close(r)


@pytest.mark.parametrize("cut", [2, 7], ids=["in the header", "in the payload"])
def test_read_message_raises_eof_error_when_the_stream_ends_inside_a_frame(cut):
    r, w = os.pipe()
    os.write(w, frame(Refused("gone"))[:cut])
    os.close(w)
    try:
        with pytest.raises(EOFError):
            read_message(r)
    finally:
        os.close(r)


def test_writing_to_a_pipe_whose_reader_is_gone_raises_broken_pipe():
    r, w = os.pipe()
    os.close(r)
    try:
        with pytest.raises(BrokenPipeError):
            write_message(w, Shutdown(0.0))
    finally:
        os.close(w)


def test_a_submit_reply_without_a_fault_is_framed_as_before_the_field_so_older_clients_of_this_version_read_it():
    plain = msgpack.unpackb(messages.encode(messages.SubmitReply(True, submission=3, steps=2)), raw=False)
    assert "fault" not in plain and plain["submission"] == 3, plain
    faulted = messages.SubmitReply(False, fault="the fleet could not read s.toml")
    assert messages.decode(messages.encode(faulted)) == faulted
    assert messages.decode(messages.encode(messages.SubmitReply(True, submission=3))) == messages.SubmitReply(True, submission=3)
