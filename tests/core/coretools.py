"""Building scheduler state for the core's unit tests, through the real handlers."""

from pathlib import Path

from fleet.core.resources import NodeSpec, Slot
from fleet.core.scheduler import NodeJoined, Scheduler, submission
from fleet.core.suite import parse_suite

GiB = 2**30


def node(name: str, cores: int, gpus: int = 0, memory: int | None = None) -> NodeSpec:
    """A node with core ids 0..cores-1, GPU ids 0..gpus-1 and (default) 1 GiB per core."""
    return NodeSpec(name, tuple(range(cores)), tuple(range(gpus)), cores * GiB if memory is None else memory)


def suite(*tables: dict):
    """A suite from step tables (a command is filled in where none is given)."""
    for t in tables:
        t.setdefault("command", "x")
    return parse_suite({"steps": list(tables)}, Path("/x/suite.toml"))


def scheduler(nodes, *tables, done=()):
    """A scheduler with these nodes joined and these steps submitted at t=0."""
    sched = Scheduler()
    for n in nodes:
        assert sched.handle(NodeJoined(n), 0.0) == []
    out = sched.handle(submission(suite(*tables).steps, done=done), 0.0)
    return sched, out


def slot(name, cores, gpus=(), memory=GiB):
    return Slot(name, tuple(cores), tuple(gpus), memory)
