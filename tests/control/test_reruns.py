"""The everyday path: `fleet up`, then `fleet run suite.toml` as often as needed, then
`fleet down` — reruns, failures run again, changed steps and their dependents, and the
records that say what ran against what. Real coordinator, agents, zygotes and fork."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetharness import assert_nothing_left, finish, fleet, records, spawn, wait_for, write_suite

from fleet.control.checks import checked_suite
from fleet.wire import events as E
from fleet.wire import records as R


@pytest.fixture
def live(tmp_path):
    """A fleet started with `fleet up` on two pretend nodes; brought down and checked
    for leftovers after the test."""
    run_dir = tmp_path / "run"
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, check=True)
    try:
        yield run_dir
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def run(suite: Path, run_dir: Path, *extra: str):
    return fleet("run", str(suite), "--run-dir", str(run_dir), *extra, cwd=suite.parent, timeout=90)


def runs(run_dir: Path) -> list[str]:
    path = run_dir / "runs.txt"
    return path.read_text().split() if path.exists() else []


def marker(run_dir: Path, step: str) -> dict:
    return json.loads((R.fleet_dir(run_dir, step) / R.DONE).read_text())


def audit_lines(run_dir: Path) -> dict[str, str]:
    r = fleet("audit", str(run_dir), cwd=run_dir.parent, timeout=60)
    return {line.split()[1]: line.split()[0] for line in r.stdout.splitlines() if len(line.split()) > 1
            and not line[0].isdigit()}


def assert_audit_counts_reruns(run_dir: Path) -> None:
    """fleet audit exits 0 on this run dir, with every rerun a rerun, none a DUPLICATE."""
    r = fleet("audit", str(run_dir), cwd=run_dir.parent, timeout=60)
    assert r.returncode == 0 and "DUPLICATE" not in r.stdout, r.stdout + r.stderr


def chain(tmp_path: Path, name: str = "s.toml", a: str = "v1", extra: str = "") -> Path:
    """a -> b -> c, and d on its own; a says its version in runs.txt, the others their id."""
    out = tmp_path / "run" / "runs.txt"
    return write_suite(tmp_path / name, f"""
[suite]
name = "chain"
[[steps]]
id = "a"
command = ["sh", "-c", "{extra}echo a-{a} >> {out}"]
[[steps]]
id = "b"
call = "fleet_steps:count_runs"
deps = ["a"]
[[steps]]
id = "c"
call = "fleet_steps:count_runs"
deps = ["b"]
[[steps]]
id = "d"
call = "fleet_steps:count_runs"
""")


def test_force_on_a_live_fleet_reruns_every_step_and_never_deletes_a_record_before_replacing_it(tmp_path, live):
    suite = chain(tmp_path, extra="sleep 1.5; ")
    assert run(suite, live).returncode == 0
    assert sorted(runs(live)) == ["a-v1", "b", "c", "d"]
    first = {s: marker(live, s) for s in "abcd"}
    p = spawn("run", str(suite), "--run-dir", str(live), "--force", cwd=tmp_path)
    try:
        wait_for(lambda: len([e for e in records(live) if isinstance(e, E.Started) and e.step == "a"]) == 2,
                 30, "the forced a to start")
        # While a runs again, every step keeps its completion record (b and c theirs from
        # before, as they wait for a; d may have run again already): nothing is missing.
        assert {s: marker(live, s)["id"] for s in "abc"} == {s: first[s]["id"] for s in "abc"}
        assert set(audit_lines(live).values()) == {"succeeded"}
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            finish(p, timeout=30)  # (its group killed if it overruns)
    assert p.returncode == 0, out + err
    assert sorted(runs(live)) == ["a-v1", "a-v1", "b", "b", "c", "c", "d", "d"]
    for s in "abcd":  # each replaced by its new outcome, which kept every 0.1 field
        m = marker(live, s)
        assert m["id"] != first[s]["id"]
        assert {"outcome", "spec", "attempt", "node", "work_s", "ended_at", "fleet"} <= set(m)
        assert len(R.attempts(live, s)) == 2
    assert marker(live, "b")["deps"] == {"a": marker(live, "a")["id"]}
    assert set(audit_lines(live).values()) == {"succeeded"}
    assert_audit_counts_reruns(live)


def test_a_step_that_failed_in_an_earlier_submission_runs_again_with_its_attempt_limit_anew(tmp_path, live):
    flag = tmp_path / "flag"
    suite = write_suite(tmp_path / "s.toml", f"""
