"""An installed fleet (a wheel, `pip install .`: the fleet package alone, no checkout
around it) finds its machine profiles, and a local fleet runs with none at all.

Before 2026-12-06 profiles were read only from the checkout's agents/, which an install
does not have: `fleet run` said "unknown machine 'local'; known machines: none". The
build (setup.py's build_py, which a wheel is made from) now copies agents/ into the
package, and `local` is built in. The build is run here as pip's backend runs it, in a
copy of the sources (it writes an egg-info beside them), with no network.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from fleetharness import completed

REPO = Path(__file__).resolve().parents[2]
SUITE = '[[steps]]\nid = "a"\ncommand = "true"\n'


def _env(lib: Path) -> dict:
    """This environment with only the built package importable: no checkout, no job."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "PBS_", "FLEET_")) and k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(lib)}


def _built(tmp_path: Path) -> Path:
    src, lib = tmp_path / "src", tmp_path / "lib"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in"):
        shutil.copy(REPO / name, src / name)
    for name in ("fleet", "agents", "examples", "jobscripts", "docs"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    r = completed([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], 120, cwd=src,
                  env=_env(src), text=True)
    assert r.returncode == 0, r.stderr
    return lib


def _fleet(lib: Path, cwd: Path, *args: str):
    return completed([sys.executable, "-m", "fleet", *args], 120, cwd=cwd, env=_env(lib), text=True)


def test_an_installed_fleet_carries_the_machine_profiles_and_runs_a_suite_on_a_local_fleet(tmp_path):
    lib = _built(tmp_path)
    assert sorted(p.name for p in (lib / "fleet" / "site" / "agents").glob("*.toml")) \
        == sorted(p.name for p in (REPO / "agents").glob("*.toml"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "s.toml").write_text(SUITE)
    where = completed([sys.executable, "-c", "import fleet; print(fleet.__file__)"], 60, cwd=work, env=_env(lib),
                      text=True)
    assert where.stdout.strip() == str(lib / "fleet" / "__init__.py")  # (the built copy, not the checkout)
    r = _fleet(lib, work, "run", "s.toml", "--run-dir", str(work / "rd"))
    assert r.returncode == 0, r.stderr
    assert "1 succeeded" in r.stdout
    r = _fleet(lib, work, "up", "--machine", "nosuch", "--run-dir", str(work / "rd2"))
    assert r.returncode == 2 and "known machines: aurora, local, pals, perlmutter-gpu, slurm" in r.stderr, r.stderr


def test_with_no_profile_anywhere_a_local_fleet_still_runs_on_the_built_in_local_profile(tmp_path):
    lib = _built(tmp_path)
    shutil.rmtree(lib / "fleet" / "site" / "agents", ignore_errors=True)  # (a build before 2026-12-06 made none)
    work = tmp_path / "work"
    work.mkdir()
    (work / "s.toml").write_text(SUITE)
    r = _fleet(lib, work, "run", "s.toml", "--run-dir", str(work / "rd"))
    assert r.returncode == 0, r.stderr
    r = _fleet(lib, work, "up", "--machine", "slurm", "--run-dir", str(work / "rd2"))
    assert r.returncode == 2 and "unknown machine 'slurm'; known machines: local (built in)" in r.stderr, r.stderr
    assert not (work / "rd2").exists()


def test_an_sdist_carries_the_profiles_and_a_package_named_agents_beside_an_install_does_not_hide_them(tmp_path):
    # Before: an sdist had no agents/ (a wheel built from it, none), and the checkout's
    # place, site-packages/agents, was read first: another distribution's `agents` package won.
    lib = _built(tmp_path)
    src = tmp_path / "src"
    r = completed([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "dist")], 120, cwd=src,
                  env=_env(src), text=True)
    assert r.returncode == 0, r.stderr
    [sdist] = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        shipped = sorted(Path(n).name for n in t.getnames() if Path(n).parent.name == "agents" and n.endswith(".toml"))
    assert shipped == sorted(p.name for p in (REPO / "agents").glob("*.toml"))
    with tarfile.open(sdist) as t:  # (before 2026-12-06: no examples/, jobscripts/ or docs/)
        names = {"/".join(Path(n).parts[1:]) for n in t.getnames()}
    for top, pattern in (("examples", "*.toml"), ("jobscripts", "*"), ("docs", "*.md")):
        assert {f"{top}/{p.name}" for p in (REPO / top).glob(pattern)} <= names, top
    (lib / "agents").mkdir()
    (lib / "agents" / "__init__.py").write_text("")
    work = tmp_path / "work"
    work.mkdir()
    env = {**_env(lib), "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1"}
    r = completed([sys.executable, "-c", "from fleet.site import profiles; print(profiles.load('slurm').name)"],
                  60, cwd=work, env=env, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "slurm", r.stderr


def test_an_installed_fleet_carries_the_demo_suite_and_the_job_scripts_and_says_where_the_demo_is(tmp_path):
    # Before 2026-12-06 the build carried neither, and `fleet run examples/demo.toml` as the
    # README says was "examples/demo.toml: no such file" and nothing more.
    lib = _built(tmp_path)
    for top, pattern in (("examples", "*.toml"), ("jobscripts", "*")):
        assert sorted(p.name for p in (lib / "fleet" / top).iterdir()) \
            == sorted(p.name for p in (REPO / top).glob(pattern)), top
    assert os.access(lib / "fleet" / "jobscripts" / "slurm.sbatch", os.X_OK)
    work = tmp_path / "work"
    work.mkdir()
    r = _fleet(lib, work, "run", "examples/demo.toml")
    assert r.returncode == 2 and f"no such file (this installed fleet carries a copy: cp -r {lib / 'fleet' / 'examples'} ." \
        in r.stderr, r.stderr
    shutil.copytree(lib / "fleet" / "examples", work / "examples")  # (what the message says to do)
    r = _fleet(lib, work, "validate", "examples/demo.toml")
    assert r.returncode == 0, r.stderr
    r = _fleet(lib, work, "run", "nosuch.toml")
    assert r.returncode == 2 and "error: nosuch.toml: no such file\n" in r.stderr, r.stderr


def test_a_wheel_built_from_the_sources_carries_the_demo_suite_and_the_job_scripts(tmp_path):
    wheel = pytest.importorskip("wheel", reason="building a wheel offline (no build isolation) needs the wheel "
                                "package here; the build_py and sdist tests above cover what goes in")
    _built(tmp_path)
    r = completed([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                   "-w", str(tmp_path / "w"), str(tmp_path / "src")], 120,
                  env=_env(Path(wheel.__file__).parents[1]), text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    [whl] = (tmp_path / "w").glob("*.whl")
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
    for top, pattern in (("examples", "*.toml"), ("jobscripts", "*"), ("site/agents", "*.toml")):
        assert {f"fleet/{top}/{p.name}" for p in (REPO / top.replace("site/", "")).glob(pattern)} <= names, top
