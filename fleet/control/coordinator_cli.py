"""The coordinator's command line: `python -m fleet.control.coordinator ARGS`, as
`fleet up` (fleet.control.client) starts it."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import time
from pathlib import Path

import psutil
import zmq

from fleet.control import jobstart, loopback
from fleet.control.drain import DRAIN_BEFORE_S
from fleet.control.liveness import report_hold
from fleet.core.lookahead import ahead
from fleet.core.ranks import DEFAULT as DEFAULT_ORDER, MODES as ORDERS, ordered
from fleet.core.reservations import RESERVE_AFTER_S
from fleet.site.allocation import AllocationError, at_start, from_environment, refusal
from fleet.site.launch import launcher_for
from fleet.site.profiles import ProfileError, detect, load as load_profile
from fleet.wire import connection, fdlimit, logtag

log = logging.getLogger("fleet.control.coordinator")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fleet-coordinator")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--nodes", type=int, default=1, help="pretend nodes of a local fleet")
    ap.add_argument("--machine", default="", help="machine profile (default: detected)")
    ap.add_argument("--bind", default="", help="address to listen on (default: 127.0.0.1 locally, all interfaces in a job)")
    ap.add_argument("--advertise", default=os.environ.get("FLEET_ADVERTISE", ""),
                    help="address, host name or network interface agents and clients use to reach us "
                         "(default: $FLEET_ADVERTISE, else the machine profile's, else this host's address)")
    ap.add_argument("--preload", default="")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--join-timeout", type=float, default=120.0)
    ap.add_argument("--stale-after", type=float, default=600.0,
                    help="seconds after which another fleet's unrefreshed claim may be adopted")
    ap.add_argument("--max-attempts", type=int, default=5,
                    help="attempts of a step's current definition that ended without success (across "
                         "fleets, since it last succeeded or was forced) before it is stopped (0: no limit)")
    ap.add_argument("--end", type=float, default=None,
                    help="when the allocation ends, epoch seconds (default: asked of the batch system, once)")
    ap.add_argument("--end-from", default="", metavar="WHERE",
                    help="the batch job was asked already (fleet up: fleet.control.preflight.asked_job): --end is "
                         "its end (none if not given), WHERE where that came from; the job is not asked again")
    ap.add_argument("--drain-before", type=float, default=None,
                    help="seconds before the end at which running steps are stopped (interrupted); "
                         f"default {DRAIN_BEFORE_S:g}, at most half the time left at the start")
    ap.add_argument("--reserve-after", type=float, default=RESERVE_AFTER_S,
                    help="seconds a ready step waits before resources are reserved for it (fleet.core.reservations)")
    ap.add_argument("--no-reservations", action="store_true", help="no reservations: greedy backfill only")
    ap.add_argument("--reserve-ahead", type=int, default=0,
                    help="reservations planned ahead for wide steps about to be ready (fleet.core.lookahead)")
    ap.add_argument("--order", choices=ORDERS, default=DEFAULT_ORDER,
                    help="the order of ready steps of equal priority (fleet.core.ranks)")
    ap.add_argument("--connection-name", default=connection.NAME)
    ap.add_argument("--window", type=int, default=None,
                    help="steps each node may be handed ahead of time (default: its cores; 0: none)")
    ap.add_argument("--window-depth", type=_one_or_more, default=1,
                    help="of them, steps that may wait behind one running step, each behind the one before "
                         "(default 1; above 1 the default window is the node's cores times it)")
    ap.add_argument("--report-hold", type=float, default=None,
                    help="seconds an agent holds step reports after a send, to send them together "
                         "(default: scaled with the allocation, fleet.control.liveness.report_hold)")
    ap.add_argument("--coordinator-cores", type=int, default=0,
                    help="cores of its node the coordinator keeps for itself, in a batch job (fleet.site.owncores)")
    ap.add_argument("--parent-pid", type=int, default=0,
                    help="stop (SIGTERM: a clean teardown) when this process, our parent, dies")
    return ap


def _logging() -> str:
    """Log to stderr (coordinator.log), every line saying which fleet wrote it: fleets
    sharing the run directory share the file (fleet.wire.logtag). This fleet's id."""
    fleet_id = logtag.new_id()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s " + logtag.tag(fleet_id).replace("%", "%%")
                        + "%(name)s %(levelname)s %(message)s")
    return fleet_id


