"""StepDeclared lines encoded by shape (fleet.control.declaring) are the records' own."""

from fleet.control import declaring
from fleet.core.suite import StepSpec
from fleet.wire import events
from fleet.wire.events import dumps


def _record_line(fleet, t, sub, s, deps, foreign, parent=None):
    return dumps(events.StepDeclared(
        t=t, step=s.id, submission=sub, cores=s.cores, min_cores=s.min_cores, gpus=s.gpus, memory=s.memory,
        deps=list(deps), priority=s.priority, step_kind=s.kind, task=s.task,
        foreign=True if s.id in foreign else None, parent=parent).to_dict(fleet))


def test_declared_lines_are_exactly_what_writing_each_record_gives():
    specs = [StepSpec("a/1", 0, command="true"), StepSpec("a/2", 1, command="true"),
             StepSpec("b", 2, call="m:f", cores=4, min_cores=2, gpus=1, memory=1 << 30, priority=5,
                      task='t\u00e9"x'),
             StepSpec("c", 3, command="true", memory=0, task="c"), StepSpec("d\u00fc", 4, command="x")]
    deps = {"a/1": (), "a/2": ("a/1",), "b": ("a/1", "c"), "c": ("x",), "d\u00fc": ("b", "a/2", "c")}
    for fleet in ("f1", ""):
        for foreign in (frozenset(), {"c", "a/2"}):
            for parent in (None, 'p\u00e9"/q'):  # (children's records name the step that submitted them)
                got = declaring.lines(fleet, 1234.5678912, 3, specs, deps, foreign, parent)
                assert got == [_record_line(fleet, 1234.5678912, 3, s, deps[s.id], foreign, parent) for s in specs]


def test_declared_lines_read_back_as_step_declared_records(tmp_path):
    specs = [StepSpec(f"s/{i}", i, command="true", cores=1 + i % 3) for i in range(7)]
    deps = {s.id: tuple(x.id for x in specs[:i][-2:]) for i, s in enumerate(specs)}
    log = events.EventLog(tmp_path / "events.jsonl", fleet="f9")
    log.write_encoded(declaring.lines("f9", 5.0, 1, specs, deps, frozenset()))
    log.close()
    recs = [r for r in events.read_records(tmp_path / "events.jsonl") if isinstance(r, events.StepDeclared)]
    assert [(r.step, r.cores, tuple(r.deps), r.fleet) for r in recs] == \
        [(s.id, s.cores, deps[s.id], "f9") for s in specs]
