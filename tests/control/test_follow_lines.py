"""`fleet run`'s lines as steps end (fleet.control.followlines.Lines), given answers:
a success is one line in a log and only moves the bar on a terminal, but a success that
carries a reason (its node saw the kernel's OOM killer take a process of it) is said
with it on both."""

from __future__ import annotations

import io

from fleet.control.api import Update
from fleet.control.followlines import Lines

NOTE = "the kernel killed 1 process of it at its memory 100MiB (cgroup v1 memory.limit_in_bytes; used 100MiB)"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def shown(out, finished) -> list[str]:
    lines = Lines(out, len(finished))
    lines(Update(tuple(finished), {"succeeded": len(finished)}, {}))
    lines.ended()
    return [line.rpartition("\r\033[K")[2] for line in out.getvalue().split("\n") if line]


def test_a_success_the_kernel_took_a_process_of_is_said_with_its_reason_in_a_log_and_on_a_terminal():
    finished = [["plain", "succeeded", 1, ""], ["shell_over", "succeeded", 1, NOTE]]
    assert shown(io.StringIO(), finished) == ["[1/2]  succeeded  plain", f"[2/2]  succeeded  shell_over: {NOTE}"]
    on_tty = shown(Terminal(), finished)
    assert f"[2/2]  succeeded  shell_over: {NOTE}" in on_tty, on_tty
    assert not any("plain" in line for line in on_tty), on_tty  # (a plain success only moves the bar)


def test_a_failure_another_fleet_ended_without_running_the_step_names_no_log_and_one_it_ran_does():
    # Before 2026-12-07 `failed t/10: unrunnable in fleet ...` named steps/t/10/log, which
    # did not exist: the step never ran, there or here.
    out = io.StringIO()
    lines = Lines(out, 4)
    lines(Update((("t/10", "failed", 0, "unrunnable in fleet vm-1-a: too wide for it"),
                  ("t/11", "failed", 0, "blocked in fleet vm-1-a: dependency t/10 did not succeed"),
                  ("t/12", "failed", 1, "failed in fleet vm-1-a: exit status 3"),
                  ("t/13", "failed", 1, "exit status 2")), {"failed": 4}, {}))
    said = {line.split()[2].rstrip(":"): line for line in out.getvalue().splitlines() if line.startswith("[")}
    assert "log" not in said["t/10"] and "log" not in said["t/11"], said
    assert said["t/12"].endswith("(log in the run directory: steps/t/12/log)"), said
    assert said["t/13"].endswith("(log in the run directory: steps/t/13/log)"), said
    summary = "\n".join(lines.not_succeeded.lines("/run"))
    assert "log of t/10" not in summary and "log of t/12: /run/steps/t/12/log" in summary, summary
