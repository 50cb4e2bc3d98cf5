"""The pure scheduler and a step that passed its own memory: out_of_memory is final."""

from __future__ import annotations

from fleet.core.scheduler import Blocked, Finished, StepExited

from coretools import node, scheduler


def test_an_out_of_memory_step_is_not_retried_whatever_its_retries_and_blocks_its_dependents():
    sched, out = scheduler([node("n1", 1)], {"id": "a", "retries": 3, "memory": "1GiB"}, {"id": "b", "deps": ["a"]})
    reason = "out of memory: used 1GiB of its memory 1GiB; killed by the fleet's watchdog"
    assert sched.handle(StepExited("a", 1, "out_of_memory", reason), 1.0) == [
        Finished("a", 1, "out_of_memory", reason), Blocked("b", "a")]
    assert sched.state("a") == "out_of_memory" and sched.state("b") == "blocked" and sched.finished()


def test_a_success_after_the_kernel_killed_a_process_of_it_is_finished_with_that_reason():
    # (its node's word of the kill: `fleet run` prints it on the step's line)
    sched, out = scheduler([node("n1", 1)], {"id": "a", "memory": "1GiB"}, {"id": "b", "deps": ["a"]})
    note = "the kernel killed 1 process of it at its memory 1GiB (cgroup v1 memory.limit_in_bytes; used 1GiB)"
    decisions = sched.handle(StepExited("a", 1, "succeeded", note), 1.0)
    assert decisions[0] == Finished("a", 1, "succeeded", note), decisions
    assert sched.state("a") == "succeeded" and sched.state("b") != "blocked"
    assert sched.handle(StepExited("b", 1, "succeeded"), 2.0)[0] == Finished("b", 1, "succeeded", "")
