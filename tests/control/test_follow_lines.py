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
