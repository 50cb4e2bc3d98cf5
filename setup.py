"""The build's one step pyproject.toml cannot say: files at the repository's top that an
installed fleet needs or points its users at are copied into the built package, so that
a wheel or `pip install .` carries them:

- agents/*.toml (the machine profiles) as fleet/site/agents/, which fleet.site.profiles
  reads (a checkout and an editable install read agents/ where it is). Without them an
  installed fleet found no profile, not even `local`.
- examples/*.toml (the README's demo suite) as fleet/examples/ and jobscripts/* (the
  Slurm and PBS job scripts) as fleet/jobscripts/: copies for the user to take
  (fleet.site.shipped finds them; `fleet run examples/demo.toml` where there is none says
  where the installed one is)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# (where at the top, which files, where in the built package)
SHIPPED = (("agents", "*.toml", "fleet/site/agents"),
           ("examples", "*.toml", "fleet/examples"),
           ("jobscripts", "*", "fleet/jobscripts"))


class BuildWithShipped(build_py):
    """build_py, and the files of SHIPPED copied into the built package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # (an editable install reads them where they are)
            return
        for top, pattern, into in SHIPPED:
            files = sorted(p for p in (HERE / top).glob(pattern) if p.is_file())
            if not files:  # (an sdist without them: MANIFEST.in carries them)
                raise SystemExit(f"fleet's build: no {pattern} in {HERE / top}")
            dest = Path(self.build_lib) / into
            dest.mkdir(parents=True, exist_ok=True)
            for f in files:
                shutil.copy(f, dest / f.name)  # (with its mode: a job script stays executable)


setup(cmdclass={"build_py": BuildWithShipped})
