"""Which errors say the run directory cannot be written (fleet.node.diskfull on a node,
fleet.control.drain on the coordinator): a full file system (ENOSPC, EDQUOT) and a
read-only one (EROFS) drain the fleet, each with its own reason; EIO does only for the
coordinator's own writes (a node's failing mount is that node's); any other error (a
file's mode, a missing path) fails the step as ever."""

from __future__ import annotations

import errno

from fleet.control.drain import FAILING, FULL, READ_ONLY, UNWRITABLE, unwritable
from fleet.node import diskfull
from fleet.node.stepdirs import SetupFailed


def test_a_full_or_read_only_file_system_stops_a_steps_set_up_and_any_other_error_fails_the_step():
    for e in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        assert diskfull.errno_of(OSError(e, "x")) == e
        assert diskfull.errno_of(SetupFailed("cannot make the step's records directory", e, own=True)) == e
    # The step's own work or output directories: full is full, read-only may be a mount of theirs.
    assert diskfull.errno_of(SetupFailed("cannot make the work directory", errno.ENOSPC)) == errno.ENOSPC
    assert diskfull.errno_of(SetupFailed("cannot make the work directory", errno.EROFS)) is None
    for e in (errno.EACCES, errno.ENOENT, errno.EIO, errno.ENOTDIR):
        assert diskfull.errno_of(OSError(e, "x")) is None
    assert diskfull.errno_of(ValueError("not an OSError")) is None


def test_the_coordinator_says_a_read_only_or_failing_run_directory_cannot_be_written_and_a_full_one_is_full():
    assert unwritable(errno.ENOSPC) == unwritable(errno.EDQUOT) == FULL
    assert unwritable(errno.EROFS) == READ_ONLY and "read-only" in READ_ONLY and "full" not in READ_ONLY
    assert unwritable(errno.EIO) == FAILING
    for e in (errno.EACCES, errno.ENOENT, None):
        assert unwritable(e) == ""
    assert set(UNWRITABLE) == {FULL, READ_ONLY, FAILING}
