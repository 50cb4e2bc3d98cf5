"""What a node's log says steps left running (fleet.node.orphans) when a batch system
stops the agents with SIGTERM to every process of their step (a job's end, the
launcher stopped): the zygote's own processes are not among them. Its forking helper
dies of that SIGTERM too (fleet.node.forker); before 2026-12-07 the spare child it had
forked and handed over, not yet collected, was forgotten, and the log said "ended 1
process(es) that steps left running outside their process groups: PID (python)" on a
node where no step had run. Real fleets, real processes: the SIGTERM goes to the agent's
process group (a local agent leads one; its zygote and the helper are in it)."""

from __future__ import annotations

import os
import random
import signal

import psutil

from fleetharness import assert_nothing_left, events, fleet, tagged, wait_for, write_suite

LEFT = "outside their process groups"


def _live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _has_socket(pid: int) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:") for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def helper_and_spare(zygote: int) -> tuple[int, int] | None:
    """The zygote's helper (its child with a socket) and the spare child the helper
    forked for it (one running the zygote's command line, without a socket)."""
    try:
        z = psutil.Process(zygote)
        own = z.cmdline()
        kids = [c for c in z.children() if c.status() != psutil.STATUS_ZOMBIE]
        helpers = [c for c in kids if _has_socket(c.pid)]
        spares = [c for c in kids if c.cmdline() == own and not _has_socket(c.pid)]
    except psutil.Error:
        return None
    return (helpers[0].pid, spares[0].pid) if len(helpers) == 1 and len(spares) == 1 else None


def sigterm_the_agents_step(tmp_path, suite: str | None) -> str:
    """`fleet up` (one node), `fleet run` of `suite` if given, then SIGTERM to the agent's
    process group once its zygote holds a spare from its helper, as a batch system
    stops a step; the node's log once agent and zygote are gone (the fleet then down,
    and the spare gone with it)."""
    run_dir = tmp_path / "run"
    try:
        fleet("up", "--run-dir", str(run_dir), "--nodes", "1", cwd=tmp_path, check=True, timeout=90)
        if suite is not None:
            r = fleet("run", str(write_suite(tmp_path / "s.toml", suite)), "--run-dir", str(run_dir), cwd=tmp_path,
                      timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
        joined = [e for e in events(run_dir) if e["kind"] == "node_joined"]
        assert len(joined) == 1, joined
        agent, zygote = joined[0]["pid"], joined[0]["zygote_pid"]
        assert os.getpgid(agent) == agent and os.getpgid(zygote) == agent  # (what the SIGTERM reaches)
        helper, spare = wait_for(lambda: helper_and_spare(zygote), timeout=60, what="the zygote's helper and spare")
        # A spare the zygote lost track of ends by itself once its pipe closes, but only
        # when the kernel runs it: stopped, it stands for one not run yet on a loaded node.
        os.kill(spare, signal.SIGSTOP)
        # The group's SIGTERM reaches the helper first (a batch system's signals are not
        # simultaneous), and the zygote reaps it before its own comes.
        os.kill(helper, signal.SIGTERM)
        wait_for(lambda: not psutil.pid_exists(helper), timeout=30, what="the zygote to reap its helper")
        os.killpg(agent, signal.SIGTERM)
        wait_for(lambda: not _live(agent) and not _live(zygote), timeout=60, what="the agent and zygote to stop")
        log = (run_dir / "agents" / "node1.log").read_text()
        assert "stopping: signal SIGTERM" in log, log
        wait_for(lambda: not _live(spare), timeout=30, what="the spare to be ended")
        return log
    finally:
        d = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert d.returncode == 0, d.stdout + d.stderr


def test_a_node_where_no_step_ran_stopped_with_its_step_s_sigterm_says_no_step_left_anything_running(tmp_path):
    log = sigterm_the_agents_step(tmp_path, None)
    assert LEFT not in log, log
    assert_nothing_left(tmp_path / "run")


def test_a_node_that_ran_an_ordinary_step_stopped_with_its_step_s_sigterm_says_no_step_left_anything_running(
        tmp_path):
    log = sigterm_the_agents_step(tmp_path, '[[steps]]\nid = "a"\ncommand = ["true"]\n')
    assert LEFT not in log, log
    assert_nothing_left(tmp_path / "run")


def test_a_process_a_step_left_in_a_session_of_its_own_is_still_named_alone_and_ended(tmp_path):
    seconds = random.randrange(16000, 19000, 5)  # (found by its command line: no other test's)
    try:
        log = sigterm_the_agents_step(tmp_path, f'[[steps]]\nid = "d"\ncommand = "setsid sleep {seconds} & sleep 0.5"\n')
        daemon = [line for line in log.splitlines() if LEFT in line]
        assert len(daemon) == 1 and daemon[0].endswith(" (sleep)") and "ended 1 process(es)" in daemon[0], log
        assert_nothing_left(tmp_path / "run", tag=f"sleep {seconds}")
    finally:
        for line in tagged(f"sleep {seconds}"):
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except OSError:
                pass
