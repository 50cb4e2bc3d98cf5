"""Building scheduler state for the core's unit tests, through the real handlers."""

from pathlib import Path

from fleet.core.resources import NodeSpec, Slot
from fleet.core.scheduler import NodeJoined, Scheduler, Wait, submission
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


class WaitSaying:
    """Equal to a scheduler Wait with these words and this queue behind it: the tests
    that pin the 0.1 prose compare through it; test_waits checks the structure."""

    def __init__(self, step: str, reason: str, behind: int = 0):
        self.step, self.reason, self.behind = step, reason, behind

    def __eq__(self, other) -> bool:
        return isinstance(other, Wait) and (other.step, other.reason, other.behind) == (
            self.step, self.reason, self.behind)

    def __repr__(self) -> str:
        return f"WaitSaying({self.step!r}, {self.reason!r}, {self.behind})"
