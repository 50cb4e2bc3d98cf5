"""Holding a step to its declared `memory`: which mechanism a node has, and its cgroups.

A node uses one mechanism, chosen once when its agent starts (:func:`choose`), logged,
and sent in its Join:

- ``cgroup2``: each step in its own cgroup with ``memory.max`` = its memory, under a
  subtree this process may manage (its own cgroup must have the memory controller and
  hold nothing but this agent, which moves into a leaf of its own so that the subtree
  may enable the controller: cgroup v2 lets no process live beside child cgroups);
- ``cgroup1``: the same through the v1 memory controller (``memory.limit_in_bytes``,
  and ``memory.memsw.limit_in_bytes`` where swap is accounted, so a step cannot swap
  its way past its limit), under this process's own memory cgroup;
- ``watchdog``: no cgroup may be made here; the agent samples each step's processes
  (its session's, and the sessions they start) and kills them past its memory
  (fleet.node.memwatch, fleet.node.memmeasure);
- ``none``: forced (``FLEET_MEMLIMIT=none``), or no mechanism works here.

``FLEET_MEMLIMIT`` (``auto``, the default; ``cgroup``, ``cgroup2``, ``cgroup1``,
``watchdog`` or ``none``) forces one; a forced cgroup that cannot be made falls back to
the watchdog, and says so.

The kernel enforces a cgroup's limit: past it, it reclaims what it can and then its
OOM killer kills a process *in that cgroup*, never a neighbour. A step's cgroup is
named for its step and attempt (:func:`cgroup_name`), so the forked child (which makes
and joins its own, before the step's code runs), the zygote (which makes a command's,
which a tiny shell wrapper joins before it execs the command) and the agent (which
reads its peak and OOM kills from it after the exit, and removes it) all find it
without telling each other. Steps without a memory declaration, and MPI steps (their
ranks are the launcher's, memory passed to srun), get none.
"""

from __future__ import annotations

import os
import re
import signal
import zlib
from dataclasses import dataclass

from fleet.node import probe
from fleet.wire.execshell import EXEC_SHELL

CGROUP2, CGROUP1, WATCHDOG, NONE = "cgroup2", "cgroup1", "watchdog", "none"
KINDS = (CGROUP2, CGROUP1, WATCHDOG, NONE)
DESCRIBED = {CGROUP2: "cgroup v2 memory.max", CGROUP1: "cgroup v1 memory.limit_in_bytes",
             WATCHDOG: "RSS watchdog", NONE: "none"}


@dataclass(frozen=True)
class Choice:
    """A node's mechanism: its kind, the directory its steps' cgroups go in (cgroups
    only), and why (for the log and the Join)."""

    kind: str
    root: str = ""
    why: str = ""

    def describe(self) -> str:
        """E.g. "cgroup v1 memory.limit_in_bytes (/sys/fs/cgroup/memory/x/fleet.12)"."""
        where = self.root or self.why
        return DESCRIBED[self.kind] + (f" ({where})" if where else "")

    def arg(self) -> str:
        """The zygote's --memlimit value."""
        return f"{self.kind}:{self.root}" if self.root else self.kind


# --- the mechanism in use in this process (the zygote, and the children it forks) -----------

_ACTIVE = Choice(NONE)


def use(arg: str) -> None:
    """Take the agent's choice (the zygote's --memlimit ``KIND[:ROOT]``)."""
    global _ACTIVE
    kind, _, root = (arg or NONE).partition(":")
    _ACTIVE = Choice(kind if kind in KINDS else NONE, root)


def active() -> Choice:
    return _ACTIVE


def limited(launch) -> int:
    """The bytes a step is held to on this node (0: none): its declared memory, as the
    coordinator says (a step without a declaration, or an MPI step, has none here)."""
    return int(launch.memory_limit or 0)


def cgroup_name(step: str, attempt: int) -> str:
    """The step's cgroup's directory name: readable, unique by a hash of the whole id."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", step)[:100]
    return f"{safe}.{zlib.crc32(step.encode()):08x}.{attempt}"


def cgroup_dir(choice: Choice, step: str, attempt: int) -> str:
    return os.path.join(choice.root, cgroup_name(step, attempt))


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def create(choice: Choice, step: str, attempt: int, limit: int) -> str:
    """Make the step's cgroup with its limit; its directory. OSError if it cannot be made."""
    path = cgroup_dir(choice, step, attempt)
    try:
        os.mkdir(path)
    except FileExistsError:
        pass  # a spare child's own earlier try, or a leftover of this very attempt
    if choice.kind == CGROUP2:
        _write(os.path.join(path, "memory.max"), str(limit))
        try:
            _write(os.path.join(path, "memory.swap.max"), "0")
        except OSError:
            pass  # no swap accounting: nothing to swap to past the limit either
    else:
        _write(os.path.join(path, "memory.limit_in_bytes"), str(limit))
        try:
            _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(limit))
        except OSError:
            pass  # swap not accounted here
    return path


