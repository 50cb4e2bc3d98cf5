"""A lease holder's own writes of its lease (fleet.control.leaseown), on a real run
directory: it rewrites (shares, refreshes after a hold-up) or removes its lease only
while the lease is still its own and no take-over is under way, creates it again when
it is not there, and says the refresh gap from before a hold-up. The evidence is the
lease's record and the reason given, never seconds."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleet.control import foundgone, store
from fleet.control.lease import Lease


def lease_of(run_dir: Path) -> dict:
    return json.loads((run_dir / ".fleet" / "lease").read_text())


def holder(run_dir: Path, fleet: str = "holder-1-aaa") -> Lease:
    lease = Lease(run_dir, fleet, 60.0)
    lease.acquire()
    assert lease.holder and not lease.shared
    return lease


def taken_over(run_dir: Path, by: str, gen: int) -> None:
    """The lease replaced as a taker replaces it (fleet.control.lease.Lease._take_over)."""
    store._replace(run_dir / ".fleet" / "lease", {"fleet": by, "host": socket.gethostname(), "pid": os.getpid(),
                                                  "generation": gen, "shared": False})


@pytest.fixture
def live_taker():
    """A live process on this host: a taker in the middle of its take-over."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    yield p.pid
    p.kill()
    p.wait(timeout=30)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=30)
    return p.pid


def test_a_holder_shares_only_a_lease_still_its_own_and_leaves_one_another_fleet_took_over_as_it_is(tmp_path):
    a = holder(tmp_path)
    taken_over(tmp_path, "taker-2-bbb", 2)  # (between the holder's last look and its share)
    assert a.share() == "taker-2-bbb"
    assert not a.shared
    assert lease_of(tmp_path)["fleet"] == "taker-2-bbb" and lease_of(tmp_path)["generation"] == 2
    a.release()
    assert lease_of(tmp_path)["fleet"] == "taker-2-bbb"  # (not its own: left)


def test_a_holder_waits_for_a_take_over_under_way_and_leaves_the_lease_to_its_taker(tmp_path, live_taker):
    a = holder(tmp_path)
    # A taker that read the lease stale holds its adoption file: it is replacing the lease now.
    adopt = tmp_path / ".fleet" / f"lease.adopt.{a.generation}.{a.fleet_id}"
    store._write_new(adopt, {"fleet": "taker-2-bbb", "host": socket.gethostname(), "pid": live_taker,
                             "at": time.time(), "from": lease_of(tmp_path)})

    def take_over():  # (what the taker does next: replace the lease, then remove its file)
        taken_over(tmp_path, "taker-2-bbb", a.generation + 1)
        adopt.unlink()
    t = threading.Timer(0.3, take_over)
    t.start()
    try:
        assert a.share() == "taker-2-bbb" and not a.shared
    finally:
        t.join()
    why = a.keep(time.monotonic() + 100)  # (after a hold-up)
    assert why is not None and "fleet taker-2-bbb took it over" in why and "had not refreshed" in why
    a.release()
    assert lease_of(tmp_path)["fleet"] == "taker-2-bbb"  # (left to the taker)


def test_a_take_overs_file_left_by_a_taker_that_never_ends_stops_neither_the_holders_share_nor_its_release(
        tmp_path, live_taker, caplog):
    # A taker of another host that died (or froze) in the middle: its pid cannot be looked
    # up here. Before, the holder read it as a take-over under way, stopped itself, and
    # kept its lease at its end, blocking every later fleet.
    a = holder(tmp_path)
    adopt = tmp_path / ".fleet" / f"lease.adopt.{a.generation}.{a.fleet_id}"
    store._write_new(adopt, {"fleet": "taker-2-bbb", "host": "another-host", "pid": live_taker,
                             "at": time.time(), "from": lease_of(tmp_path)})
    with caplog.at_level(logging.WARNING, logger="fleet.control.coordinator"):
        assert a.share() is None and a.shared
    assert "left by a take-over of this fleet's lease that did not end" in caplog.text
    assert (lease_of(tmp_path)["fleet"], lease_of(tmp_path)["shared"]) == (a.fleet_id, True)
    assert adopt.exists()  # (not its own: left as it is)
    a.release()
    assert not (tmp_path / ".fleet" / "lease").exists()


def test_a_holders_own_adoption_file_left_by_an_earlier_write_is_its_own_again(tmp_path):
    a = holder(tmp_path)
    adopt = tmp_path / ".fleet" / f"lease.adopt.{a.generation}.{a.fleet_id}"
    store._write_new(adopt, {**a.me, "at": time.time(), "holding": True})  # (its unlink failed: ESTALE)
    assert a.share() is None and a.shared
    assert not adopt.exists()