def _one_or_more(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    """Run a coordinator until it is stopped; its exit status (2: cannot start here)."""
    args = parser().parse_args(argv)
    fleet_id = _logging()
    if args.parent_pid:
        from fleet.node.child import set_pdeathsig
        set_pdeathsig(signal.SIGTERM)
        if os.getppid() != args.parent_pid:  # it died before the death signal was armed
            log.error("the process that started this fleet (pid %d) is gone", args.parent_pid)
            return 1
    preload, run_dir = tuple(m for m in args.preload.split(",") if m), Path(args.run_dir)
    try:
        profile = load_profile(args.machine or detect())
        planned = _planned(args)  # (the batch job asked, if it is, before anything starts)
    except (ProfileError, AllocationError) as e:
        log.error("%s", e)
        return 2
    nodes = args.nodes
    alloc_nodes: tuple[str, ...] = ()
    if profile.launcher != "local":
        if (alloc_nodes := _job_nodes(profile)) is None:
            return 2
        nodes = len(alloc_nodes)
    if (own := _own_cores(args.coordinator_cores, profile, alloc_nodes)) is None:
        return 2
    # What governs this fleet's patience, for whoever reads coordinator.log after.
    log.info("settings: heartbeat %g s, agent lost after %g s, stale claims adopted after %g s, "
             "max attempts %s, reservations %s (%d planned ahead), order %s, reports held %g s", args.heartbeat,
             args.timeout, args.stale_after, args.max_attempts or "unlimited",
             "off" if args.no_reservations else f"after {args.reserve_after:g} s", args.reserve_ahead, args.order,
             report_hold(nodes, args.report_hold))
    try:
        bind, advertise = addresses(args.bind, args.advertise or profile.advertise, profile.launcher == "local")
    except ValueError as e:
        log.error("%s", e)
        return 2
    _open_files(nodes)
    # Looked up at call time, through the module: what the coordinator module holds is what runs.
    from fleet.control import coordinator
    try:
        coord = coordinator.Coordinator(run_dir, nodes, launcher_for(profile, run_dir, alloc_nodes, own),
                                        bind_host=bind, heartbeat_s=args.heartbeat, timeout_s=args.timeout,
                                        join_timeout_s=args.join_timeout, preload=preload, profile=profile,
                                        advertise=advertise, stale_after=args.stale_after,
                                        max_attempts=args.max_attempts, connection_name=args.connection_name,
                                        window=args.window, window_depth=args.window_depth,
                                        report_hold_s=args.report_hold, fleet_id=fleet_id)
    except zmq.ZMQError as e:  # (the sockets are bound first, before the lease is taken)
        log.error("cannot listen on %s: %s%s", bind, e,
                  f" (is {advertise} an address of this host?)" if advertise and bind == advertise else "")
        return 2
    except OSError as e:  # (a journal on a read-only mount, say: the lease, if taken, is given back)
        return _cannot_start(e, None, run_dir, fleet_id)
    coord.cause.parent = args.parent_pid  # (its death signal, armed above, is a SIGTERM: said as its death)
    _say_where(coord, bind, nodes, profile.launcher == "local")
    try:
        return _serve(coord, args, planned, run_dir)
    except OSError as e:  # (its agents' launch, say: no descriptor left for a pipe)
        return _cannot_start(e, coord, run_dir, fleet_id)


def _serve(coord, args, planned: tuple, run_dir: Path) -> int:
    """The coordinator made: its allocation's end planned, its scheduler tuned; run it."""
    coord.drain.plan(*planned)
    if coord.drain.began is not None:  # (a fleet brought up again in its job judges as the job's first: jobstart)
        coord.drain.measured_from(jobstart.window_from(run_dir, coord.drain.began, coord.drain.end))
    # The batch system's warning (#SBATCH --signal=B:USR1@300, passed on by fleet run): drain now.
    signal.signal(signal.SIGUSR1, coord.drain.on_signal)
    coord.sched.reserve_after(None if args.no_reservations else args.reserve_after)
    ahead(ordered(coord.sched, args.order), args.reserve_ahead)
    return coord.serve()


def _cannot_start(e: OSError, coord, run_dir: Path, fleet_id: str) -> int:
    """The coordinator could not start (or go on) for an OS error: one line naming the
    path and the errno (not a traceback: with one once its loop had begun, where any OS
    error is a fault to find), its agents stopped and the lease given back if it got that
    far; its exit status, 4 for a file system that cannot be written, else 2 (1 once running).
    (Before 2026-12-07 a traceback, exit 1, and .fleet/lease left behind.) 4 as a fleet
    with no room to come up exits (fleet.control.comingup): its clients say so and exit 4."""
    import errno
    where = f"{e.filename}: " if e.filename else ""
    name = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else "?"
    hint = "; raise the open-file limit (ulimit -n)" if e.errno in (errno.EMFILE, errno.ENFILE) else ""
    # Its loop had begun (the submissions' worker runs): a fault of a running fleet, with where it came from.
    running = coord is not None and getattr(coord.intake, "worker", None) is not None
    log.error("the coordinator %s: %s%s (errno %s, %s)%s", "stopped on an OS error" if running else "cannot start",
              where, e.strerror or e, e.errno, name, hint, exc_info=e if running else None)
    from fleet.control.lease import give_back
    for stop in ((coord.launcher.stop,) if coord is not None else ()) + (lambda: give_back(run_dir, fleet_id),):
        try:
            stop()
        except Exception as again:  # (said, not raised: the one line above is the cause)
            log.error("while stopping after it: %r", again)
    return 4 if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) else 1 if running else 2


