"""`fleet up` on a real file system with a little room left, too little for a fleet to come
up (a small tmpfs, filled but for a few blocks): whatever the amount, it says the file
system is full and exits 4 at once, as for one with no room at all, and leaves no
connection file behind. Where the room runs out decides how the start fails: the
connection file, written last, found none (before 2026-12-06 the coordinator took that
for a bug in handling a Join, waited out --timeout, and left an empty fleet.json that
`fleet up`, status and down refused until it was removed by hand), or an agent found
none for its first line and died with an empty log (before: "agent process N exited
with status 1", exit 1). fleet.control.comingup, fleet.wire.connection.write."""

from __future__ import annotations

import os
import re
import shutil

from fleetharness import fleet, small_tmpfs, tagged, wait_for

MOST_BLOCKS = 12  # more free blocks than a fleet of two agents takes to come up (7, with 4 KiB pages)


def test_fleet_up_with_too_little_room_says_the_file_system_is_full_exits_4_and_leaves_no_connection_file(tmp_path):
    seen = set()
    with small_tmpfs(tmp_path / "mnt", size="512k") as mnt:
        try:
            for free in range(1, MOST_BLOCKS + 1):
                run_dir = mnt / f"run{free}"
                filler = mnt / "filler"
                filler.unlink(missing_ok=True)
                st = os.statvfs(mnt)
                filler.write_bytes(bytes((st.f_bavail - free) * st.f_frsize))
                r = fleet("up", "--run-dir", str(run_dir), "--nodes", "2", "--timeout", "60", cwd=tmp_path, timeout=90)
                if r.returncode == 0:  # room enough at last
                    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60, check=True)
                    break
                assert r.returncode == 4, (free, r.stdout, r.stderr)
                assert re.search(r"(its|the) file system (of \S+ )?is full", r.stderr), (free, r.stderr)
                assert "free space (or raise the quota)" in r.stderr, (free, r.stderr)
                assert "Traceback" not in r.stderr and "not a fleet connection file" not in r.stderr, r.stderr
                left = sorted(os.listdir(run_dir)) if run_dir.exists() else []
                assert not [n for n in left if n.startswith(("fleet", ".fleet.json"))], (free, left)
                log = (run_dir / "coordinator.log").read_text(errors="replace") if left else ""
                if "cannot write its connection file" in log:
                    seen.add("connection file")
                if "is empty); the file system of" in log:
                    seen.add("agent")
                # Nothing in its way now: a `fleet status` there finds no fleet, not a broken file.
                status = fleet("status", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
                assert "no fleet is up" in status.stdout + status.stderr, (status.stdout, status.stderr)
                shutil.rmtree(run_dir, ignore_errors=True)
            else:
                raise AssertionError(f"no fleet came up with {MOST_BLOCKS} blocks free")
            assert seen == {"connection file", "agent"}, seen  # both ways of running out were met
            wait_for(lambda: not tagged(str(mnt)), 30, "every process of those fleets to end")
        finally:
            for run_dir in mnt.glob("run*"):  # (a fleet a failed assertion left up)
                if (run_dir / "fleet.json").exists():
                    fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