def test_a_holder_of_another_host_killed_holding_its_file_is_taken_over_once_the_file_is_seen_unchanged(
        tmp_path, monkeypatch):
    from fleet.control import leaseown
    monkeypatch.setattr(leaseown, "LEFT_S", 0.3)  # (10 s in a fleet: a write holds it for milliseconds)
    root = tmp_path / ".fleet"
    root.mkdir()
    gone = {"fleet": "gone-1-aaa", "host": "another-host", "pid": 4242, "generation": 2, "shared": False,
            "refresh_s": 1.0}
    (root / "lease").write_text(json.dumps(gone))
    old = time.time() - 600
    os.utime(root / "lease", (old, old))
    (root / "lease.adopt.2.gone-1-aaa").write_text(json.dumps({**gone, "holding": True}))
    taker = Lease(tmp_path, "taker-2-bbb", 4.0)
    t = threading.Thread(target=taker.acquire, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the taker still waits on the left file"
    rec = lease_of(tmp_path)
    assert (rec["fleet"], rec["generation"]) == ("taker-2-bbb", 3)


def test_a_holder_whose_lease_is_not_there_creates_it_again_and_says_so_and_one_another_fleet_made_first_is_lost(
        tmp_path, caplog):
    a = holder(tmp_path)
    due = time.monotonic() + 6  # (a refresh due, no hold-up)
    os.unlink(a.path)
    with caplog.at_level(logging.WARNING, logger="fleet.control.coordinator"):
        assert a.keep(due) is None
    rec = lease_of(tmp_path)
    assert (rec["fleet"], rec["generation"]) == (a.fleet_id, a.generation)
    assert "created it again" in caplog.text
    os.unlink(a.path)
    c = holder(tmp_path, "third-3-ccc")  # (a third fleet finds no lease: it takes the run directory)
    why = a.keep(due + 6)
    assert why is not None and "fleet third-3-ccc took it over" in why
    assert lease_of(tmp_path)["fleet"] == c.fleet_id


def test_after_a_hold_up_the_second_look_says_the_gap_since_the_last_refresh_before_it(tmp_path):
    a = holder(tmp_path)
    held = time.monotonic() + 100
    assert a.keep(held) is None  # (the first look: nothing yet)
    foundgone.mark(tmp_path, a.fleet_id, "finder-2-bbb", {"refreshed": time.time() - 100})  # (a moment later)
    why = a.keep(held + foundgone.DOUBT_S)
    assert why is not None and "found gone by fleet finder-2-bbb" in why
    assert re.search(r"had not refreshed its lease or registration for 10\d s", why), why  # (not the half second)


def test_a_lease_whose_holder_died_rewriting_it_is_taken_over_all_the_same(tmp_path):
    root = tmp_path / ".fleet"
    root.mkdir()
    gone = {"fleet": "gone-1-aaa", "host": socket.gethostname(), "pid": dead_pid(), "generation": 3, "shared": False}
    (root / "lease").write_text(json.dumps(gone))
    (root / "lease.adopt.3.gone-1-aaa").write_text(json.dumps({**gone, "holding": True}))  # (its own, left)
    taker = Lease(tmp_path, "taker-2-bbb", 60.0)
    look = taker._read()
    assert taker._takeable(look)
    assert taker._take_over(look)
    rec = lease_of(tmp_path)
    assert (rec["fleet"], rec["generation"]) == ("taker-2-bbb", 4)



def test_a_lease_two_takers_died_taking_over_is_taken_over_by_the_next(tmp_path):
    # Each died between creating its adoption file and removing it: before, the second
    # left file (.1) kept every later taker waiting for ever, silently.
    root = tmp_path / ".fleet"
    root.mkdir()
    gone = {"fleet": "gone-1-aaa", "host": socket.gethostname(), "pid": dead_pid(), "generation": 2, "shared": False}
    (root / "lease").write_text(json.dumps(gone))
    for name in ("lease.adopt.2.gone-1-aaa", "lease.adopt.2.gone-1-aaa.1"):
        (root / name).write_text(json.dumps({"fleet": "taker-x", "host": socket.gethostname(), "pid": dead_pid()}))
    taker = Lease(tmp_path, "taker-3-ccc", 60.0)
    look = taker._read()
    assert taker._takeable(look)
    assert taker._take_over(look)
    rec = lease_of(tmp_path)
    assert (rec["fleet"], rec["generation"]) == ("taker-3-ccc", 3)
