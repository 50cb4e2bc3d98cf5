"""A preload module that forks a daemon at import (as a library's background server
may): the daemon holds every descriptor the zygote had then, its agent's pipes too,
open after the zygote dies (tests/control/test_zygote_restart.py). It ends in 120 s
at most, whatever happens; fleet ends it sooner (fleet.node.orphans)."""

import os
import time

if os.fork() == 0:
    try:
        time.sleep(120)
    finally:
        os._exit(0)
