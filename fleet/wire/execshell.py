"""The shell fleet puts in front of a program for one thing before it execs it (a
Hydra rank's stdin, a command step's cgroup): one that passes the environment on whole.

Debian's /bin/sh (dash) drops the environment's entries whose names are no shell
names, Lmod's and environment-modules' exported `module` function
(BASH_FUNC_module%%) among them, so a step's script behind it lost `module` (seen on
2026-12-07 for Hydra ranks). bash passes them on, and in POSIX mode reads no BASH_ENV
(which Lmod sets to its init: sourced there, it would run before every such program).
/bin/sh only where there is no bash."""

from __future__ import annotations

import os

EXEC_SHELL: tuple[str, ...] = ("/bin/bash", "--posix") if os.path.exists("/bin/bash") else ("/bin/sh",)
