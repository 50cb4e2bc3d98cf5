"""A call step whose module the agents cannot import (fleet.node.child.resolve): its
reason says where they import from (the directory the fleet started in, their
PYTHONPATH) and how to check a suite, and its log has that line, not fleet's own
traceback. A module that is found but imports one that is not keeps its traceback."""

from __future__ import annotations

from fleetharness import REPO, fleet, write_suite


def test_a_call_step_whose_module_is_missing_names_where_the_agents_import_from_without_fleets_traceback(tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "lib"
    work.mkdir()
    elsewhere.mkdir()
    (work / "brokensteps.py").write_text("import no_such_dependency_q\n\ndef f():\n    pass\n")
    suite = write_suite(work / "s.toml", '[suite]\nname = "m"\nrun_dir = "run"\n'
                        '[[steps]]\nid = "gone"\ncall = "nowhere_steps_q:f"\n'
                        '[[steps]]\nid = "pkg"\ncall = "nowhere_pkg_q.sub:f"\n'
                        '[[steps]]\nid = "inner"\ncall = "brokensteps:f"\n')
    r = fleet("run", str(suite), "--nodes", "1", cwd=work, timeout=120, environ={"PYTHONPATH": f"{elsewhere}:{REPO}"})
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if "failed     gone:" in x)
    assert (f"gone: ModuleNotFoundError: No module named 'nowhere_steps_q': the agents import a call step's module "
            f"from {work} (the directory the fleet started in) and from ") in line, line
    assert str(elsewhere) in line and "fleet validate --imports SUITE" in line, line
    assert "No module named 'nowhere_pkg_q': the agents import" in r.stdout, r.stdout
    log = (work / "run" / "steps" / "gone" / "log").read_text()
    assert "Traceback" not in log and f"from {work} (the directory the fleet started in)" in log, log
    # The step's module found, one it imports not: the plain error, and the traceback through the module.
    inner = next(x for x in r.stdout.splitlines() if "failed     inner:" in x)
    assert "inner: ModuleNotFoundError: No module named 'no_such_dependency_q' (log" in inner, inner
    assert "brokensteps.py" in (work / "run" / "steps" / "inner" / "log").read_text()