def _open_files(nodes: int) -> None:
    """Raise the soft open-file limit for `nodes` nodes (fleet.wire.fdlimit), and log it: a
    descriptor a node's connection, so a soft limit of 1,024 would stop a 1,000-node fleet."""
    fds = fdlimit.raise_soft(fdlimit.for_nodes(nodes))
    (log.info if fds.enough() else log.warning)("%s", fds.line())


def _job_nodes(profile) -> tuple[str, ...] | None:
    """The batch job's nodes, for a profile whose launcher needs one, or None (logged)
    when this is no batch job, or one of another batch system's (srun in a PBS job, PALS
    mpiexec in a Slurm one: fleet.control.preflight.wrong_job)."""
    from fleet.control.preflight import wrong_job
    alloc = from_environment()
    if not alloc.nodes:
        log.error("machine %s starts agents with %s, but this is not inside a batch job", profile.name, profile.launcher)
        return None
    if why := wrong_job(profile, alloc):
        log.error("%s", why)
        return None
    return alloc.nodes


def _say_where(coord, bind: str, nodes: int, local: bool) -> None:
    """Log what the coordinator advertised, and (before the agents start) the loopback
    address it would tell the agents of other nodes (fleet.control.loopback)."""
    log.info("agents connect to %s, clients to %s (listening on %s)", coord.agent_endpoint, coord.client_endpoint,
             bind)
    if warn := loopback.warning(coord.transport.address, coord.transport.named, nodes, local):
        log.warning("%s", warn)


