"""What a step submits is read as a suite is (defects found on 2026-12-06): text that
cannot be UTF-8 is refused where it is submitted, naming step and field, not found when
the child launches; a submit file with a byte-order mark, or empty, reads as a suite
file does. Real `fleet run`s; step functions in tests/children_steps.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from children_steps import ran
from fleetharness import assert_nothing_left, events, exits, run_named

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fleet's nodes need Linux")


def run(tmp_path: Path, body: str, name: str = "kids", timeout: float = 120.0):
    return run_named(tmp_path, body, name, timeout)


def test_a_file_name_that_is_not_utf8_in_any_field_ctx_submit_takes_is_refused_there_naming_step_and_field(tmp_path):
    # (it was taken; the child then failed at its launch, "UnicodeEncodeError: ... surrogates
    # not allowed", pointing at a log that was never made)
    r, run_dir = run(tmp_path, '[[steps]]\nid = "p"\ncall = "children_steps:not_utf8_submit"\nretries = 0\n')
    assert r.returncode == 0, r.stdout + r.stderr
    said = {x["field"]: x for x in ran(run_dir) if x["what"] in ("refused", "taken")}
    assert set(said) == {"command", "env", "args", "workdir", "outputs"}, said
    for field, x in said.items():
        assert x["what"] == "refused", x
        (problem,) = x["problems"]
        assert problem.startswith(f"p: ctx.submit: step 'p/x_{field}': field '{field}': '"), problem
        assert "f\\udcff' holds '\\udcff' at" in problem, problem
        assert "a lone surrogate (bytes that are not UTF-8)" in problem, problem
    assert not [e for e in events(run_dir) if e["kind"] == "exit" and e["step"].startswith("p/")]
    assert_nothing_left(run_dir)


def test_a_json_submit_file_holding_text_that_is_not_utf8_fails_its_parent_naming_the_field_not_the_child(tmp_path):
    r, run_dir = run(tmp_path, """
[[steps]]
id = "p"
protocol = "steps"
retries = 0
command = '''
[ "$FLEET_PHASE" = 0 ] || exit 0
printf '{"steps": [{"id": "k", "command": ["echo", "\\\\udcff"]}]}' > "$FLEET_SUBMIT_DIR/a.json"
exit 3
'''
""")
    assert r.returncode == 1, r.stdout + r.stderr
    end = exits(run_dir, "p")[-1]  # (the node's "wait", then the fleet's refusal)
    assert end["outcome"] == "failed" and "step 'p/k': field 'command':" in end["reason"], end
    assert "a lone surrogate" in end["reason"], end
    assert not exits(run_dir, "p/k")
    assert_nothing_left(run_dir)


def test_a_submit_file_with_a_byte_order_mark_or_empty_is_read_as_a_suite_file_is(tmp_path):
    # (a byte-order mark failed the parent, "Invalid statement (at line 1, column 1)", and
    # an empty file "expected [[steps]] tables", where a suite file reads with either)
    script = tmp_path / "submit.sh"
    script.write_bytes(b"""#!/bin/sh
[ "$FLEET_PHASE" = 0 ] || exit 0
printf '\\357\\273\\277[[steps]]\\nid = "k"\\ncommand = "true"\\n' > "$FLEET_SUBMIT_DIR/a.toml"
: > "$FLEET_SUBMIT_DIR/b.toml"
exit 3
""")
    script.chmod(0o755)
    r, run_dir = run(tmp_path, f'[[steps]]\nid = "p"\nprotocol = "steps"\nretries = 0\ncommand = ["{script}"]\n')
    assert r.returncode == 0, r.stdout + r.stderr
    assert [e["outcome"] for e in exits(run_dir, "p")] == ["wait", "succeeded"]
    assert [e["outcome"] for e in exits(run_dir, "p/k")] == ["succeeded"]
    assert_nothing_left(run_dir)
