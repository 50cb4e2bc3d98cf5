"""Whether other fleets' batch jobs have ended, asked off the loop.

A fleet sharing a run directory judges the other fleets on it live by their pid when
they run on this host, else by the age of their registration or lease: one killed on
another node (a node failure, a SIGKILL at the job's time limit) held its claimed steps
for `--stale-after` (10 minutes by default) while every fleet still on the directory
waited for them. Its records name its batch job and Slurm cluster; once that job has
ended (fleet.site.jobstate), nothing of it runs any more, and its steps are free.

The question is a `squeue`, a round trip to slurmctld of milliseconds to seconds, which
the loop must never wait for: `ended(job)` answers from what is known now and, if the
job was not asked about in the last LOOK_S, leaves the question to a thread of its own
(started at the first question: most fleets never ask one). So a dead fleet is found
gone within about LOOK_S of its job's end, and a shared run directory costs slurmctld
one query per other fleet's job per LOOK_S at most (workflow tools poll a job's state
about as often), and none when every fleet on it runs on this host. A job found ended
stays ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from fleet.site import jobstate

LOOK_S = 30.0  # a job not found ended is asked about again after this long (as often as batch tools poll)

log = logging.getLogger("fleet.control.coordinator")


class JobWatch:
    """Answers "has this batch job ended?" without waiting (see the module's docstring)."""

    def __init__(self, ask=jobstate.ended):
        self._ask = ask  # job -> True (ended), False (may run), None (cannot tell)
        self._lock = threading.Condition()
        self._asked: dict[str, float] = {}  # job -> when last put to the thread (monotonic)
        self._ended: set[str] = set()
        self._todo: deque = deque()
        self._thread: threading.Thread | None = None

    def ended(self, job: str) -> bool:
        """True once the job was found ended; else False, and the job asked about again
        in the background if it was not in the last LOOK_S."""
        with self._lock:
            if job in self._ended:
                return True
            now = time.monotonic()
            if now - self._asked.get(job, -LOOK_S) >= LOOK_S:
                self._asked[job] = now
                self._todo.append(job)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="fleet-jobwatch", daemon=True)
                    self._thread.start()
                self._lock.notify()
            return False

    def of(self, rec: dict) -> bool:
        """Whether the fleet a lease or registration record names is gone by its batch
        job: another host's, in another job of this Slurm cluster (jobstate.tells), ended."""
        return jobstate.tells(rec.get("host"), rec.get("job"), rec.get("cluster")) and self.ended(rec["job"])

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._todo)
                job = self._todo.popleft()
            said = self._ask(job)  # (outside the lock: the loop's questions never wait for it)
            if said is True:
                with self._lock:
                    self._ended.add(job)
                log.info("another fleet's batch job (%s) has ended: the fleets that ran in it are gone from the run "
                         "directory, and the steps they held are free", job)
