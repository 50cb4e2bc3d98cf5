"""Which steps of a submission its done markers settle, as the worker thread reads them
(fleet.control.submissions.check): a first run with nothing on disk, a run directory
with step directories but no marker, and a rerun with markers."""

from __future__ import annotations

import json
from pathlib import Path

from fleet.control import submissions
from fleet.control.checks import checked_suite
from fleet.core.resources import NodeSpec
from fleet.wire import messages as P
from fleet.wire import records as R

SUITE = """
[suite]
name = "m"
[[steps]]
id = "a"
command = "true"
[[steps]]
id = "b"
command = "true"
deps = ["a"]
[[steps]]
id = "c"
command = "true"
deps = ["b"]
[[steps]]
id = "g/{i}"
array = "1-3"
command = "true"
"""
NODES = [NodeSpec("n1", (0, 1), (), 1 << 30)]
ALL = ["a", "b", "c", "g/1", "g/2", "g/3"]


def check(tmp_path: Path, force: bool = False) -> submissions.Checked:
    path = tmp_path / "s.toml"
    path.write_text(SUITE)
    out = submissions.check(P.Submit(suite=str(path), force=force), NODES, tmp_path / "run")
    assert isinstance(out, submissions.Checked), out
    return out


def mark(tmp_path: Path, step: str, spec_hash: str | None = None, outcome: str = "succeeded") -> None:
    specs = {s.id: s for s in checked_suite(tmp_path / "s.toml", check_inputs=False)[0].steps}
    d = R.fleet_dir(tmp_path / "run", step)
    d.mkdir(parents=True, exist_ok=True)
    (d / R.DONE).write_text(json.dumps({"outcome": outcome, "spec": spec_hash or R.spec_hash(specs[step]),
                                        "attempt": 1, "node": "n1", "work_s": 0.1, "ended_at": 1.0, "fleet": "old"}))


def test_a_first_run_with_no_run_directory_counts_nothing_done_and_every_step_without_a_success(tmp_path):
    c = check(tmp_path)
    assert c.done == frozenset() and c.markers == {} and c.again == {}
    assert c.cleared == frozenset(ALL) and list(c.order) == ALL


def test_step_directories_with_no_marker_in_them_count_nothing_done(tmp_path):
    (tmp_path / "run" / "steps" / "g" / "2").mkdir(parents=True)
    (tmp_path / "run" / "steps" / "a").mkdir(parents=True)
    c = check(tmp_path)
    assert c.done == frozenset() and c.markers == {"a": None, "g/2": None} and c.again == {}
    assert c.cleared == frozenset(ALL)


def test_a_rerun_skips_what_succeeded_as_defined_and_runs_what_changed_failed_or_follows_a_rerun(tmp_path):
    check(tmp_path)  # writes the suite
    mark(tmp_path, "a")
    mark(tmp_path, "b", spec_hash="0" * 16)  # another definition succeeded: b runs, and c after it
    mark(tmp_path, "c")
    mark(tmp_path, "g/1")
    mark(tmp_path, "g/3", outcome="failed")
    c = check(tmp_path)
    assert c.done == frozenset({"a", "g/1"})
    assert c.again == {"b": "changed", "c": "dependency changed"}
    assert c.cleared == frozenset({"g/2", "g/3"})
    forced = check(tmp_path, force=True)
    assert forced.done == frozenset()
    assert forced.again == {"a": "forced", "b": "forced", "c": "forced", "g/1": "forced"}


def test_reading_the_markers_leaves_no_garbage_only_the_cyclic_collector_would_free(tmp_path):
    # The coordinator freezes its heap as submissions come in (fleet.control.heap): what
    # only the cyclic collector frees stays for good. read_markers' listings did, a set of
    # every step directory's name a submission, its `exists` a closure calling itself.
    import gc
    check(tmp_path)
    for step in ("a", "g/1", "g/2"):
        mark(tmp_path, step)
    gc.collect()
    gc.disable()
    try:
        out = submissions.read_markers(tmp_path / "run", ALL)
        assert set(out) == {"a", "g/1", "g/2"}
        assert gc.collect() == 0
    finally:
        gc.enable()
