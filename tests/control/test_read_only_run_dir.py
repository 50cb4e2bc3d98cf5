"""A run directory whose file system turns read-only under a running fleet, through the
real CLI: a small ext4 on a loop device of its own, mounted errors=remount-ro, made
read-only by the kernel's own error path (/sys/fs/ext4/<dev>/trigger_fs_error, as after
a disk error). It drains as a full one does (fleet.control.drain): nothing more starts,
the running step goes on and succeeds, nothing uses an attempt or ends failed, and
`fleet run` exits 4 saying the run directory cannot be written. Before, every next
step failed on it ("cannot make the step's records directory ...: Read-only file
system"), each using an attempt, and `fleet run` never returned (a finished
submission waited for a journal that could not be made durable); a `fleet up` fleet
that `fleet down` then stopped was said killed or crashed (exit 5)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from fleetharness import fleet, finish, spawn, tagged, wait_for, write_suite

from fleet.control.drain import FAILING, FULL, READ_ONLY
from fleet.wire import records

HB = ["--heartbeat", "0.2", "--heartbeat-timeout", "5"]
IDS = [f"c{i:02d}" if i % 2 else f"p{i:02d}" for i in range(30)]  # command and call steps, alternating


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def ext4_on_loop(work: Path):
    """A 64 MiB ext4 on a loop device of its own, mounted errors=remount-ro at work/mnt:
    (mount point, the file its kernel error is triggered by). Unmounted and its loop
    device detached after, by its own mount point and device only. Skips where it cannot
    be made (not root, no loop device, no ext4 tools, no ext4 error trigger)."""
    if os.geteuid() != 0:
        pytest.skip("a loop-mounted ext4 needs root")
    missing = [t for t in ("mkfs.ext4", "e2fsck", "losetup", "mount", "umount") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"a loop-mounted ext4 needs {', '.join(missing)}")
    img, mnt = work / "ro.img", work / "mnt"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    r = _run("mkfs.ext4", "-q", "-F", str(img))
    if r.returncode != 0:
        pytest.skip(f"cannot make an ext4 image here: {r.stderr.strip()}")
    r = _run("losetup", "--find", "--show", str(img))
    if r.returncode != 0:
        pytest.skip(f"no loop device here: {r.stderr.strip()}")
    dev = r.stdout.strip()
    try:
        mnt.mkdir()
        r = _run("mount", "-t", "ext4", "-o", "errors=remount-ro", dev, str(mnt))
        if r.returncode != 0:
            pytest.skip(f"cannot mount an ext4 on {dev} here: {r.stderr.strip()}")
        try:
            trigger = Path("/sys/fs/ext4") / Path(dev).name / "trigger_fs_error"
            if not trigger.exists():
                pytest.skip(f"this kernel has no {trigger} to make the file system read-only with")
            yield mnt, trigger
        finally:
            if _run("umount", str(mnt)).returncode != 0:
                _run("umount", "-l", str(mnt))
    finally:
        _run("losetup", "-d", dev)


def writable_again(mnt: Path) -> None:
    """Unmount, check and mount it again, as after a disk error (the device is the same)."""
    dev = _run("findmnt", "-n", "-o", "SOURCE", str(mnt)).stdout.strip()
    assert dev.startswith("/dev/loop"), dev
    r = _run("umount", str(mnt))
    assert r.returncode == 0, r.stderr
    _run("e2fsck", "-f", "-y", dev)  # (exit 1: errors corrected, as expected after the triggered one)
    r = _run("mount", "-t", "ext4", "-o", "errors=remount-ro", dev, str(mnt))
    assert r.returncode == 0, r.stderr


def gated_suite(tmp_path: Path, first: Path, last: Path) -> Path:
    """`long` runs until `last` exists, `first` until `first` does; the other steps need
    `first`, so they start once the file system is read-only."""
    lines = ['[suite]', 'name = "ro"',
             '[[steps]]', 'id = "long"', 'priority = 1', f'command = "while [ ! -e {last} ]; do sleep 0.05; done"',
             '[[steps]]', 'id = "first"', 'priority = 1', f'command = "while [ ! -e {first} ]; do sleep 0.05; done"']
    for sid in IDS:
        lines += ['[[steps]]', f'id = "{sid}"', 'deps = ["first"]',
                  'command = "true"' if sid[0] == "c" else 'call = "os:getpid"']
    return write_suite(tmp_path / "ro.toml", "\n".join(lines) + "\n")


def drained(run_dir: Path, tmp_path: Path) -> str:
    """The drain's reason, as `fleet status` says it ("" while the fleet has not drained)."""
    r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=tmp_path, timeout=60)
    alloc = (json.loads(r.stdout).get("allocation") or {}) if r.returncode == 0 else {}
    return alloc.get("reason", "") if alloc.get("drained") else ""


