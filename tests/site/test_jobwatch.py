"""fleet.control.jobwatch: whether another fleet's batch job ended is asked of the real
Slurm on a thread of the watch's own (the coordinator's loop only reads the answer), at
most once per LOOK_S while the job runs, and never again once it has ended."""

from __future__ import annotations

import subprocess
import threading

from cluster import TERMINAL_STATES, _job_fields, _run, requires_slurm
from fleetharness import wait_for

from fleet.control import jobwatch
from fleet.site import jobstate

pytestmark = [requires_slurm]


def test_a_jobs_end_is_asked_on_the_watchs_thread_once_a_look_and_kept_once_ended(monkeypatch):
    p = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "-J", "fleet-jobwatch", "--wrap", "sleep 300"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    job_id = p.stdout.strip().split(";")[0]
    job = f"Slurm job {job_id}"
    asked: list[tuple[str, bool | None]] = []  # (the asking thread, Slurm's answer)

    def ask(j: str) -> bool | None:
        said = jobstate.ended(j)
        asked.append((threading.current_thread().name, said))
        return said

    try:
        wait_for(lambda: (_job_fields(job_id) or {}).get("JobState") == "RUNNING", 60, "the job running")
        w = jobwatch.JobWatch(ask)
        assert [w.ended(job) for _ in range(50)] == [False] * 50  # the loop reads; one question goes out
        wait_for(lambda: asked, 30, "the watch asking Slurm")
        assert asked == [("fleet-jobwatch", False)]
        _run(["scancel", job_id])
        wait_for(lambda: (_job_fields(job_id) or {}).get("JobState", "GONE") in TERMINAL_STATES | {"GONE"}, 30,
                 "the job ended")
        assert not w.ended(job) and len(asked) == 1  # within LOOK_S of the last question: not asked again
        monkeypatch.setattr(jobwatch, "LOOK_S", 0.0)
        wait_for(lambda: w.ended(job), 30, "the watch finding the job ended")
        n = len(asked)
        assert asked[-1] == ("fleet-jobwatch", True)
        assert all(w.ended(job) for _ in range(50)) and len(asked) == n  # kept: never asked again
    finally:
        _run(["scancel", job_id])
