"""`fleet run --only` given more than once selects every step it names (the limits
audit: `--only a --only b` ran b alone, the last one winning without a word)."""

from __future__ import annotations

from fleetharness import assert_nothing_left, events, fleet, write_suite


def test_only_given_twice_runs_the_steps_both_name_and_no_other(tmp_path):
    suite = write_suite(tmp_path / "s.toml", """
[suite]
name = "twice"
run_dir = "run"
[[steps]]
id = "a"
command = "true"
[[steps]]
id = "b"
command = "true"
[[steps]]
id = "c"
command = "true"
""")
    r = fleet("run", str(suite), "--only", "a", "--only", "b", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = sorted(e["step"] for e in events(tmp_path / "run") if e["kind"] == "exit")
    assert ran == ["a", "b"], r.stdout
    assert_nothing_left(tmp_path / "run")
