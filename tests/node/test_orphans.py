"""fleet.node.orphans in a real process: a subreaper adopts what a child orphaned in a
session of its own, lists it by either way /proc offers, and ends it (a daemon that
ignores SIGTERM too), its group with it."""

from __future__ import annotations

import json
import sys

from fleetharness import completed, env, tagged

SCRIPT = r'''
import json, os, subprocess, sys, time
from fleet.node import orphans
assert orphans.become_subreaper()
# A shell that leaves a daemon (its own session) which ignores SIGTERM and has a child
# of its own in its group, then ends: the daemon is orphaned, and adopted here.
subprocess.run(["sh", "-c", "setsid sh -c 'trap \"\" TERM; sleep 4242 & wait' & sleep 0.2"], check=True)
deadline = time.monotonic() + 10
while time.monotonic() < deadline and not orphans.children():
    time.sleep(0.01)
kids = sorted(orphans.children())
by_parent = sorted(orphans._by_parent(os.getpid()))
lines = []
ended = orphans.end(0.3, log=lines.append)
print(json.dumps({"kids": kids, "by_parent": by_parent, "ended": ended, "lines": lines,
                  "left": orphans.children()}))
'''


def test_an_adopted_daemon_that_ignores_sigterm_is_ended_with_its_group(tmp_path):
    before = {int(line.split()[0]) for line in tagged("sleep 4242")}
    r = completed([sys.executable, "-c", SCRIPT], timeout=60, cwd=tmp_path, text=True, env=env())
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["kids"]) == 1, out  # the daemon's shell, adopted (its sleep is its own child)
    assert out["by_parent"] == out["kids"], out  # the fallback pass over /proc finds the same
    assert len(out["ended"]) == 1 and out["ended"][0].startswith(f"{out['kids'][0]} (sh)"), out
    assert out["lines"] and "ended 1 process(es)" in out["lines"][0], out
    assert out["left"] == [], out
    # The sleep in the daemon's group went with it (else it would be adopted, and ended in
    # a second round: either way nothing is left).
    left = [line for line in tagged("sleep 4242") if int(line.split()[0]) not in before and " zombie " not in line]
    assert left == [], left