def started_both(run_dir: Path) -> bool:
    from fleetharness import events
    return {"long", "first"} <= {e.get("step") for e in events(run_dir) if e["kind"] == "started"}


def test_a_run_directory_turned_read_only_drains_the_fleet_uses_no_attempt_and_fleet_run_exits_4(tmp_path):
    first, last = tmp_path / "first", tmp_path / "last"
    suite = gated_suite(tmp_path, first, last)
    with ext4_on_loop(tmp_path) as (mnt, trigger):
        run_dir = mnt / "run"
        p = spawn("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
                  cwd=tmp_path)
        try:
            wait_for(lambda: started_both(run_dir), timeout=90, what="long and first to start")
            trigger.write_text("boom\n")  # ext4 goes read-only (emergency_ro), as after an I/O error
            first.touch()  # its dependents start now, on a read-only file system
            reason = wait_for(lambda: drained(run_dir, tmp_path), timeout=60, what="the fleet to drain")
            # The coordinator's journal fsync in flight as ext4 turned read-only may get EIO
            # before any write gets EROFS (a loaded CI machine, once): the file system fails,
            # which drains the same way (fleet.control.drain FAILING), exit 4 too.
            assert (READ_ONLY in reason and "Read-only file system" in reason) or (
                FAILING in reason and "Input/output error" in reason), reason
            assert FULL not in reason, reason
        finally:
            first.touch(), last.touch()  # `long` ends (the run with it; killed by group if not) before the unmount
            code, out, err = finish(p, timeout=90)
        assert code == 4, out + err
        fix = "writable again" if READ_ONLY in reason else "repair the file system"
        assert f"fleet: {READ_ONLY if READ_ONLY in reason else FAILING}" in err and fix in err, err
        assert "went down" not in err, err
        assert "failed" not in out, out  # no step's set-up failure used an attempt
        assert " interrupted " in out or "not_started" in out, out
        assert "  succeeded  long" in out, out  # running when it drained: it went on, and succeeded
        assert not tagged(str(last)), "a step outlived the run"

        writable_again(mnt)
        for s in IDS:
            assert [a["outcome"] for a in records.attempts(run_dir, s)] in ([], ["succeeded"]), s  # no failed one
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
                  cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        for s in IDS + ["long", "first"]:
            assert "succeeded" in [a["outcome"] for a in records.attempts(run_dir, s)], s


