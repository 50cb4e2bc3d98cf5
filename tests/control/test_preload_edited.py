"""A preloaded module edited while its fleet is up: the steps run the code their zygote
imported (the point of preloading), and say so in their logs. Through the real command
line: `fleet up`, `fleet run`, real zygotes and forks."""

from __future__ import annotations

import os

from fleetharness import assert_nothing_left, fleet, write_suite

MODULE = "VERSION = {v}\n\n\ndef version(ctx):\n    with open('version', 'w') as f:\n        f.write(str(VERSION))\n"


def _suite(tmp_path, name: str, preload: str) -> str:
    return str(write_suite(tmp_path / f"{name}.toml", f'[suite]\nname = "{name}"\n{preload}\n'
                           f'[[steps]]\nid = "{name}"\ncall = "editedmod:version"\n'))


def test_a_step_running_a_preloaded_module_edited_since_says_so_in_its_log_and_runs_the_code_as_imported(
        tmp_path):
    mod = tmp_path / "editedmod.py"  # the fleet's directory: first on its zygotes' sys.path
    mod.write_text(MODULE.format(v=1))
    run = tmp_path / "run"
    fleet("up", "--run-dir", str(run), cwd=tmp_path, check=True, timeout=60)
    try:
        r = fleet("run", _suite(tmp_path, "first", 'preload = ["editedmod"]'), "--run-dir", str(run), cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert (run / "steps/first/version").read_text() == "1"
        assert "changed after" not in (run / "steps/first/log").read_text()
        mod.write_text(MODULE.format(v=2))
        stat = mod.stat()  # a later time whatever the filesystem's timestamp granularity
        os.utime(mod, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**10))
        # A suite that preloads nothing: the zygote has the module all the same.
        r = fleet("run", _suite(tmp_path, "second", ""), "--run-dir", str(run), cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert (run / "steps/second/version").read_text() == "1"  # as imported, documented
        log = (run / "steps/second/log").read_text()
        assert (f"fleet: {mod} changed after this node's zygote imported module 'editedmod' (preloaded): this step "
                "runs the code as imported then; restart the fleet (fleet down, fleet up) to run the new code\n"
                in log), log
    finally:
        fleet("down", "--run-dir", str(run), cwd=tmp_path, timeout=60)
    assert_nothing_left(run)


def test_a_preload_that_leaves_a_module_whose_attributes_raise_is_taken_and_its_steps_run(tmp_path):
    # The edit check looks at every module a preload brought in; one whose module-level
    # __getattr__ raises (a lazy loader) made the zygote refuse the preload that imported it.
    (tmp_path / "lazy_bad.py").write_text("def __getattr__(name):\n    raise ImportError(name)\n")
    (tmp_path / "bad_pre.py").write_text("import lazy_bad\ndel lazy_bad.__file__\n\n\n"
                                         "def work(ctx):\n    open('ran', 'w').close()\n")
    suite = write_suite(tmp_path / "s.toml", '[suite]\nname = "lazy"\npreload = ["bad_pre"]\n'
                        '[[steps]]\nid = "a"\ncall = "bad_pre:work"\n')
    run = tmp_path / "run"
    r = fleet("run", str(suite), "--run-dir", str(run), "--nodes", "1", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run / "steps/a/ran").exists()
    assert_nothing_left(run)