[suite]
name = "again"
[[steps]]
id = "first"
call = "fleet_steps:count_runs"
[[steps]]
id = "flaky"
call = "fleet_steps:fail_unless_flag"
args = {{ flag = "{flag}" }}
deps = ["first"]
[[steps]]
id = "last"
call = "fleet_steps:count_runs"
deps = ["flaky"]
[[steps]]
id = "doomed"
call = "fleet_steps:always_fails"
retries = 1
""")
    # Three submissions: doomed's two attempts each time (6 > the default limit of 5
    # attempts across fleets: a submission to a live fleet counts from its own start).
    for n in (1, 2, 3):
        r = run(suite, live)
        assert r.returncode == 1
        assert "failed     doomed" in r.stdout and "stopped" not in r.stdout, r.stdout
        assert "earlier submission" not in r.stdout
        assert len(R.attempts(live, "doomed")) == 2 * n
        assert len(R.attempts(live, "flaky")) == n
    assert runs(live) == ["first"]
    flag.write_text("go")
    r = run(suite, live)
    assert r.returncode == 1 and "succeeded  flaky" in r.stdout and "skipped    first" in r.stdout, r.stdout
    assert runs(live) == ["first", "last"]
    assert [a["outcome"] for a in sorted(R.attempts(live, "flaky"), key=lambda a: a["ended_at"])] == [
        "failed", "failed", "failed", "succeeded"]
    # Forced again, it fails: that outcome replaces the success, so the next run tries again.
    flag.unlink()
    r = run(suite, live, "--force")
    assert r.returncode == 1 and "failed     flaky" in r.stdout, r.stdout
    assert audit_lines(live)["flaky"] == "failed"
    r = run(suite, live)
    assert "failed     flaky" in r.stdout and "skipped    first" in r.stdout, r.stdout
    assert len(R.attempts(live, "flaky")) == 6


def test_a_changed_step_replaces_the_old_one_and_reruns_its_dependents_and_nothing_else(tmp_path, live):
    assert run(chain(tmp_path, a="v1"), live).returncode == 0
    assert sorted(runs(live)) == ["a-v1", "b", "c", "d"]
    r = run(chain(tmp_path, a="v2"), live)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "different definition" not in r.stderr
    assert runs(live)[4:] == ["a-v2", "b", "c"]
    assert "skipped    d" in r.stdout
    # The same suite again: everything is done now.
    r = run(chain(tmp_path, a="v2"), live)
    assert r.returncode == 0 and "4 skipped in" in r.stdout, r.stdout
    assert len(runs(live)) == 7
    assert_audit_counts_reruns(live)


def test_a_changed_running_step_is_let_finish_then_the_new_definition_runs_and_a_waiting_one_is_replaced(
        tmp_path, live):
    out, flag = live / "runs.txt", tmp_path / "flag"
    def suite(v: str) -> Path:
        # a runs until the flag exists: until the changed suite is in (a fixed sleep raced
        # the second `fleet run`'s start on a loaded machine).
        return write_suite(tmp_path / f"s-{v}.toml", f"""
