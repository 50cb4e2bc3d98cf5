"""Machine profiles: how agents start on a kind of machine, which cores the site
holds back, how GPUs are made visible and how MPI steps are launched.

Profiles are small TOML files in agents/ (and in $FLEET_MACHINES, which wins).
`fleet up --machine NAME` picks one; otherwise it is detected from the environment.
agents/ is the repository's, where a checkout or an editable install runs; an installed
fleet (a wheel, `pip install .`) carries a copy as fleet/site/agents/ (setup.py copies it
at build time). Before 2026-12-06 an installed fleet found no profile at all; `local`
is now also built in, should no local.toml be found. A profile file must say its
`launcher` (from 2026-12-07; before, one that did not was a local fleet, on the first
node of a batch job alone).
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from fleet.core import spelling

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LAUNCHERS = ("local", "slurm", "pals")
MPI_LAUNCHERS = ("srun", "pals", "hydra")
GPU_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "")
# Level Zero's ZE_FLAT_DEVICE_HIERARCHY values ("": fleet sets none, the node's own holds).
ZE_HIERARCHIES = ("FLAT", "COMPOSITE", "COMBINED", "")
MAX_GPUS_PER_NODE = 4_096  # as `fleet simulate --gpus-per-node` takes (fleet.cli_options)


# What a profile must say. `launcher` was "local" unsaid before 2026-12-07: in a batch job
# of many nodes such a profile's fleet ran on the job's first node alone.
_SAID = {"launcher": f"how agents start: {', '.join(map(repr, LAUNCHERS))} (before 2026-12-07 it meant 'local')"}


_FIELDS = {"description", "launcher", "mpi", "gpu_var", "held_back_cores", "agent_flags", "mpi_flags", "advertise",
           "gpus_per_node", "ze_flat_device_hierarchy"}


class ProfileError(ValueError):
    pass


@dataclass(frozen=True)
class Profile:
    """One machine kind (docs/operations.md, "Machine profiles", says what each field means)."""

    name: str
    path: str
    description: str = ""
    launcher: str = "local"
    mpi: str = "hydra"
    gpu_var: str = "CUDA_VISIBLE_DEVICES"
    held_back_cores: tuple[int, ...] = ()
    agent_flags: tuple[str, ...] = ()
    mpi_flags: tuple[str, ...] = ()
    advertise: str = ""  # the address, host name or interface (hsn0) agents reach the coordinator at
    gpus_per_node: int = 0  # GPUs a node has when gpu_var is not set there (0: not stated)
    # ZE_FLAT_DEVICE_HIERARCHY for every step and rank: None is the default for gpu_var
    # (FLAT with ZE_AFFINITY_MASK, so that the mask's numbers are certain; else unset),
    # "" sets nothing.
    ze_hierarchy: str | None = None

    @functools.cached_property  # (read at every step's launch: made once; not to be changed)
    def gpu_env(self) -> dict[str, str]:
        """Variables fleet sets for every step and rank beside the GPU variable, after the
        step's own env: how the GPU variable's numbers are to be read."""
        h = ("FLAT" if self.gpu_var == "ZE_AFFINITY_MASK" else "") if self.ze_hierarchy is None else self.ze_hierarchy
        return {"ZE_FLAT_DEVICE_HIERARCHY": h} if h else {}


def search_path() -> list[Path]:
    """Where profiles are read from, the first that has a name winning: $FLEET_MACHINES's
    directories, then the copy an install carries (fleet/site/agents/), else the
    repository's agents/ (a checkout, an editable install)."""
    dirs = []
    if os.environ.get("FLEET_MACHINES"):
        dirs += [Path(p) for p in os.environ["FLEET_MACHINES"].split(os.pathsep) if p]
    here = Path(__file__).resolve()
    installed = here.parent / "agents"
    # The copy an install carries first: in site-packages, the checkout's place (parents[2])
    # is site-packages itself, where another distribution's package may be named `agents`.
    dirs.append(installed if installed.is_dir() else here.parents[2] / "agents")
    return dirs


def available() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for d in reversed(search_path()):
        if d.is_dir():
            for p in sorted(d.glob("*.toml")):
                out[p.stem] = p
    return dict(sorted(out.items()))


