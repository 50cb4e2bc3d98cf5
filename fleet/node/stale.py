"""Preloaded code edited since its zygote imported it: said in the step's log.

A zygote imports its preload modules once, for the life of the fleet, and every call
step forked from it runs the code as it was then: an edit to a preloaded module (or to
a module a preload imported) is not seen until the fleet is restarted. That is the
point of preloading, but it is silent. So the zygote stamps, after each preload, the
file and modification time of every module the preload brought in that is not an
installed library (not under the interpreter's prefixes, nor in a site-packages or
dist-packages directory: a user's own code, editable installs included) -- one stat
each, once. A call step whose ``call`` names a stamped module stats that one file again
(one stat a step, in the child) and, if it changed, says so in its log.
"""

from __future__ import annotations

import os
import sys

# module -> (its file, st_mtime_ns when the zygote had imported it); filled in the
# zygote, read in the children forked from it.
_stamps: dict[str, tuple[str, int]] = {}


def _installed(file: str) -> bool:
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    if any(file.startswith(p.rstrip(os.sep) + os.sep) for p in prefixes if p):
        return True
    return f"{os.sep}site-packages{os.sep}" in file or f"{os.sep}dist-packages{os.sep}" in file


def stamp_new(before: set[str] | frozenset[str]) -> None:
    """(In the zygote, after importing preloads) stamp the user modules that are in
    sys.modules now and were not in ``before``."""
    for name in set(sys.modules) - set(before):
        try:  # (a module's own __getattr__, or anything put in sys.modules, may raise anything:
            # this is a diagnostic, never a reason to refuse a preload or end a zygote)
            file = getattr(sys.modules.get(name), "__file__", None)
            if not isinstance(file, str) or _installed(file):
                continue
            _stamps[name] = (file, os.stat(file).st_mtime_ns)
        except Exception:
            continue


def changed(call: str | None) -> str | None:
    """(In a call step's child) a ``fleet:`` line if the module ``call`` names was
    preloaded by the zygote and its file changed since, else None."""
    name = call.partition(":")[0] if isinstance(call, str) else ""
    stamp = _stamps.get(name)
    if stamp is None:
        return None
    file, mtime = stamp
    try:
        if os.stat(file).st_mtime_ns == mtime:
            return None
    except OSError:
        pass  # gone or unreadable since: changed as well
    return (f"fleet: {file} changed after this node's zygote imported module '{name}' (preloaded): "
            f"this step runs the code as imported then; restart the fleet (fleet down, fleet up) to run the new code")
