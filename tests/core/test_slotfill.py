"""A step definition made without the frozen __init__ (fleet.core.slotfill) is the one
__init__ makes: equal, the same repr, hash and identity, still frozen, and a field
left out is an error."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import pytest

from fleet.core.slotfill import filler
from fleet.core.suite import StepSpec, parse_suite

ALL = dict(id="a/1", order=3, call=None, command=("run", "1"), args=MappingProxyType({"n": 1}), task="a",
           cores=2, min_cores=1, gpus=0, memory=1 << 30, span=False, mpi=False, ranks=1, min_ranks=1, threads=1,
           deps=("b",), inputs=("i",), outputs=("o",), workdir="steps/a/1", priority=2, concurrent=True,
           retries=1, estimate=2.5, source="/s.toml", timeout=None, grace=10.0, protocol="steps", env=(("A", "1"),))


def test_a_filled_step_is_the_step_init_makes_and_stays_frozen():
    made, ref = filler(StepSpec)(**ALL), StepSpec(**ALL)
    assert type(made) is StepSpec
    assert made == ref and repr(made) == repr(ref) and hash(made) == hash(ref)
    assert made.identity() == ref.identity()
    assert all(getattr(made, f.name) is getattr(ref, f.name) for f in dataclasses.fields(StepSpec))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.cores = 9
    assert not hasattr(made, "__dict__")


def test_every_field_must_be_given_so_a_field_added_to_the_class_cannot_be_missed():
    fill = filler(StepSpec)
    with pytest.raises(TypeError):
        fill(**{k: v for k, v in ALL.items() if k != "protocol"})
    with pytest.raises(TypeError):
        fill(**ALL, extra=1)


def test_a_class_with_a_post_init_or_without_slots_is_refused():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self):
            pass

    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int

    for cls in (Checked, Plain):
        with pytest.raises((TypeError, AttributeError)):
            filler(cls)


def test_parsed_steps_equal_steps_made_by_init_from_their_fields():
    steps = parse_suite({"steps": [{"id": "s/{i}", "array": "1-5", "command": ["echo", "{i}"], "cores": 2},
                                   {"id": "c", "call": "m:f", "args": {"k": "v"}, "deps": ["s/1"]}]},
                        Path("/r/s.toml")).steps
    for s in steps:
        assert type(s) is StepSpec
        assert s == StepSpec(**{f.name: getattr(s, f.name) for f in dataclasses.fields(StepSpec)})