def test_steps_whose_set_up_finds_a_read_only_file_system_are_not_failed_the_fleet_drains_and_exits_4(tmp_path):
    """The steps' directories on a read-only file system of their own (a read-only tmpfs
    mounted on the run directory's steps/), the coordinator's records not: the nodes'
    set-up is what finds it (P.Exited.disk_full, EROFS). Before, each step failed,
    using an attempt, and `fleet run` exited 1."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only tmpfs needs root")
    ids = [f"c{i:02d}" if i % 2 else f"p{i:02d}" for i in range(20)]
    suite = write_suite(tmp_path / "s.toml", "\n".join(
        ['[suite]', 'name = "ro"'] + [f'[[steps]]\nid = "{s}"\n' + ('command = "true"' if s[0] == "c" else
                                                                  'call = "os:getpid"') for s in ids]) + "\n")
    run_dir = tmp_path / "run"
    steps = run_dir / "steps"
    steps.mkdir(parents=True, mode=0o700)
    os.chmod(run_dir, 0o700)
    # (mode 0755: a tmpfs is 1777 by default, and a steps/ others can write is refused first)
    r = _run("mount", "-t", "tmpfs", "-o", "ro,size=1m,mode=0755", "tmpfs", str(steps))
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {r.stderr.strip()}")
    try:
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
                  cwd=tmp_path, timeout=120)
    finally:
        _run("umount", str(steps))
    assert r.returncode == 4, r.stdout + r.stderr
    assert f"fleet: {READ_ONLY}: 20 steps interrupted or not started (no attempt used)" in r.stderr, r.stderr
    assert "failed" not in r.stdout, r.stdout
    from fleetharness import events
    ev = events(run_dir)
    [d] = [e for e in ev if e["kind"] == "drained"]
    assert d["reason"].startswith(f"{READ_ONLY} (Read-only file system: the set-up of step "), d
    assert {e["outcome"] for e in ev if e["kind"] == "exit"} == {"interrupted"}, ev
    for s in ids:
        assert records.attempts(run_dir, s) == [], s
    r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
              cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_fleet_stopped_after_its_run_directory_turned_read_only_is_not_said_crashed(tmp_path):
    """A `fleet up` fleet whose run directory turned read-only and drained while `long`
    still runs; `fleet down` stops it, and its `fleet_down` record cannot be written.
    `fleet run` heard the drain's reason (each answer carries it), so it says the run
    directory cannot be written and exits 4; before, it said the coordinator was killed
    or crashed and exited 5."""
    first, last = tmp_path / "first", tmp_path / "last"
    suite = gated_suite(tmp_path, first, last)
    with ext4_on_loop(tmp_path) as (mnt, trigger):
        run_dir = mnt / "run"
        up = fleet("up", "--run-dir", str(run_dir), "--nodes", "1", *HB, cwd=tmp_path, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        p = spawn("run", str(suite), "--run-dir", str(run_dir), "--max-attempts", "1", cwd=tmp_path)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
        reader.start()  # (fleet run's stdout, read as it comes: the wait below keeps its deadline)
        try:
            wait_for(lambda: started_both(run_dir), timeout=90, what="long and first to start")
            trigger.write_text("boom\n")
            first.touch()
            line = wait_for(lambda: next((x for x in list(lines) if "fleet: drained:" in x), ""),
                            timeout=60, what="fleet run to hear the drain")
            assert READ_ONLY in line, line
            down = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
            assert down.returncode == 0, down.stdout + down.stderr
        finally:
            first.touch(), last.touch()
            if p.poll() is None and run_dir.joinpath("fleet.json").exists():
                fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)
            try:
                p.wait(timeout=90)
            finally:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=30)
                reader.join(timeout=30)
            code, err = p.returncode, p.stderr.read()
        out = "".join(lines)
        assert code == 4, out + err
        assert f"{READ_ONLY}, so how it ended is not recorded there" in err, err
        assert "killed or crashed" not in err, err
        assert not tagged(str(last)), "a step outlived the fleet"


def test_a_step_whose_output_lies_on_a_read_only_mount_fails_alone_and_drains_nothing(tmp_path):
    """A link in the run directory to a read-only dataset, and one step whose output is
    under it: that step fails (its own set-up, not the run directory's), the others run,
    `fleet run` exits 1. A read-only file system drains the fleet only when it is where
    fleet keeps its own records (its log, steps/<id>/.fleet)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only tmpfs needs root")
    ro = tmp_path / "dataset"
    ro.mkdir(mode=0o755)
    r = _run("mount", "-t", "tmpfs", "-o", "ro,size=1m,mode=0755", "tmpfs", str(ro))
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {r.stderr.strip()}")
    try:
        run_dir = tmp_path / "run"
        run_dir.mkdir(mode=0o700)
        os.chmod(run_dir, 0o700)
        (run_dir / "data").symlink_to(ro)
        steps = ['[[steps]]\nid = "bad"\ncommand = "true"\noutputs = ["data/out/x"]']
        steps += [f'[[steps]]\nid = "ok{i}"\n' + ('command = "true"' if i % 2 else 'call = "os:getpid"')
                  for i in range(4)]
        suite = write_suite(tmp_path / "s.toml", "[suite]\nname = \"ro\"\n" + "\n".join(steps) + "\n")
        r = fleet("run", str(suite), "--run-dir", str(run_dir), "--nodes", "1", "--max-attempts", "1", *HB,
                  cwd=tmp_path, timeout=120)
    finally:
        _run("umount", str(ro))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Read-only file system" in r.stdout + r.stderr, r.stdout + r.stderr
    from fleetharness import events
    ev = events(run_dir)
    assert not [e for e in ev if e["kind"] == "drained"], ev
    outcomes = {e["step"]: e["outcome"] for e in ev if e["kind"] == "exit"}
    assert outcomes == {"bad": "failed", **{f"ok{i}": "succeeded" for i in range(4)}}, outcomes
