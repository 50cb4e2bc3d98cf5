"""The report's families (fleet.report.families): children listed under the step that
submitted them, as their records say, from real runs."""

from __future__ import annotations

import json

from fleetharness import events, fleet, write_suite

ARRAY_CHILDREN = '''
[suite]
name = "fam"
run_dir = "run"
[[steps]]
id = "p"
protocol = "steps"
command = """
if [ "$FLEET_PHASE" = 0 ]; then
  printf '[[steps]]\\\\nid = "c/{i}"\\\\narray = "0-2"\\\\ncommand = "true"\\\\n' > "$FLEET_SUBMIT_DIR/k.toml"
  exit 3
fi
exit 0
"""
[[steps]]
id = "q"
command = "true"
[[steps]]
id = "q/{i}"
array = "0-1"
command = "true"
deps = ["q"]
'''


def test_array_children_are_listed_under_their_parent_and_a_suites_own_array_under_nobody(tmp_path):
    # (before: the id cut at its last "/" named the parent, so p/c/0..2 were nobody's
    # children, p/c being no step, and the suite's own q/0 and q/1 were q's)
    suite = write_suite(tmp_path / "s.toml", ARRAY_CHILDREN)
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "run"
    assert {e["step"]: e.get("parent") for e in events(run) if e["kind"] == "step"} == {
        "p": None, "q": None, "q/0": None, "q/1": None, "p/c/0": "p", "p/c/1": "p", "p/c/2": "p"}
    j = json.loads(fleet("report", str(run), "--json", cwd=tmp_path, timeout=60, check=True).stdout)
    assert [(f["step"], f["children"], f["by_outcome"]) for f in j["families"]] == [("p", 3, {"succeeded": 3})]
    text = fleet("report", str(run), cwd=tmp_path, timeout=60, check=True).stdout
    assert "3 submitted by 1 step(s)" in text and "p [succeeded]: 3 children (3 succeeded)" in text, text