def parse_profile(name: str, path: Path, text: str) -> Profile:
    where = str(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{where}: not valid TOML: {e}") from None
    if set(raw) != {"machine"}:
        raise ProfileError(f"{where}: expected exactly one [machine] table, found {sorted(raw) or 'nothing'}")
    m = raw["machine"]
    problems = []
    known = _FIELDS
    for k in m:
        if k not in known:
            problems.append(f"{where}: field 'machine.{k}': unknown field" + spelling.hint(k, known))

    def choice(key, options, default):  # (default None: the field is required)
        v = m.get(key, default)
        if v not in options:
            problems.append(f"{where}: field 'machine.{key}': " + (f"missing; say {_SAID[key]}" if v is None else
                            f"expected one of {', '.join(repr(o) for o in options)}, got {v!r}"))
            return default
        return v

    def strings(key):
        v = m.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            problems.append(f"{where}: field 'machine.{key}': expected a list of strings, got {v!r}")
            return ()
        return tuple(v)

    held = m.get("held_back_cores", [])
    if not isinstance(held, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in held):
        problems.append(f"{where}: field 'machine.held_back_cores': expected a list of core ids, got {held!r}")
        held = []
    gpus = m.get("gpus_per_node", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or not 0 <= gpus <= MAX_GPUS_PER_NODE:
        problems.append(f"{where}: field 'machine.gpus_per_node': expected a count of GPUs "
                        f"(0 to {MAX_GPUS_PER_NODE}), got {gpus!r}")
        gpus = 0

    def string(key):
        v = m.get(key, "")
        if not isinstance(v, str):
            problems.append(f"{where}: field 'machine.{key}': expected a string")
            return ""
        return v

    gpu_var = choice("gpu_var", GPU_VARS, "CUDA_VISIBLE_DEVICES")
    hierarchy = None
    if "ze_flat_device_hierarchy" in m:
        hierarchy = choice("ze_flat_device_hierarchy", ZE_HIERARCHIES, "")
        if hierarchy and gpu_var != "ZE_AFFINITY_MASK":
            problems.append(f"{where}: field 'machine.ze_flat_device_hierarchy': only for gpu_var = "
                            f"\"ZE_AFFINITY_MASK\" (this profile's is {gpu_var!r})")
    prof = Profile(name, where, string("description"), choice("launcher", LAUNCHERS, None),
                   choice("mpi", MPI_LAUNCHERS, "hydra"), gpu_var,
                   tuple(held), strings("agent_flags"), strings("mpi_flags"), string("advertise"), gpus, hierarchy)
    if problems:
        raise ProfileError("\n".join(problems))
    return prof


def load(name: str) -> Profile:
    """The named profile, or ProfileError naming the known ones (`local`, found nowhere,
    is this machine with the defaults: a local fleet needs nothing a site would say)."""
    profiles = available()
    path = profiles.get(name)
    if path is None and name == "local":
        return Profile("local", "built in", "this machine, no batch system")
    if path is None:
        known = list(profiles) + ([] if "local" in profiles else ["local (built in)"])
        raise ProfileError(f"unknown machine {name!r}; known machines: {', '.join(known)}"
                           f" (profiles are read from {', '.join(map(str, search_path()))})")
    return parse_profile(name, path, path.read_text())


def detect(env: Mapping[str, str] | None = None) -> str:
    """The profile name for this environment: $FLEET_MACHINE, else by batch system."""
    env = os.environ if env is None else env
    if env.get("FLEET_MACHINE"):
        return env["FLEET_MACHINE"]
    if env.get("SLURM_JOB_ID"):
        return "slurm"
    if env.get("PBS_JOBID"):
        return "pals"
    return "local"


def detected_by(env: Mapping[str, str] | None = None) -> str:
    """What chose the profile detect() names, in words for a message about it."""
    env = os.environ if env is None else env
    if env.get("FLEET_MACHINE"):
        return "$FLEET_MACHINE"
    if env.get("SLURM_JOB_ID") or env.get("PBS_JOBID"):
        return "the batch job's machine"
    return "the detected machine (no batch job: this one)"
