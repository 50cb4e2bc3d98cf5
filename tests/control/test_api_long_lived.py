"""The Python API's client (fleet.Fleet) kept for hours, as a notebook or a driver script
keeps it: a question cut short by Ctrl-C, the fleet stopped and brought up again under
it, used in a forked child, dropped without close() and connected again, closed and
still asked. Real fleets, real processes, real sockets, real signals."""

from __future__ import annotations

import os
import signal
import textwrap
import time

import pytest
import zmq

from fleetharness import assert_nothing_left, fleet, python

import fleet as F
from fleet.control.client import CoordinatorGone, FleetError


def up_in(run, cwd):
    fleet("up", "--local", "--nodes", "1", "--run-dir", str(run), "--heartbeat-timeout", "60", cwd=cwd,
          check=True, timeout=60)


@pytest.fixture
def run(tmp_path):
    """A local fleet of one node up in tmp_path/run (a long heartbeat timeout: a test
    stops its coordinator for a while); stopped after the test, whatever it left up."""
    run = tmp_path / "run"
    up_in(run, tmp_path)
    try:
        yield run
    finally:
        fleet("down", "--run-dir", str(run), cwd=tmp_path, timeout=60)
        assert_nothing_left(run)


@pytest.fixture
def client(run):
    f = F.connect(run)
    try:
        yield f
    finally:
        f.close()


def interrupted(f, call):
    """`call()` cut short by a KeyboardInterrupt (as Ctrl-C raises it) while the
    coordinator, stopped, cannot answer it; the coordinator then continues and answers
    it, late."""
    pid = f.conn.pid

    def ctrl_c(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, ctrl_c)
    os.kill(pid, signal.SIGSTOP)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # (well before a stopped coordinator is said to be: 1 s)
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        os.kill(pid, signal.SIGCONT)


def test_a_status_cut_short_by_ctrl_c_leaves_its_answer_to_no_later_question(client):
    interrupted(client, lambda: client.status(timeout=30))
    # (it took the status answer for this one's, and each later answer for the one after)
    reply = client.cancel("nosuch")
    assert reply.unknown == ["nosuch"], reply
    assert "counts" in client.status(timeout=30)


def test_a_submission_cut_short_by_ctrl_c_leaves_its_answer_to_no_later_question(client):
    interrupted(client, lambda: client.submit([{"id": "cut", "command": "true"}], name="cut", timeout=30))
    st = client.status(timeout=30)  # (it was the submission's answer: AttributeError)
    assert "counts" in st, st
    sub = client.submit([{"id": "next", "command": "true"}], name="next")
    assert client.wait(sub, timeout=60) == {"next": "succeeded"}


def test_a_client_kept_across_fleet_down_and_up_says_at_once_its_fleet_is_down_and_to_connect_again(run, client):
    fleet("down", "--run-dir", str(run), cwd=run.parent, check=True, timeout=60)
    # (each waited out its timeout, then blamed silence; submit said the dead fleet might still take it in)
    with pytest.raises(CoordinatorGone, match=r"is down: it was stopped .*no fleet is up in .* now"):
        client.status(timeout=30)
    up_in(run, run.parent)
    again = r"is down: it was stopped .*another fleet is up in .* now .*fleet\.connect\(\)"
    with pytest.raises(CoordinatorGone, match=again):
        client.submit([{"id": "after", "command": "true"}], name="after", timeout=30)
    with pytest.raises(CoordinatorGone, match=again):
        client.cancel("x")
    with F.connect(run) as fresh:
        assert "counts" in fresh.status()


def test_a_client_used_in_a_forked_child_says_so_at_once_instead_of_hanging(client):
    assert "counts" in client.status()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what the call did, and go (no pytest teardown here)
        try:
            os.close(r)
            try:
                client.status(timeout=5)
                said = "answered"
            except FleetError as e:
                said = f"FleetError: {e}"
            os.write(w, said.encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        deadline = time.monotonic() + 60  # (it spun for ever, whatever its timeout)
        while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
            time.sleep(0.05)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    with os.fdopen(r, "rb") as f:
        said = f.read().decode()
    assert "cannot be used in process" in said and "fleet.connect()" in said, said
    assert "counts" in client.status()  # (the parent's client is untouched)


def test_connecting_again_and_again_without_closing_never_fails_and_leaves_no_sockets(run, tmp_path):
    script = tmp_path / "again.py"
    script.write_text(textwrap.dedent(f"""
        import os
        import fleet
        with fleet.connect({str(run)!r}) as first:  # (ZeroMQ's context and its fds made)
            first.status()
        fds = len(os.listdir("/proc/self/fd"))
        for i in range(300):
            f = fleet.connect({str(run)!r})  # (the last one's dropped: a notebook cell run again)
            f.status()
        del f
        print("fds", fds, len(os.listdir("/proc/self/fd")))
        kept = fleet.connect({str(run)!r})  # left open at exit: exit must not hang on it
        kept.status()
    """))
    out = python(str(script), cwd=tmp_path, timeout=120)
    # (a dropped client's monitor name collided with the next one's: "Address already in use")
    assert out.returncode == 0, out.stderr
    before, after = map(int, out.stdout.split()[1:3])
    # Not one a call (300 calls): a closed socket's fds are freed by ZeroMQ's I/O thread, later,
    # so a few of the last ones may still be open when counted on a loaded machine.
    assert after <= before + 40, out.stdout


def test_a_monitor_name_an_earlier_socket_still_holds_does_not_stop_a_new_connection(run):
    # libzmq frees a closed socket's inproc names later, on its own thread; a new socket on
    # the same fd number took its monitor's name from it (pyzmq: "monitor.s-<fd>") and
    # connect() failed, "Address already in use". Here one socket holds every such name.
    squatter = zmq.Context.instance().socket(zmq.PAIR)
    squatter.setsockopt(zmq.LINGER, 0)
    try:
        for fd in range(1024):
            try:
                squatter.bind(f"inproc://monitor.s-{fd}")
            except zmq.ZMQError:
                pass
        with F.connect(run) as f:
            assert "counts" in f.status()
    finally:
        squatter.close(0)


def test_a_client_dropped_without_close_closes_its_sockets(run):
    f = F.connect(run)
    f.status()
    sock, monitor = f.client.sock, f.client.monitor
    del f  # (a notebook's `f = fleet.connect()` run again; the doc's `fleet.connect().down()`)
    assert sock.closed and monitor.closed


def test_submitting_on_a_closed_client_says_it_is_closed_and_writes_no_suite_file(run, client):
    client.close()
    api = run / ".fleet" / "api"
    before = set(api.iterdir()) if api.exists() else set()
    with pytest.raises(FleetError, match="is closed"):
        client.submit([{"id": "x", "command": "true"}], name="closed")
    assert (set(api.iterdir()) if api.exists() else set()) == before


def test_the_status_answer_lists_the_latest_submissions_and_counts_them_all(run, client):
    from fleet.control.status import STATUS_SUBMISSIONS
    made = [client.submit([{"id": f"s{i}", "command": "true"}], name=f"batch{i}").id
            for i in range(STATUS_SUBMISSIONS + 5)]
    st = client.status()
    # (it listed every submission ever made: ~81 bytes each in every answer, for good)
    assert [s["id"] for s in st["submissions"]] == made[-STATUS_SUBMISSIONS:], st["submissions"]
    assert st["submissions_total"] == len(made)
    text = fleet("status", "--run-dir", str(run), cwd=run.parent, check=True, timeout=60).stdout
    assert f"... and 5 earlier submissions (the latest {STATUS_SUBMISSIONS} are shown)" in text, text
