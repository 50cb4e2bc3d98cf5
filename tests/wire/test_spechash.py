"""A step's definition hash (fleet.wire.spechash) is the value markers on disk hold:
sha256 of repr(spec.identity()), whatever way it is computed."""

from __future__ import annotations

import hashlib
from types import MappingProxyType

import pytest

from fleet.core.suite import StepSpec
from fleet.wire import records, spechash


def _as_ever(spec) -> str:
    return hashlib.sha256(repr(spec.identity()).encode()).hexdigest()[:16]


SPECS = [
    StepSpec("s/1", 0, command="true", workdir="steps/s/1"),
    StepSpec("s/2", 1, command=("echo", "{i}", "x"), cores=4, memory=1 << 30, deps=("s/1",), priority=1),
    StepSpec("a", 2, call="m:f", args=MappingProxyType({"b": [1, 2, {"c": 3}], "a": 1.5}), retries=2, estimate=3.0),
    StepSpec("b", 3, call="m:f", args={"x": True}, span=True, mpi=True, ranks=8, threads=2, protocol="steps"),
    StepSpec("c", 4, command="x", inputs=("i",), outputs=("o", "p"), concurrent=False, memory=0, gpus=1),
    StepSpec("d", 5, command="x", cores=True),  # a bool where an int is: its repr differs, so must the hash
    StepSpec("e", 6, command="x", cores=1.0),
    StepSpec("f", 7, command="x", estimate=0.0),
    StepSpec("g", 8, command="x", estimate=-0.0),  # equal to 0.0, another repr
    StepSpec("h", 9, command="x", env=(("A", "1"), ("B", "x y"))),
    StepSpec("i", 10, command="x", protocol="steps", env=(("A", "1"),)),
]


def test_a_step_without_env_or_protocol_hashes_as_before_those_fields_existed():
    # The text of a step written before either field: no piece of them at all.
    spec = StepSpec("s/1", 0, command="true", workdir="steps/s/1")
    assert "env" not in spechash.text(spec) and "protocol" not in spechash.text(spec)
    assert spechash.spec_hash(spec) != spechash.spec_hash(StepSpec("s/1", 0, command="true", workdir="steps/s/1",
                                                                   env=(("A", "1"),)))


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_the_hash_is_sha256_of_the_identitys_repr_as_markers_on_disk_hold_it(spec):
    assert spechash.text(spec) == repr(spec.identity())
    assert spechash.spec_hash(spec) == _as_ever(spec)


def test_a_piece_remembered_for_one_step_gives_the_right_text_for_the_next():
    for _ in range(2):  # the second time every shared piece is remembered
        for spec in SPECS:
            assert spechash.spec_hash(spec) == _as_ever(spec)
    assert len({spechash.spec_hash(s) for s in SPECS}) == len(SPECS)


def test_records_spec_hash_computes_a_step_s_hash_once_and_gives_it_again(monkeypatch):
    spec = StepSpec("z/9", 0, command="true", workdir="steps/z/9")
    made = []
    real = spechash.spec_hash
    monkeypatch.setattr(spechash, "spec_hash", lambda s: made.append(s.id) or real(s))
    assert records.spec_hash(spec) == _as_ever(spec) == records.spec_hash(spec)
    assert made == ["z/9"]
    other = StepSpec("z/9", 0, command="false", workdir="steps/z/9")  # another object, another definition
    assert records.spec_hash(other) != _as_ever(spec) and made == ["z/9", "z/9"]
    assert records.spec_hash(other) == _as_ever(other) and made == ["z/9", "z/9"]  # (the step's latest, kept)


def test_many_steps_unique_ids_and_empty_fields_hash_as_ever_in_any_order():
    # (each step's id, task and workdir are unique; its args, deps, inputs empty: the
    # pieces of the latter are remembered by field and type, of the former never)
    specs = [StepSpec(f"m/{i}", i, command=("run", str(i)) if i % 3 else "true", workdir=f"steps/m/{i}",
                      args=MappingProxyType({}) if i % 2 else {}, deps=() if i % 5 else [], estimate=i / 7)
             for i in range(300)]
    for spec in specs + specs[::-1]:
        assert spechash.text(spec) == repr(spec.identity())
        assert spechash.spec_hash(spec) == _as_ever(spec)


def test_steps_of_arrays_interleaved_with_other_shapes_hash_as_ever():
    # The template of the step before is reused only where the same objects recur;
    # a hole at the first and last field, alternating shapes and protocol steps too.
    shared_cmd, shared_args = ("run", "x"), MappingProxyType({"k": [1, 2]})
    specs = []
    for i in range(200):
        specs.append(StepSpec(f"a/{i}", i, command=shared_cmd, workdir=f"steps/a/{i}", args=shared_args,
                              estimate=float(i) if i % 7 == 0 else None, protocol="steps" if i % 3 == 0 else ""))
        if i % 4 == 0:
            specs.append(StepSpec(f"b/{i}", i, call="m:f", cores=i, min_cores=1, task="t", estimate=float(i)))
        if i % 9 == 0:
            specs.append(StepSpec(f"c/{i}", i, command=("run", "x"), args={"k": [1, 2]}, workdir=f"w/{i}"))
    for spec in specs + specs[::-1] + specs[::2]:
        assert spechash.text(spec) == repr(spec.identity())
        assert spechash.spec_hash(spec) == _as_ever(spec)


def test_an_array_suites_steps_hash_as_ever():
    from pathlib import Path
    from fleet.core.suite import parse_suite
    steps = parse_suite({"steps": [
        {"id": "s/{i}", "array": "1-50", "command": ["echo", "{i}"], "cores": 2},
        {"id": "t/{i}", "array": "1-50", "call": "m:f", "args": {"n": "{i}", "k": "v"}, "deps": ["s/{i}"]},
    ]}, Path("/r/s.toml")).steps
    for spec in steps:
        assert spechash.text(spec) == repr(spec.identity())


def test_a_definition_hashed_before_is_let_go_once_another_of_its_step_is_hashed():
    import sys
    old = StepSpec("keep/1", 0, command="true", workdir="steps/keep/1")
    alone = sys.getrefcount(old)
    records.spec_hash(old)
    # (held by the cache, keyed by id(spec), for good: each resubmission's definitions kept)
    new = StepSpec("keep/1", 0, command="true", workdir="steps/keep/1")  # the same suite submitted again
    assert records.spec_hash(new) == records.spec_hash(old) == _as_ever(new)
    records.spec_hash(new)
    assert sys.getrefcount(old) == alone
