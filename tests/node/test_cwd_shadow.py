"""fleet's own processes do not import from the directory they start in.

`python -m` puts the current directory first on sys.path, and the coordinator, the
agents and the zygotes start in the user's (where `fleet run` ran): a `json.py` there
was imported in place of the standard library's and the fleet never came up
(fleet.wire.interpreter). Call steps and preloads still find the user's modules there.
"""

from __future__ import annotations

import sys

import pytest

from fleetharness import assert_nothing_left, events, python

SHADOWS = ("json", "signal", "select", "random", "copy", "string", "socket", "selectors", "subprocess",
           "resource")  # (resource: os.wait4 imports it at its first call, in the zygote)

SUITE = """\
[suite]
name = "shadow"
preload = ["myprep"]

[[steps]]
id = "hello"
call = "mysteps:hello"

[[steps]]
id = "shell"
command = "echo shell > out.txt"
deps = ["hello"]
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P (3.11+) leaves the current directory out")
def test_modules_named_as_the_standard_library_s_in_the_current_directory_do_not_stop_the_fleet(tmp_path):
    for name in SHADOWS:
        (tmp_path / f"{name}.py").write_text(
            f"import os\nopen(os.path.join({str(tmp_path)!r}, 'SHADOWED-{name}'), 'w').close()\n"
            f"raise SystemExit('the current directory\\'s {name}.py was imported')\n")
    (tmp_path / "mysteps.py").write_text("def hello():\n    open('hello.txt', 'w').write('hello')\n")
    (tmp_path / "myprep.py").write_text("READY = True\n")
    (tmp_path / "s.toml").write_text(SUITE)
    # The client as the `fleet` command runs it (its own directory first, not this one).
    r = python("-P", "-m", "fleet", "run", "s.toml", "--nodes", "1", cwd=tmp_path, timeout=120)
    run_dir = tmp_path / "runs" / "shadow"
    assert r.returncode == 0, (r.stdout, r.stderr, (run_dir / "coordinator.log").read_text()[-3000:])
    assert sorted(p.name for p in tmp_path.glob("SHADOWED-*")) == []
    exits = {e["step"]: e["outcome"] for e in events(run_dir) if e["kind"] == "exit"}
    assert exits == {"hello": "succeeded", "shell": "succeeded"}, exits
    assert (run_dir / "steps" / "hello" / "hello.txt").read_text() == "hello"  # the call step, found here
    assert_nothing_left(run_dir)
    # The suite's check of its modules, and one step run on its own, find them here too.
    r = python("-P", "-m", "fleet", "validate", "--imports", "s.toml", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = python("-P", "-m", "fleet", "step", "s.toml", "hello", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert sorted(p.name for p in tmp_path.glob("SHADOWED-*")) == []