def _own_cores(n: int, profile, alloc_nodes: tuple[str, ...]) -> tuple[str, ...] | None:
    """--coordinator-cores N: keep N cores of this node (fleet.site.owncores); the agents'
    arguments that say so, or None (logged) if it cannot be done here."""
    if not n:
        return ()
    if profile.launcher == "local":
        log.error("--coordinator-cores %d: only in a batch job (a local fleet's pretend nodes share "
                  "this machine's cores with its coordinator)", n)
        return None
    from fleet.site import owncores
    try:
        node, cores = owncores.keep(n, profile.held_back_cores, alloc_nodes)
    except ValueError as e:
        log.error("%s", e)
        return None
    log.info("cores %s of %s kept for the coordinator (its agent offers the others)", ",".join(map(str, cores)), node)
    return tuple(owncores.agent_args(node, cores))


def addresses(bind: str, advertise: str, local: bool) -> tuple[str, str]:
    """Where the coordinator listens and what it advertises (fleet.json, the agents'
    --connect): `advertise` as given (an address or a host name), a network interface
    of this host (ib0, hsn0) as its IPv4 address; "" for the bound address, else this
    host's (fleet.control.transport). A local fleet listens on 127.0.0.1, or only on
    the address advertised; one in a job on every interface. ValueError for an
    interface without an IPv4 address."""
    if advertise:
        addrs = psutil.net_if_addrs()
        if advertise in addrs:
            ipv4 = [a.address for a in addrs[advertise] if a.family == socket.AF_INET]
            if not ipv4:
                raise ValueError(f"network interface {advertise} has no IPv4 address to advertise")
            advertise = ipv4[0]
    if not bind:
        bind = ("127.0.0.1" if not advertise else _ipv4(advertise)) if local else "0.0.0.0"
    return bind, advertise


def _ipv4(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError as e:
        raise ValueError(f"cannot resolve {host!r} (--advertise, FLEET_ADVERTISE or the profile's advertise): "
                         f"{e.strerror or e}") from None


def _planned(args) -> tuple[float | None, float, str, bool]:
    """_end's end, margin and source, and whether the margin was cut (margin_cut)."""
    end, before, source = _end(args)
    return end, before, source, margin_cut(args, end, before)


def _asked() -> tuple[float | None, str]:
    """The batch job's end and where it came from, asked once here (a coordinator not
    started by fleet up, which asks it: --end-from); AllocationError if it must not start."""
    try:
        alloc = from_environment()
    except AllocationError as e:
        return None, str(e)
    at = at_start(alloc)
    if why := refusal(alloc, at):
        raise AllocationError(why)
    return at.end, at.source


def margin_cut(args, end: float | None, before: float) -> bool:
    """Whether _end cut the drain margin (`before`) short of what was asked for (or the
    default): the job is shorter than it (fleet.control.drain.early_warning)."""
    asked = DRAIN_BEFORE_S if args.drain_before is None else args.drain_before
    return end is not None and before < asked


def _end(args) -> tuple[float | None, float, str]:
    """When the allocation ends (given, else read once from the batch system), the
    drain margin, and where the end came from. The default margin is at most half the
    time left, so that a job shorter than it still runs something. AllocationError (why)
    when the batch job, asked here, has ended or its end is past (fleet.site.allocation.refusal)."""
    if args.end_from:
        end, source = args.end, args.end_from
    elif args.end is not None:
        end, source = args.end, "given"
    else:
        end, source = _asked()
    before = args.drain_before
    left = max(0.0, end - time.time()) if end is not None else None
    # Half the time left, to a tenth of a second: every message that says the drain point
    # says it so (before 2026-12-06: "58.8786 s before the end").
    half = None if left is None else (round(left / 2, 1) or left / 2)
    if before is None:
        before = min(DRAIN_BEFORE_S, half) if half is not None else DRAIN_BEFORE_S
    elif half is not None and before >= left:
        # A drain point already past would start nothing and exit 3 at once: a job
        # that resubmits itself would then resubmit jobs that do nothing. Half the time
        # left, as the default takes, and say so.
        log.warning("--drain-before %g s is more than the %.1f s left before the allocation ends: "
                    "draining %g s before it instead (half the time left)", before, left, half)
        before = half
    return end, before, source
