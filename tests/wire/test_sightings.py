"""fleet.wire.sightings: how long a file has been seen unchanged, on this process's own
clock, and the verdict a lease, registration or claim is stale by."""

from __future__ import annotations

import os

from fleet.wire import sightings
from fleet.wire.sightings import Sightings


def test_a_file_seen_unchanged_ages_on_our_clock_and_a_refresh_starts_its_watch_again(tmp_path):
    path = tmp_path / "lease"
    path.write_text("x")
    seen = Sightings()
    assert seen.unchanged_for(path, os.stat(path), now=100.0) == 0.0
    assert seen.unchanged_for(path, os.stat(path), now=130.0) == 30.0
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # the holder's refresh
    assert seen.unchanged_for(path, os.stat(path), now=131.0) == 0.0
    assert seen.unchanged_for(path, os.stat(path), now=140.0) == 9.0


def test_an_old_mtime_alone_never_makes_a_file_stale_but_a_watch_past_the_holders_refreshes_does():
    # (mtime age 3600 s: a dead holder, or a holder whose clock is an hour behind ours)
    assert not sightings.stale(0.0, 3600.0, stale_after=600.0, refresh_s=5.0)
    assert not sightings.stale(11.9, 3600.0, stale_after=600.0, refresh_s=5.0)
    assert sightings.stale(12.0, 3600.0, stale_after=600.0, refresh_s=5.0)
    # A young mtime (clocks agreeing, a holder held up): the full --stale-after since we watch.
    assert not sightings.stale(599.0, 10.0, stale_after=600.0, refresh_s=5.0)
    assert sightings.stale(600.0, 10.0, stale_after=600.0, refresh_s=5.0)
    assert sightings.stale_in(2.0, 3600.0, stale_after=600.0, refresh_s=5.0) == 10.0


def test_a_stale_after_shorter_than_two_of_the_holders_refreshes_never_finds_it_stale_between_two_of_them():
    # (a holder refreshing every 5 s, watched by a fleet with --stale-after 4)
    assert not sightings.stale(6.0, 6.0, stale_after=4.0, refresh_s=5.0)
    assert not sightings.stale(11.9, 11.9, stale_after=4.0, refresh_s=5.0)
    assert sightings.stale(12.0, 12.0, stale_after=4.0, refresh_s=5.0)
    assert sightings.stale_in(4.0, 4.0, stale_after=4.0, refresh_s=5.0) == 8.0


def test_past_the_most_files_watched_every_watch_starts_again_so_no_verdict_comes_sooner(tmp_path, monkeypatch):
    monkeypatch.setattr(sightings, "MAX_WATCHED", 3)
    seen = Sightings()
    paths = [tmp_path / f"c{i}" for i in range(4)]
    for p in paths:
        p.write_text("x")
    for p in paths[:3]:
        seen.unchanged_for(p, os.stat(p), now=0.0)
    assert seen.unchanged_for(paths[0], os.stat(paths[0]), now=50.0) == 50.0
    seen.unchanged_for(paths[3], os.stat(paths[3]), now=60.0)  # a fourth: the table starts again
    assert seen.unchanged_for(paths[0], os.stat(paths[0]), now=70.0) == 0.0
