"""Fixtures the control tests share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fleetharness import env


@pytest.fixture
def started(tmp_path):
    """`fleet run` commands in the background, each in its own process group; any left
    running is killed by group."""
    ps: list[subprocess.Popen] = []

    def start(*args: str, extra_env: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "fleet", *args], cwd=tmp_path, env={**env(), **(extra_env or {})},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        ps.append(p)
        return p

    yield start
    for p in ps:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
