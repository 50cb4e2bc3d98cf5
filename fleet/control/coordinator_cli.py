"""The coordinator's command line: `python -m fleet.control.coordinator ARGS`, as
`fleet up` (fleet.control.client) starts it."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path

from fleet.site.allocation import from_environment
from fleet.site.launch import launcher_for
from fleet.site.profiles import ProfileError, detect, load as load_profile
from fleet.wire import connection

log = logging.getLogger("fleet.control.coordinator")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fleet-coordinator")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--nodes", type=int, default=1, help="pretend nodes of a local fleet")
    ap.add_argument("--machine", default="", help="machine profile (default: detected)")
    ap.add_argument("--bind", default="", help="address to listen on (default: 127.0.0.1 locally, all interfaces in a job)")
    ap.add_argument("--advertise", default="", help="address agents and clients use to reach us")
    ap.add_argument("--preload", default="")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--join-timeout", type=float, default=120.0)
    ap.add_argument("--stale-after", type=float, default=600.0,
                    help="seconds after which another fleet's unrefreshed claim may be adopted")
    ap.add_argument("--max-attempts", type=int, default=5,
                    help="attempts of a step across every fleet before it is stopped (0: no limit)")
    ap.add_argument("--connection-name", default=connection.NAME)
    ap.add_argument("--window", type=int, default=None,
                    help="steps each node may be handed ahead of time (default: its cores; 0: none)")
    ap.add_argument("--parent-pid", type=int, default=0,
                    help="stop (SIGTERM: a clean teardown) when this process, our parent, dies")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run a coordinator until it is stopped; its exit status (2: cannot start here)."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.parent_pid:
        from fleet.node.child import set_pdeathsig
        set_pdeathsig(signal.SIGTERM)
        if os.getppid() != args.parent_pid:  # it died before the death signal was armed
            log.error("the process that started this fleet (pid %d) is gone", args.parent_pid)
            return 1
    preload = tuple(m for m in args.preload.split(",") if m)
    run_dir = Path(args.run_dir)
    try:
        profile = load_profile(args.machine or detect())
    except ProfileError as e:
        log.error("%s", e)
        return 2
    nodes = args.nodes
    alloc_nodes: tuple[str, ...] = ()
    if profile.launcher != "local":
        alloc_nodes = from_environment().nodes
        if not alloc_nodes:
            log.error("machine %s starts agents with %s, but this is not inside a batch job", profile.name, profile.launcher)
            return 2
        nodes = len(alloc_nodes)
    # What governs this fleet's patience, for whoever reads coordinator.log after.
    log.info("settings: heartbeat %g s, agent lost after %g s, stale claims adopted after %g s, "
             "max attempts %s", args.heartbeat, args.timeout, args.stale_after, args.max_attempts or "unlimited")
    bind = args.bind or ("127.0.0.1" if profile.launcher == "local" else "0.0.0.0")
    # Looked up at call time, through the module: what the coordinator module holds is what runs.
    from fleet.control import coordinator
    coord = coordinator.Coordinator(run_dir, nodes, launcher_for(profile, run_dir, alloc_nodes),
                                    bind_host=bind, heartbeat_s=args.heartbeat, timeout_s=args.timeout,
                                    join_timeout_s=args.join_timeout, preload=preload, profile=profile,
                                    advertise=args.advertise, stale_after=args.stale_after,
                                    max_attempts=args.max_attempts, connection_name=args.connection_name,
                                    window=args.window)
    return coord.serve()
