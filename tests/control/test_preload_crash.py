"""A preload module whose import kills the interpreter (preload_crashes, tests/: SIGSEGV,
as a crash in a C extension): named with the signal, as a module that raises is, by
`fleet up --preload`, by an embedded `fleet run` and by `fleet validate --imports`.
Real processes throughout (agent, zygote, ZeroMQ, the importing child)."""

from __future__ import annotations

from fleetharness import assert_nothing_left, fleet, write_suite

WHY = "the zygote importing it was killed by SIGSEGV"


def test_fleet_up_with_a_preload_whose_import_kills_the_zygote_names_the_module_and_the_signal(tmp_path):
    r = fleet("up", "--run-dir", str(tmp_path / "run"), "--preload", "json,preload_crashes",
              cwd=tmp_path, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    # Before: "the zygote exited before saying hello", no module, no signal.
    assert f"node node1: module 'preload_crashes' failed to import: {WHY}" in r.stderr, r.stderr
    assert not (tmp_path / "run/fleet.json").exists()
    assert_nothing_left(tmp_path / "run")


def test_an_embedded_fleet_run_whose_preload_kills_the_zygote_is_refused_exit_2_under_suite_preload(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "crash"\nrun_dir = "run"\n'
                        'preload = ["json", "preload_crashes"]\n[[steps]]\nid = "never"\ncommand = "touch ran"\n')
    r = fleet("run", str(suite), "--nodes", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {suite}: field 'suite.preload': node node1: module 'preload_crashes' "
                      f"failed to import: {WHY}"], r.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run" / "steps").exists()
    assert_nothing_left(tmp_path / "run")


def test_validate_imports_names_the_module_whose_import_killed_the_importing_process_and_the_signal(tmp_path):
    suite = write_suite(tmp_path / "s.toml", '[suite]\npreload = ["json", "preload_crashes"]\n'
                        '[[steps]]\nid = "a"\ncall = "json:dumps"\n')
    r = fleet("validate", "--imports", str(suite), cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    # Before: "importing the suite's modules ended without an answer (exit -11): ", no module, no field.
    assert r.stderr.splitlines() == [f"error: {suite}: field 'suite.preload': module 'preload_crashes' cannot be "
                                     "imported: the process importing it was killed by SIGSEGV",
                                     "1 problem found; nothing was started"], r.stderr