def enter(launch) -> str | None:
    """In a forked step child, before its code: make and join its cgroup. None if it
    joined one (or needs none); else a line for its log saying the limit is not held."""
    choice, limit = _ACTIVE, limited(launch)
    if choice.kind not in (CGROUP1, CGROUP2) or not limit:
        return None
    try:
        path = create(choice, launch.step, launch.attempt, limit)
        _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))
    except OSError as exc:
        return f"fleet: memory limit not enforced: cannot join a cgroup: {exc}"
    return None


def joining(launch, argv: list[str]) -> list[str]:
    """A command's argv, made to join the step's cgroup before the command's own code
    runs (the zygote makes the cgroup here; a shell writes its pid, then execs)."""
    choice, limit = _ACTIVE, limited(launch)
    if choice.kind not in (CGROUP1, CGROUP2) or not limit or not argv:
        return argv
    try:
        procs = os.path.join(create(choice, launch.step, launch.attempt, limit), "cgroup.procs")
    except OSError as exc:
        warn = f"fleet: memory limit not enforced: cannot make a cgroup: {exc}"
        return [*EXEC_SHELL, "-c", 'echo "$0" >&2; exec "$@"', warn, *argv]
    return [*EXEC_SHELL, "-c",
            'echo $$ > "$0" || echo "fleet: memory limit not enforced: cannot join $0" >&2; exec "$@"',
            procs, *argv]


@dataclass(frozen=True)
class Usage:
    """What a step's cgroup saw: its peak bytes (None: not kept here), the processes of
    it the kernel's OOM killer killed (for whatever limit), whether it reached its own
    limit, and whether those kills were for its own limit (``own_oom``) rather than the
    node's or a parent cgroup's, where the same kernel counts them in the step's cgroup too."""

    peak: int | None
    oom_kills: int
    hit_limit: bool
    own_oom: bool = False


# A v1 cgroup whose peak came within this of its limit reached it: the kernel OOM-kills
# for a charge it cannot make, at most 8 pages (a costlier one fails without the OOM
# killer), so the peak of a cgroup OOM at its own limit is within 32 KiB of it.
AT_LIMIT = 1 << 20


