"""Which fleets of a run directory are this batch job's.

Several jobs may share one run directory (docs/user-guide.md, "Several fleets, shards
and audits"): each one's job script brings a fleet up (or `fleet run` embeds one) and
its EXIT trap runs `fleet down`. Before 2026-12-07 that `fleet down` stopped every
fleet of the run directory, another job's still at work too, and a `fleet run` of one
job drove another job's fleet (its own allocation idle) and died with that job. Inside
a batch job (fleet.wire.connection.this_job) `fleet down`, `fleet cancel` and `fleet
run` now act on this job's fleets only, and say in one line each which they left alone;
outside one (a login node), and for a fleet whose file names no job, nothing changed.
The Python API (fleet.connect, fleet.control.api.fleets) follows the same rule since
2026-12-07, with any_job=True as its opt-out (before, a script in one job could drive
another job's fleet)."""

from __future__ import annotations

from pathlib import Path

from fleet.wire import connection

ANY_JOB = "--any-job"  # `fleet down`'s and `fleet cancel`'s option for every job's fleets, as before


def another(conn: connection.Connection) -> bool:
    """Whether the fleet of conn is another batch job's than this process's."""
    return connection.another_job(conn.job, conn.cluster)


def whose(conn: connection.Connection, path: Path) -> str:
    """The fleet of conn in words: "Slurm job 391's fleet (embedded fleet run,
    coordinator pid P on HOST)"."""
    kind = "fleet up" if path.name == connection.NAME else "embedded fleet run"
    owner = f"{conn.job}'s fleet" if conn.job else "a fleet of no batch job"
    return f"{owner} ({kind}, coordinator pid {conn.pid} on {conn.host})"


def left_alone(conn: connection.Connection, path: Path, command: str, does: str = "stops it too") -> str:
    """The line that says `command` left another job's fleet alone, and how to include it."""
    return f"{command}: left alone: {whose(conn, path)}; `{command} {ANY_JOB}` {does}"


def this_job_ended(command: str) -> str:
    """The line `command` adds to those that left another job's fleet alone when the job
    this shell's variables name has ended ("" if not, or not known): the variables are
    an old job's (an salloc shell after its job), which is why every fleet here seemed
    another job's. One query of the batch system (fleet.site.jobstate.ended), only then:
    never for `fleet status`, which runs often. Said, not acted on: stopping other jobs'
    fleets on the strength of a query is what ANY_JOB is there to ask for."""
    from fleet.site.jobstate import ended
    job = connection.this_job()
    if not job or ended(job) is not True:
        return ""
    var = "SLURM_JOB_ID" if job.startswith("Slurm") else "PBS_JOBID"
    return (f"{command}: this shell's {var} names {job}, which has ended: variables left from an old job (an "
            f"salloc shell whose job ended?); unset them (as on a login node, every fleet is then this shell's) "
            f"or give {ANY_JOB}")


def split(fleets: list, any_job: bool) -> tuple[list, list]:
    """(this job's, other jobs') of fleets, each a (path, conn); with any_job, all are this job's."""
    if any_job:
        return list(fleets), []
    mine = [(p, c) for p, c in fleets if not another(c)]
    return mine, [(p, c) for p, c in fleets if another(c)]


def to_use(run_dir: Path, any_job: bool = False) -> tuple[connection.Connection | None,
                                                          connection.Connection | None]:
    """The fleet `fleet up` started in run_dir that `fleet run` is to use, and the one it
    passed over: (conn, None) for this job's (or any job's, with any_job; or one that
    names no job), (None, theirs) for another job's, (None, None) for none up."""
    from fleet.control.client import find
    conn = find(run_dir)
    if conn is not None and not any_job and another(conn):
        return None, conn
    return conn, None


def passed_over(run_dir: Path, conn: connection.Connection) -> str:
    """What `fleet run` says when the fleet up in run_dir is another job's."""
    return (f"the fleet up in {run_dir} is {whose(conn, Path(run_dir) / connection.NAME)}, not this job's: "
            f"this job starts its own beside it (`fleet run --fleet-of-any-job` would use that one)")


def only_theirs(run_dir: Path, theirs: list) -> str:
    """Why fleet.connect inside a batch job finds no fleet to use in run_dir: only other
    jobs' fleets (each a (path, conn)) are up there, each named, and how to use one."""
    named = "; ".join(whose(conn, path) for path, conn in theirs)
    return (f"no fleet of this job ({connection.this_job()}) is up in {run_dir}, only another job's: {named}. "
            f"Its steps would run on that job's nodes and end with that job: start this job's own "
            f"(fleet up, or fleet run), or pass any_job=True to use that one")
