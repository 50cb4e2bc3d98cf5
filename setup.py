"""The build's one step pyproject.toml cannot say: the machine profiles of agents/ (at
the repository's top, where a checkout and an editable install read them) are copied
into the built package as fleet/site/agents/, so that a wheel or `pip install .`
carries them (fleet.site.profiles reads them there). Without it an installed fleet
found no profile, not even `local`."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithProfiles(build_py):
    """build_py, and agents/*.toml copied to the built fleet/site/agents/."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # (an editable install reads agents/ where it is)
            return
        profiles = sorted((HERE / "agents").glob("*.toml"))
        if not profiles:  # (an sdist without them: MANIFEST.in carries agents/)
            raise SystemExit(f"fleet's build: no machine profiles in {HERE / 'agents'}")
        dest = Path(self.build_lib) / "fleet" / "site" / "agents"
        dest.mkdir(parents=True, exist_ok=True)
        for profile in profiles:
            shutil.copyfile(profile, dest / profile.name)


setup(cmdclass={"build_py": BuildWithProfiles})
