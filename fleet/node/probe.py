"""What this node really has: cores the job may use, memory, visible GPUs.

Read from the kernel (affinity, /sys topology, /proc/meminfo, cgroups) and the
environment, never assumed from counts: a batch job usually gets part of a node.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

# Where a node's GPUs are read from when its machine profile states neither a variable
# that is set nor a count, in this order (node_gpus).
GPU_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")

# Cgroup "limits" at or above this are the kernel's way of saying "none"
# (v1 reports 9223372036854771712).
_NO_LIMIT = 1 << 60


def parse_cpu_list(text: str) -> set[int]:
    """CPU ids in kernel list syntax, e.g. ``"0-3,8,10-11"``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi) + 1) if sep else (int(lo),))
    return cpus


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on, one logical CPU per physical core.

    Starts from os.sched_getaffinity(0) (what the batch system and cgroup allow)
    and keeps the lowest allowed hardware thread of each core, read from
    /sys/devices/system/cpu/cpuN/topology/thread_siblings_list. If topology is
    unreadable, every allowed CPU counts as a core.
    """
    allowed = os.sched_getaffinity(0)
    keep = set()
    try:
        for cpu in allowed:
            path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
            with open(path) as f:
                siblings = (parse_cpu_list(f.read()) & allowed) | {cpu}
            if cpu == min(siblings):
                keep.add(cpu)
    except (OSError, ValueError):
        return tuple(sorted(allowed))
    return tuple(sorted(keep))


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_limit(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _NO_LIMIT else None


def _cgroup_mounts() -> tuple[str | None, str, str | None, str]:
    """(v2 mount point, its root, v1 memory mount point, its root)."""
    v2 = v1 = None
    v2_root = v1_root = "/"
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if len(fields) < 5 or len(rfields) < 3:
                    continue
                root, mount, fstype = fields[3], fields[4], rfields[0]
                if fstype == "cgroup2" and v2 is None:
                    v2, v2_root = mount, root
                elif fstype == "cgroup" and "memory" in rfields[2].split(",") and v1 is None:
                    v1, v1_root = mount, root
    except OSError:
        pass
    return v2, v2_root, v1, v1_root


def _limits_along(mount: str, mount_root: str, cgroup: str, filename: str) -> list[int]:
    """Limits in ``filename`` from the process's cgroup up to the mounted root: the
    effective limit is the smallest of them."""
    rel = cgroup
    if mount_root != "/" and (rel == mount_root or rel.startswith(mount_root + "/")):
        rel = rel[len(mount_root):]
    parts = [p for p in rel.split("/") if p]
    limits = []
    for depth in range(len(parts), -1, -1):
        limit = _read_limit(os.path.join(mount, *parts[:depth], filename))
        if limit is not None:
            limits.append(limit)
    return limits


def cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup in bytes (v2 memory.max or v1
    memory.limit_in_bytes, smallest along the hierarchy); None if unlimited."""
    v2, v2_root, v1, v1_root = _cgroup_mounts()
    limits: list[int] = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                hier, _, rest = line.strip().partition(":")
                controllers, _, path = rest.partition(":")
                if hier == "0" and controllers == "" and v2:
                    limits += _limits_along(v2, v2_root, path, "memory.max")
                elif "memory" in controllers.split(",") and v1:
                    limits += _limits_along(v1, v1_root, path, "memory.limit_in_bytes")
    except OSError:
        return None
    return min(limits) if limits else None


def node_memory() -> int:
    """Bytes of memory steps may use here: the smaller of MemAvailable and the
    cgroup limit (0 if neither can be read)."""
    values = [v for v in (_meminfo_available(), cgroup_memory_limit()) if v is not None]
    return min(values) if values else 0


def visible_gpus(var_names: Iterable[str] = GPU_VARS,
                 environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """GPU ids from the first of ``var_names`` that is set, e.g. ``"0,1"`` -> (0, 1).

    None set, or the first set one empty: (). Note that an empty ZE_AFFINITY_MASK
    means every device, which cannot be counted from the environment. As CUDA does,
    a negative id ends the list. Non-integer ids (UUIDs, ``0.1`` tiles) raise
    ValueError naming the variable, rather than being guessed at.
    """
    env = os.environ if environ is None else environ
    for name in var_names:
        value = env.get(name)
        if value is None:
            continue
        ids = []
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            try:
                gpu = int(item)
            except ValueError:
                raise ValueError(f"{name}={value!r}: {item!r} is not an integer "
                                 f"device id") from None
            if gpu < 0:
                break
            ids.append(gpu)
        return tuple(ids)
    return ()


def node_gpus(gpu_var: str = "", count: int = 0,
              environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """This node's GPUs, as its machine profile says to find them.

    The profile's ``gpu_var`` (the variable steps are given their GPUs in) if it is set;
    else, if the profile states ``count`` (its ``gpus_per_node``), ids 0..count-1; else
    the first set of GPU_VARS, as before profiles named their variable. A set but empty
    ZE_AFFINITY_MASK means every device: ``count`` of them (none if no count is stated).
    Non-integer ids raise ValueError (visible_gpus).

    Ids read from another variable than ``gpu_var`` are given as their positions
    0..n-1: that variable stays set in every step, and the runtime numbers what it
    leaves visible from 0 before ``gpu_var`` selects (ROCm applies ROCR_VISIBLE_DEVICES=4,5
    first, so HIP_VISIBLE_DEVICES=4 would name no device; before 2026-12-06 it was given).
    """
    env = os.environ if environ is None else environ
    if gpu_var and gpu_var in env:
        return _listed_or_all(gpu_var, count, env)
    if count:
        return tuple(range(count))
    first = next((name for name in GPU_VARS if name in env), None)
    if first is None:
        return ()
    ids = _listed_or_all(first, count, env)
    return tuple(range(len(ids))) if gpu_var else ids


def _listed_or_all(name: str, count: int, env: Mapping[str, str]) -> tuple[int, ...]:
    if name == "ZE_AFFINITY_MASK" and not env[name].strip():
        return tuple(range(count))
    return visible_gpus((name,), env)
