"""`fleet run`: submit a suite to a fleet, follow it, and say how it ended."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from fleet.wire import messages as P
from fleet.core import states as S
from fleet.control.client import Client, FleetError, RunDirError, down, embedded_name, find, up, usable_run_dir
from fleet.core.suite import Suite
from fleet.core.units import counted

POLL_S = 0.2
# How long `fleet run` waits for its Submit to be answered, and then again and again
# as long as the fleet's status says a submission is still on its way in (a big suite
# is read, checked and entered a part at a time, while the fleet answers other clients).
SUBMIT_WAIT_S = 60.0
SUBMIT_AGAIN_S = 30.0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run_suite(path: Path, suite: Suite, run_dir: Path, *, force: bool = False, serial: bool = False,
              nodes: int = 1, out=None, shard: str = "", new_generation: bool = False,
              wait_foreign: bool = True, fleet_options: list[str] | None = None) -> int:
    """Run one suite to the end; the exit status of `fleet run` (0, 1 or 2).

    Uses the fleet `fleet up` started in run_dir; without one, brings up an embedded
    local fleet (with `fleet_options` for its coordinator) for the duration of the run."""
    out = out or sys.stdout
    old = signal.signal(signal.SIGTERM, _interrupt)
    embedded = None
    client = None
    try:
        conn = find(run_dir)
        if conn is None:
            from fleet.site.profiles import detect
            usable_run_dir(run_dir)  # before a word about starting: nothing starts where nothing can be written
            machine = detect()  # inside a batch job: the whole allocation, not just this node
            where = counted(nodes, "pretend node") if machine == "local" else f"machine {machine}"
            print(f"fleet: no fleet is up in {run_dir}; starting an embedded fleet ({where})",
                  file=sys.stderr, flush=True)
            embedded = embedded_name()
            conn = up(run_dir, nodes=nodes, machine=machine, preload=suite.preload, extra=fleet_options,
                      name=embedded)
        client = Client(conn)
        reply = _submit(client, P.Submit(str(path), force, serial, shard, new_generation, wait_foreign))
        if not reply.ok:
            for p in reply.problems:
                print(f"error: {p}", file=sys.stderr)
            print(f"{counted(len(reply.problems), 'problem')} found; nothing was started", file=sys.stderr)
            return 2
        return _follow(client, reply, suite, run_dir, out)
    except RunDirError as e:
        print(f"fleet: {e}", file=sys.stderr)
        return 2
    except FleetError as e:
        print(f"fleet: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if embedded:
            print("\nfleet: interrupted; stopping the embedded fleet and its steps", file=sys.stderr)
        else:
            print(f"\nfleet: interrupted; the fleet in {run_dir} keeps running "
                  f"(fleet status / fleet down --run-dir {run_dir})", file=sys.stderr)
        return 130
    finally:
        if client is not None:
            client.close()
        if embedded:
            down(run_dir, name=embedded)
        signal.signal(signal.SIGTERM, old)


def _submit(client: Client, msg: P.Submit) -> P.SubmitReply:
    """The answer to msg: waited for SUBMIT_WAIT_S, then SUBMIT_AGAIN_S at a time while
    the fleet's status counts submissions not yet in (loop.submitting); FleetError when
    it does not answer or has none."""
    client.sock.send(P.encode(msg))
    wait = SUBMIT_WAIT_S
    while not client.sock.poll(int(wait * 1000)):
        asker = Client(client.conn)
        try:
            status = asker.ask(P.Status(), timeout=10).status
        finally:
            asker.close()
        if not status.get("loop", {}).get("submitting"):
            raise FleetError(f"the coordinator at {client.endpoint} did not answer the submission within "
                             f"{wait:.0f} s, and is taking none in")
        wait = SUBMIT_AGAIN_S
    reply = P.decode(client.sock.recv())
    if isinstance(reply, P.Error):
        raise FleetError(reply.reason)
    return reply


def _alive(conn) -> bool:
    """Whether the coordinator may still answer (only provable gone on its own host)."""
    import socket
    from fleet.control.client import _alive as pid_alive
    return conn.host != socket.gethostname() or pid_alive(conn.pid)


def _follow(client: Client, reply: P.SubmitReply, suite: Suite, run_dir: Path, out) -> int:
    tty = out.isatty()
    total = reply.steps
    since = 0
    outcomes: dict[str, str] = {}
    started = time.monotonic()
    print(f"suite '{suite.name}': {counted(total, 'step')}" + (f", {reply.skipped} already done" if reply.skipped else ""),
          file=out, flush=True)
    while True:
        try:
            pr = client.ask(P.Progress(reply.submission, since), timeout=3)
        except FleetError:
            if not _alive(client.conn):
                print(f"\nfleet: the fleet in {run_dir} went down before the suite finished", file=sys.stderr)
                return 1
            continue  # busy, not gone: ask again
        for step, outcome, attempt, reason, *more in pr.finished:
            if outcome == "retry":  # not final: counted when it is
                of = f" of {more[0]}" if more else ""
                line = f"  {'retry':<10} {step}: retry {attempt}{of}: {reason}"
            else:
                outcomes[step] = outcome
                line = f"  {outcome:<10} {step}" + (f": {reason}" if reason and outcome not in (S.SUCCEEDED, S.SKIPPED) else "")
            if tty:
                out.write("\r\033[K")
            if not tty or outcome not in (S.SUCCEEDED, S.SKIPPED):
                print(f"[{len(outcomes):>{len(str(total))}}/{total}]{line}", file=out)
        since = pr.next
        if tty:
            done = len(outcomes)
            width = 30
            fill = int(width * done / total) if total else width
            running = pr.counts.get(S.RUNNING, 0)
            out.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} done, {running} running, "
                      f"{time.monotonic() - started:.0f} s")
            out.flush()
        if pr.done and since >= pr.next and not pr.finished:
            break
        if not pr.finished:
            time.sleep(POLL_S)
    if tty:
        out.write("\n")
    bad = {s: o for s, o in outcomes.items() if o not in (S.SUCCEEDED, S.SKIPPED)}
    counts: dict[str, int] = {}
    for o in outcomes.values():
        counts[o] = counts.get(o, 0) + 1
    print(f"suite '{suite.name}': " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
          + f" in {time.monotonic() - started:.1f} s", file=out, flush=True)
    return 1 if bad else 0
