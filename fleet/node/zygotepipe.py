"""The pipes between an agent and its zygote.

The zygote is started with them: requests (the agent's launches, kills, preloads,
ticks) one way, reports the other (fleet.node.outbox).

Test hook: ``FLEET_TEST_PIPE_BYTES=N`` makes both pipes N bytes (F_SETPIPE_SZ; 4096, a
page, is the least), so that a test reaches the sizes of a big node with few steps.
"""

from __future__ import annotations

import fcntl
import os
import subprocess

from fleet.node import watcher
from fleet.wire import interpreter

PIPE_BYTES_ENV = "FLEET_TEST_PIPE_BYTES"
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def start_zygote(preload: str, fence: float = 0.0, limits: str = "none",
                 token: str = "") -> tuple[subprocess.Popen, int, int]:
    """The zygote process and the agent's ends of its pipes (requests out, replies in);
    ``limits``: how it holds steps to their memory (fleet.node.memlimit.Choice.arg);
    ``token``: what marks the processes of this agent's steps (fleet.node.watcher)."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    _test_size(req_w, rep_w)
    proc = subprocess.Popen(
        [*interpreter.module("fleet.node.zygote"), "--fd-in", str(req_r), "--fd-out", str(rep_w),
         "--preload", preload, "--fence", str(fence), "--memlimit", limits, "--agent-pid", str(os.getpid())],
        pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, env=watcher.with_token(os.environ, token) if token else None)
    os.close(req_r)
    os.close(rep_w)
    return proc, req_w, rep_r


def _test_size(*fds: int) -> None:
    """(Tests only: FLEET_TEST_PIPE_BYTES) Make the pipes of ``fds`` that small."""
    size = int(os.environ.get(PIPE_BYTES_ENV) or 0)
    for fd in fds if size else ():
        fcntl.fcntl(fd, _F_SETPIPE_SZ, size)