def _field(text: str, name: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0


def _number(path: str) -> int | None:
    try:
        return int(_read(path))
    except (OSError, ValueError):
        return None  # (v2 memory.peak is Linux 5.19 on; v1 memsw only where swap is accounted)


def usage(choice: Choice, path: str) -> Usage | None:
    """The step's cgroup's figures; None if it has none (or they cannot be read).

    Whose OOM it was: v2 memory.events counts ``oom`` (its usage reached memory.max and
    reclaim failed) in the cgroup whose limit it was and its ancestors, and ``oom_kill``
    in the victim's cgroup and its ancestors; a step's cgroup is a leaf, so an
    ``oom_kill`` without an ``oom`` of its own was the node's or a parent's. v1 counts
    ``oom_kill`` (memory.oom_control) in the victim's cgroup whoever ran out and keeps
    no count of a cgroup's own OOMs; ``memory.failcnt`` is not kept where swap is
    accounted (the memsw counter fails first and counts nothing: Linux 6.x), so a step
    reached its own limit if its peak (memory or memory+swap) came within
    :data:`AT_LIMIT` of it, or its failcnt says so."""
    try:
        if choice.kind == CGROUP2:
            events = _read(os.path.join(path, "memory.events"))
            kills = _field(events, "oom_kill")
            return Usage(_number(os.path.join(path, "memory.peak")), kills, _field(events, "max") > 0,
                         kills > 0 and _field(events, "oom") > 0)
        peak = int(_read(os.path.join(path, "memory.max_usage_in_bytes")))
        kills = _field(_read(os.path.join(path, "memory.oom_control")), "oom_kill")
        failcnt = int(_read(os.path.join(path, "memory.failcnt")))
        limit = int(_read(os.path.join(path, "memory.limit_in_bytes")))
        swapped = _number(os.path.join(path, "memory.memsw.max_usage_in_bytes")) or 0
        hit = failcnt > 0 or max(peak, swapped) >= limit - AT_LIMIT
        return Usage(peak, kills, hit, kills > 0 and hit)
    except (OSError, ValueError):
        return None


def kill_members(path: str) -> int:
    """SIGKILL every process still in a step's cgroup once the step has ended: what it
    left running, in any process group or session (a daemon made with setsid too), is
    in it; how many were signalled."""
    try:
        pids = [int(x) for x in _read(os.path.join(path, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return 0
    n = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except OSError:  # (ended meanwhile)
            pass
    return n


def remove(path: str) -> bool:
    """Remove a step's cgroup; False while processes are still in it (try again)."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


# --- choosing, at the agent's start ------------------------------------------------------

def _own_cgroup(v2: bool) -> str | None:
    """This process's cgroup directory on the v2 (or v1 memory) hierarchy, if mounted."""
    v2_mount, v2_root, v1_mount, v1_root = probe._cgroup_mounts()
    mount, root = (v2_mount, v2_root) if v2 else (v1_mount, v1_root)
    if not mount:
        return None
    try:
        lines = _read("/proc/self/cgroup").splitlines()
    except OSError:
        return None
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (v2 and hier == "0" and controllers == "") or (not v2 and "memory" in controllers.split(",")):
            if root != "/" and (path == root or path.startswith(root + "/")):
                path = path[len(root):]
            full = os.path.join(mount, path.lstrip("/"))
            return full if os.path.isdir(full) else None
    return None


def _sweep(own: str) -> None:
    """Remove what agents killed outright (-9: no cleanup) left under ``own``: each
    ``fleet.<pid>`` whose agent is gone, and its steps' cgroups (a busy one stays)."""
    try:
        names = os.listdir(own)
    except OSError:
        return
    for name in names:
        head, _, pid = name.partition(".")
        if head != "fleet" or not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        release(Choice(CGROUP1, os.path.join(own, name)))


def _try_cgroup1(tag: str) -> Choice:
    own = _own_cgroup(v2=False)
    if own is None:
        return Choice(NONE, why="no cgroup v1 memory controller here")
    _sweep(own)
    root = os.path.join(own, tag)
    try:
        os.mkdir(root)
        probe_dir = os.path.join(root, "probe")
        os.mkdir(probe_dir)
        try:
            _write(os.path.join(probe_dir, "memory.limit_in_bytes"), str(1 << 30))
        finally:
            os.rmdir(probe_dir)
    except OSError as exc:
        remove(root)
        return Choice(NONE, why=f"cannot make a memory cgroup under {own}: {exc.strerror or exc}")
    return Choice(CGROUP1, root)


def _try_cgroup2(tag: str) -> Choice:
    own = _own_cgroup(v2=True)
    if own is None:
        return Choice(NONE, why="no cgroup v2 hierarchy here")
    try:
        if "memory" not in _read(os.path.join(own, "cgroup.controllers")).split():
            return Choice(NONE, why=f"cgroup v2 {own} has no memory controller (not delegated)")
    except OSError as exc:
        return Choice(NONE, why=f"cannot read {own}/cgroup.controllers: {exc.strerror or exc}")
    leaf, root = os.path.join(own, tag + ".agent"), os.path.join(own, tag)
    try:
        os.mkdir(leaf)
        _write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))
        _write(os.path.join(own, "cgroup.subtree_control"), "+memory")
        os.mkdir(root)
        _write(os.path.join(root, "cgroup.subtree_control"), "+memory")
    except OSError as exc:
        try:  # back where we were; the delegated subtree was not ours to reshape
            _write(os.path.join(own, "cgroup.procs"), str(os.getpid()))
        except OSError:
            pass
        remove(root)
        remove(leaf)
        return Choice(NONE, why=f"cannot delegate memory under {own}: {exc.strerror or exc}")
    return Choice(CGROUP2, root)


def choose(force: str = "auto", tag: str = "") -> Choice:
    """This node's mechanism (see the module doc); ``tag`` names this agent's cgroup
    (default ``fleet.<pid>``)."""
    force = (force or "auto").strip().lower()
    tag = tag or f"fleet.{os.getpid()}"
    if force == NONE:
        return Choice(NONE, why="FLEET_MEMLIMIT=none")
    if force == WATCHDOG:
        return Choice(WATCHDOG, why="FLEET_MEMLIMIT=watchdog")
    tried = []
    for kind, attempt in ((CGROUP2, _try_cgroup2), (CGROUP1, _try_cgroup1)):
        if force in ("auto", "cgroup", kind):
            got = attempt(tag)
            if got.kind != NONE:
                return got
            tried.append(got.why)
    if force not in ("auto", "cgroup", CGROUP1, CGROUP2):
        tried.append(f"FLEET_MEMLIMIT={force!r} is none of auto, cgroup, cgroup2, cgroup1, watchdog, none")
    return Choice(WATCHDOG, why="; ".join(tried))


def release(choice: Choice) -> None:
    """At the agent's end: remove its cgroups (the steps' left over, then its own)."""
    if choice.kind not in (CGROUP1, CGROUP2) or not choice.root:
        return
    try:
        names = os.listdir(choice.root)
    except OSError:
        return
    for name in names:
        sub = os.path.join(choice.root, name)
        if os.path.isdir(sub):
            remove(sub)
    remove(choice.root)
    if choice.kind == CGROUP2:
        remove(choice.root + ".agent")  # empty only once this agent has exited: best effort