[suite]
name = "swap"
[[steps]]
id = "a"
command = ["sh", "-c", "while [ ! -e {flag} ]; do sleep 0.05; done; echo a-{v} >> {out}"]
[[steps]]
id = "w"
command = ["sh", "-c", "echo w-{v} >> {out}"]
deps = ["a"]
""")
    first = spawn("run", str(suite("v1")), "--run-dir", str(live), cwd=tmp_path)
    second = None
    try:
        wait_for(lambda: any(isinstance(e, E.Started) and e.step == "a" for e in records(live)), 30, "a to start")
        second = spawn("run", str(suite("v2")), "--run-dir", str(live), cwd=tmp_path)
        wait_for(lambda: sum(isinstance(e, E.Submitted) for e in records(live)) == 2, 60, "the changed suite in")
        flag.touch()
        code, so, se = finish(second, timeout=60)
        assert code == 0, so + se
        o, e = first.communicate(timeout=60)
    finally:
        flag.touch()
        for p in (first, second):
            if p is not None and p.poll() is None:
                finish(p, timeout=30)
    # The old a finished, then the new one ran; the waiting w ran only as changed.
    assert runs(live) == ["a-v1", "a-v2", "w-v2"]
    assert first.returncode == 0, o + e
    new = {s.id: s for s in checked_suite(suite("v2"), check_inputs=False)[0].steps}
    assert marker(live, "a")["spec"] == R.spec_hash(new["a"])
    assert marker(live, "w")["deps"] == {"a": marker(live, "a")["id"]}
    assert len(R.attempts(live, "a")) == 2


def test_a_step_whose_dependency_ran_again_since_it_succeeded_runs_again(tmp_path, live):
    full = chain(tmp_path)
    assert run(full, live).returncode == 0
    only_a = write_suite(tmp_path / "a.toml", full.read_text().split("[[steps]]\nid = \"b\"")[0])
    assert run(only_a, live, "--force").returncode == 0
    assert runs(live)[4:] == ["a-v1"]
    # b's record says it ran against the a before: b and c run again, a and d do not.
    r = run(full, live)
    assert r.returncode == 0
    assert runs(live)[5:] == ["b", "c"]
    assert_audit_counts_reruns(live)


def test_markers_written_by_0_1_count_as_done_when_their_dependencies_are_done(tmp_path):
    suite = chain(tmp_path)
    run_dir = tmp_path / "run"
    specs = {s.id: s for s in checked_suite(suite, check_inputs=False)[0].steps}
    for step in ("a", "b", "d"):  # no marker for c; 0.1's fields only
        d = R.fleet_dir(run_dir, step)
        d.mkdir(parents=True)
        (d / R.DONE).write_text(json.dumps({"outcome": "succeeded", "spec": R.spec_hash(specs[step]), "attempt": 1,
                                            "node": "node1", "work_s": 0.1, "ended_at": 1.0, "fleet": "old"}))
    fleet("up", "--run-dir", str(run_dir), "--nodes", "2", cwd=tmp_path, check=True)
    try:
        r = run(suite, run_dir)
        assert r.returncode == 0, r.stdout + r.stderr
        assert runs(run_dir) == ["c"]
        assert marker(run_dir, "c")["deps"] == {"b": R.marker_id(marker(run_dir, "b"))}
        r = run(suite, run_dir)
        assert r.returncode == 0 and "4 skipped in" in r.stdout, r.stdout
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_a_rerun_lists_the_first_hundred_steps_done_before_and_counts_the_rest(tmp_path, live):
    from fleet.control.followlines import SKIPPED_LISTED
    n = SKIPPED_LISTED + 23
    suite = write_suite(tmp_path / "many.toml", f"""
[suite]
name = "many"
[[steps]]
id = "s/{{i}}"
array = "1-{n}"
call = "fleet_steps:writes_nothing"
""")
    first = run(suite, live)
    assert first.returncode == 0 and f"{n} succeeded" in first.stdout, first.stdout + first.stderr
    again = run(suite, live)
    lines = again.stdout.splitlines()
    listed = [line for line in lines if line.startswith("[") and line.split("]", 1)[1].split()[0] == "skipped"]
    assert again.returncode == 0 and len(listed) == SKIPPED_LISTED, again.stdout
    assert f"  ... and {n - SKIPPED_LISTED} more skipped, not listed" in lines
    assert f"suite 'many': {n} skipped in" in again.stdout


def test_tuning_how_steps_are_scheduled_reruns_nothing_on_a_live_fleet_and_in_a_new_one(tmp_path, live):
    # (priority, estimate, retries, concurrent and task were part of a step's definition:
    # tuning an estimate from `fleet report` reran the whole suite)
    assert run(chain(tmp_path), live).returncode == 0
    first = marker(live, "a")
    assert sorted(runs(live)) == ["a-v1", "b", "c", "d"]
    suite = chain(tmp_path, name="tuned.toml")
    text = suite.read_text().replace('name = "chain"\n', 'name = "chain"\n[defaults]\nestimate = 7.5\nretries = 2\n', 1)
    suite.write_text(text.replace('id = "d"\n', 'id = "d"\npriority = 5\nconcurrent = false\ntask = "t9"\n', 1))
    for how in ("live", "new"):
        if how == "new":
            fleet("down", "--run-dir", str(live), cwd=tmp_path, timeout=60)
            r = fleet("run", str(suite), "--run-dir", str(live), cwd=tmp_path, timeout=90)
        else:
            r = run(suite, live)
        assert r.returncode == 0 and "4 skipped" in r.stdout, (how, r.stdout + r.stderr)
        assert sorted(runs(live)) == ["a-v1", "b", "c", "d"], (how, runs(live))
    assert marker(live, "a") == first
    # What a step does is still its definition: a changed command runs it again.
    r = fleet("run", str(chain(tmp_path, name="v2.toml", a="v2")), "--run-dir", str(live), cwd=tmp_path,
              timeout=90)
    assert r.returncode == 0 and runs(live)[4:] == ["a-v2", "b", "c"], runs(live)
    fleet("up", "--run-dir", str(live), "--nodes", "2", cwd=tmp_path, check=True)  # (for the fixture's down)
