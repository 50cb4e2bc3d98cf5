"""The Python API's client (fleet.Fleet) used as programs use it: from several threads,
against a coordinator that stops answering for a while, with ids given alone, with
suite names no file may carry, and waiting for a submission the fleet does not know.
Real fleets, real processes, real sockets."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from fleetharness import assert_nothing_left, fleet

import fleet as F
from fleet.control.client import FleetError


@pytest.fixture
def up(tmp_path):
    """A local fleet of one node up in tmp_path/run (a long heartbeat timeout: a test
    stops its coordinator for a while); a client of it."""
    run = tmp_path / "run"
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run), "--heartbeat-timeout", "60", cwd=tmp_path,
          check=True, timeout=60)
    f = F.connect(run)
    try:
        yield f
    finally:
        f.close()
        fleet("down", "--run-dir", str(run), cwd=tmp_path, timeout=60)
        assert_nothing_left(run)


def test_one_client_shared_by_a_thread_that_waits_and_one_that_asks_status_gets_each_its_own_answers(up):
    # (it had one socket and matched answers by order: each thread took the other's)
    sub = up.submit([{"id": f"s{i}", "command": "sleep 0.2"} for i in range(6)], name="threads")
    errors: list = []
    statuses: list = []
    done = threading.Event()

    def ask_status():
        while not done.is_set():
            try:
                statuses.append(up.status()["counts"])
            except Exception as e:  # noqa: BLE001 (any error is the defect)
                errors.append(repr(e))
                return

    t = threading.Thread(target=ask_status)
    t.start()
    try:
        outcomes = up.wait(sub, timeout=120)
    finally:
        done.set()
        t.join(30)
    assert not errors, errors
    assert outcomes == {f"s{i}": "succeeded" for i in range(6)}
    assert len(statuses) >= 2 and all(isinstance(c, dict) for c in statuses)


def test_waiting_for_a_submission_the_fleet_does_not_know_fails_at_once(up):
    t0 = time.monotonic()
    with pytest.raises(FleetError, match="cannot wait for submission 9999 .*no submission 9999"):
        up.wait(9999, timeout=60)  # (it used to wait for ever: TimeoutError here, not this at once)
    assert time.monotonic() - t0 < 30


def test_a_submission_the_coordinator_did_not_answer_in_time_leaves_the_client_usable(up):
    pid = up.conn.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(FleetError, match="did not answer the submission .*may still take it in"):
            up.submit([{"id": "late", "command": "true"}], name="late", timeout=1)
    finally:
        os.kill(pid, signal.SIGCONT)
    # The submission's answer comes late: it is not taken for the answer to the next question.
    st = up.status(timeout=30)
    assert "counts" in st, st
    sub = up.submit([{"id": "next", "command": "true"}], name="next")
    assert up.wait(sub, timeout=60) == {"next": "succeeded"}


def test_an_id_given_alone_as_a_string_is_one_id_not_its_characters(up):
    sub = up.submit([{"id": "ab", "command": "true"}, {"id": "a", "command": "false"},
                     {"id": "b", "command": "false"}], name="alone", only="ab")
    assert up.wait(sub, timeout=60) == {"ab": "succeeded"}
    slow = up.submit([{"id": "slow", "command": "sleep 60"}], name="slow")
    reply = up.cancel("slow")
    assert reply.unknown == [] and "slow" in reply.running + reply.waiting, reply
    assert up.wait(slow, timeout=60) == {"slow": "cancelled"}


@pytest.mark.parametrize("name", ["a/b", "x" * 300])
def test_a_suite_name_no_file_may_carry_gets_the_fleets_answer_not_an_os_error(up, name):
    try:
        sub = up.submit([{"id": "n", "command": "true"}], name=name)
    except F.SubmitError as e:  # refused by the coordinator, naming the field
        assert "name" in str(e.problems), e.problems
    else:
        assert up.wait(sub, timeout=60) == {"n": "succeeded"}
