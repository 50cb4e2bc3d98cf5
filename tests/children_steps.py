"""Step functions for the tests of steps that submit steps and go on in stages
(tests/control/test_children.py). Each appends what it saw to a file in the run
directory, so a test reads back who ran, in which phase and stage."""

from __future__ import annotations

import json
import os
import time

import fleet


def _note(ctx, what: str, **more) -> None:
    with open(os.path.join(ctx.run_dir, "ran.jsonl"), "a") as f:
        f.write(json.dumps({"step": ctx.id, "what": what, "phase": ctx.phase, "stage": ctx.stage,
                            "attempt": ctx.attempt, "t": time.time(), **more}) + "\n")


def child(ctx, pause: float = 0.0) -> None:
    _note(ctx, "child")
    if pause:
        time.sleep(pause)


def parent(ctx, n: int = 4, pause: float = 0.0, depth: int = 0, fail_once: bool = False) -> None:
    """Submits n children (each a parent itself while depth > 0) and waits for them."""
    if ctx.phase == 0:
        kids = [{"id": f"c{i}", "call": "children_steps:parent" if depth else "children_steps:child",
                 "args": ({"n": n, "depth": depth - 1} if depth else {"pause": pause})} for i in range(n)]
        ids = ctx.submit(kids)
        _note(ctx, "submitted", ids=ids)
        if fail_once and ctx.attempt == 1:
            raise RuntimeError("fails after submitting, once")
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def chain(ctx) -> None:
    """Children with deps on each other and on a step of the suite."""
    if ctx.phase == 0:
        ctx.submit([{"id": "b", "call": "children_steps:child", "deps": ["a", "first"]},
                    {"id": "a", "call": "children_steps:child"}])
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def bad_submit(ctx) -> None:
    try:
        ctx.submit([{"id": "x", "call": "children_steps:child", "cores": 0}])
    except fleet.SuiteError as e:
        _note(ctx, "refused", problems=[str(p) for p in e.problems])
        return
    raise AssertionError("ctx.submit took a step of 0 cores")


def not_utf8_submit(ctx) -> None:
    """Submits, one field at a time, children whose text holds a file name that is not
    UTF-8 as os.listdir gives it (a lone surrogate); notes each refusal's problems."""
    name = os.fsdecode(b"f\xff")
    for field, table in (("command", {"command": ["echo", name]}), ("env", {"command": "true", "env": {"A": name}}),
                         ("args", {"call": "children_steps:child", "args": {"pause": name}}),
                         ("workdir", {"command": "true", "workdir": f"w/{name}"}),
                         ("outputs", {"command": "true", "outputs": [name]})):
        try:
            ids = ctx.submit([{"id": f"x_{field}", **table}])
        except fleet.SuiteError as e:
            _note(ctx, "refused", field=field, problems=[str(p) for p in e.problems])
        else:
            _note(ctx, "taken", field=field, ids=ids)


def stages(ctx) -> None:
    """Runs stage "" -> "relax" -> "final", restarts once on the way, then ends."""
    _note(ctx, "stage", restarts=ctx.restarts, files=sorted(os.listdir(".")))
    with open(f"{ctx.stage or 'start'}.out", "w") as f:
        f.write(ctx.stage)
    if ctx.stage == "":
        raise fleet.Next("relax")
    if ctx.stage == "relax" and ctx.restarts == 0:
        raise fleet.Restart()
    if ctx.stage == "relax":
        raise fleet.Next("final")


def broken(ctx) -> None:
    _note(ctx, "broken")
    raise fleet.Broken("the structure does not converge")


def slow_parent(ctx, n: int = 3, step_s: float = 2.0) -> None:
    """Submits slow children and waits (for the tests that look while it waits)."""
    if ctx.phase == 0:
        ctx.submit([{"id": f"c{i}", "call": "children_steps:child", "args": {"pause": 0.5 + step_s * i}}
                    for i in range(n)])
        _note(ctx, "submitted")
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def submits_and_runs_on(ctx, n: int = 2, run_s: float = 60.0) -> None:
    """Submits children, then keeps running (they would start when it ends)."""
    ctx.submit([{"id": f"k{i}", "call": "children_steps:child"} for i in range(n)])
    _note(ctx, "submitted")
    time.sleep(run_s)


def many(ctx, n: int = 200) -> None:
    if ctx.phase == 0:
        ctx.submit([{"id": f"k{i}", "call": "children_steps:child"} for i in range(n)])
        raise fleet.WaitForChildren()
    bad = {k: v for k, v in ctx.children.items() if v != "succeeded"}
    _note(ctx, "resumed", count=len(ctx.children), bad=bad)


def flaky(ctx, i: int, flag: str = "") -> None:
    """Fails while the file `flag` exists and this is case 1 (a cause a user fixes)."""
    _note(ctx, "child")
    if i == 1 and flag and os.path.exists(flag):
        raise RuntimeError(f"case 1 fails while {flag} exists")


def sweep(ctx, n: int = 3, flag: str = "") -> None:
    """The user guide's sweep: children, then fail if any did not succeed."""
    if ctx.phase == 0:
        ctx.submit([{"id": f"case{i}", "call": "children_steps:flaky", "args": {"i": i, "flag": flag}}
                    for i in range(n)])
        _note(ctx, "submitted")
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)
    failed = [k for k, v in ctx.children.items() if v != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} cases failed: {failed[:5]}")


def bad_dep(ctx) -> None:
    """A child whose dep names no step: only the coordinator can tell (ctx.submit takes it)."""
    ctx.submit([{"id": "x", "call": "children_steps:child", "deps": ["nosuch"]}])
    raise fleet.WaitForChildren()


def waits_always(ctx, kids: int = 1) -> None:
    """Submits `kids` children in phase 0, then waits in every phase (a loop: it never
    looks at ctx.phase)."""
    _note(ctx, "waits")
    if ctx.phase == 0 and kids:
        ctx.submit([{"id": f"k{i}", "call": "children_steps:child"} for i in range(kids)])
    raise fleet.WaitForChildren()


def reads_a_suite_step(ctx) -> None:
    """A child that reads what the suite's step X wrote (a dep outside its family), and
    waits for it."""
    if ctx.phase == 0:
        ctx.submit([{"id": "c", "command": "cat ../../X/value.txt > seen.txt", "deps": ["X"]}])
        raise fleet.WaitForChildren()


def resubmits_failed(ctx, flag: str) -> None:
    """Cases 0 and 1 (1 fails while `flag` exists); in phase 1 it removes the flag and
    submits a failed case again, once; then it ends."""
    cases = [{"id": f"case{i}", "call": "children_steps:flaky", "args": {"i": i, "flag": flag}} for i in range(2)]
    if ctx.phase == 0:
        ctx.submit(cases)
        raise fleet.WaitForChildren()
    failed = [k for k, v in ctx.children.items() if v != "succeeded"]
    if failed and ctx.phase == 1:
        os.unlink(flag)
        ctx.submit([c for c in cases if f"{ctx.id}/{c['id']}" in failed])
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def restarts_after_children(ctx) -> None:
    """Submits a child and waits for it, then restarts, then ends: notes what each run saw."""
    _note(ctx, "saw", restarts=ctx.restarts, children=ctx.children)
    if ctx.restarts == 0 and ctx.phase == 0:
        ctx.submit([{"id": "k", "call": "children_steps:child"}])
        raise fleet.WaitForChildren()
    if ctx.restarts == 0:
        raise fleet.Restart()


def leaves_children(ctx, n: int = 2, pause: float = 1.0) -> None:
    """Submits children that each write out.txt after `pause` s, and ends without waiting."""
    ctx.submit([{"id": f"k{i}", "command": f"sleep {pause}; echo {i} > out.txt"} for i in range(n)])
    _note(ctx, "left")


def leaves_slow_children(ctx, n: int = 3, step_s: float = 2.0) -> None:
    """Submits children of growing length (noted as they run) and ends without waiting."""
    ctx.submit([{"id": f"c{i}", "call": "children_steps:child", "args": {"pause": 0.5 + step_s * i}}
                for i in range(n)])
    _note(ctx, "left")


def waits_on(ctx, dep: str = "") -> None:
    """Submits a child that depends on `dep` (this very step if none) and waits for it."""
    if ctx.phase == 0:
        ctx.submit([{"id": "post", "call": "children_steps:child", "deps": [dep or ctx.id]}])
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def nests(ctx, call: str, args: dict) -> None:
    """Submits one child `mid` that runs `call` with `args`, and waits for it."""
    if ctx.phase == 0:
        ctx.submit([{"id": "mid", "call": call, "args": args}])
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def submits_then(ctx, end: str) -> None:
    """Submits a child, then ends without an end record (os._exit), fails, or hangs
    (for its timeout)."""
    ctx.submit([{"id": "k", "call": "children_steps:child"}])
    _note(ctx, "submitted", end=end)
    if end == "exit":
        os._exit(0)
    if end == "fail":
        raise RuntimeError("fails after submitting")
    time.sleep(120)


def timed(ctx, pause: float = 1.0) -> None:
    _note(ctx, "start")
    time.sleep(pause)
    _note(ctx, "end")


def timed_children(ctx, n: int = 2) -> None:
    if ctx.phase == 0:
        ctx.submit([{"id": f"t{i}", "call": "children_steps:timed"} for i in range(n)])
        raise fleet.WaitForChildren()


def array_and_sum(ctx) -> None:
    """An array of children and a sibling that depends on each of them by its id."""
    if ctx.phase == 0:
        ctx.submit([{"id": "c/{i}", "array": "1-3", "call": "children_steps:child"},
                    {"id": "sum", "call": "children_steps:child", "deps": ["c/1", "c/2", "c/3"]}])
        ctx.submit([{"id": "all", "call": "children_steps:child", "deps": ["c/3", "sum"]}])  # (a later call)
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def ran(run_dir) -> list[dict]:
    path = os.path.join(run_dir, "ran.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def submits_log(ctx) -> None:
    """Submits children "lin" and "log" (its own log file's name) and waits for them."""
    if ctx.phase == 0:
        ctx.submit([{"id": "lin", "command": "echo lin"}, {"id": "log", "command": "echo log-scale"}])
        raise fleet.WaitForChildren()


def restarts_once(ctx, name: str) -> None:
    """Writes `name` in its work directory, restarts once, then notes what the work directory held."""
    if ctx.restarts == 0:
        with open(name, "w") as f:
            f.write(ctx.id)
        raise fleet.Restart()
    _note(ctx, "restarted", cwd=os.getcwd(), files=sorted(os.listdir(".")))


def fails(ctx) -> None:
    _note(ctx, "child")
    raise RuntimeError("this child always fails")


def fails_after_submitting(ctx, wait_s: float = 60.0) -> None:
    """Submits ok, bad (which fails) and sum (after both), then fails. Its later attempts
    submit them again, and fail only once the fleet has blocked sum (its children of
    attempt 1 all ended): their second end is then in the same run (bounded wait)."""
    ctx.submit([{"id": "ok", "call": "children_steps:child"}, {"id": "bad", "call": "children_steps:fails"},
                {"id": "sum", "call": "children_steps:child", "deps": ["ok", "bad"]}])
    deadline = time.monotonic() + wait_s
    events = os.path.join(ctx.run_dir, "events.jsonl")
    while ctx.attempt > 1 and time.monotonic() < deadline:
        with open(events) as f:
            if any('"kind":"blocked"' in line and f'"step":"{ctx.id}/sum"' in line for line in f):
                break
        time.sleep(0.1)
    raise RuntimeError("fails after submitting")


def resubmits_failing(ctx) -> None:
    """Submits child c, which always fails, and waits for it, in every phase: a loop."""
    _note(ctx, "submitted")
    ctx.submit([{"id": "c", "call": "children_steps:fails"}])
    raise fleet.WaitForChildren()


def nap(ctx, s: float = 1.0) -> None:
    time.sleep(s)


def waves(ctx, durs=(0.5, 1.0), waves: int = 1, nested: bool = False, s: float = 0.0) -> None:
    """Submits a child per duration in `durs` (each naps so long; with `nested`, the first
    of the first wave is itself a `waves` of two short ones) and waits, `waves` times
    (naps `s` first in phase 0)."""
    if ctx.phase == 0:
        time.sleep(s)
    if ctx.phase < waves:
        kids = [{"id": f"w{ctx.phase}c{i}", "call": "children_steps:nap", "args": {"s": d}} for i, d in enumerate(durs)]
        if nested and ctx.phase == 0:
            kids[0] = {"id": "w0c0", "call": "children_steps:waves", "args": {"durs": [0.3, 0.3]}}
        ctx.submit(kids)
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def shows_args(ctx, **args) -> None:
    _note(ctx, "args", args={k: repr(v) for k, v in args.items()})


def submits_odd_floats(ctx) -> None:
    """Submits a child whose args are NaN and infinities (as a suite's `nan`, `inf`), and
    one whose arg JSON cannot write (a tuple as a key); notes what ctx.submit said."""
    if ctx.phase == 0:
        try:
            ctx.submit([{"id": "ok", "call": "children_steps:child"},
                        {"id": "tuplekey", "call": "children_steps:shows_args", "args": {"x": {("a",): 1}}}])
        except fleet.SuiteError as e:
            _note(ctx, "refused", problems=[str(p) for p in e.problems])
        ids = ctx.submit([{"id": "odd", "call": "children_steps:shows_args",
                           "args": {"x": float("nan"), "y": float("inf"), "z": [-float("inf"), 1.5]}}])
        _note(ctx, "submitted", ids=ids)
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def _declared(ctx, step: str) -> int:
    """How many times the fleet's events say `step` was entered in a submission."""
    with open(os.path.join(ctx.run_dir, "events.jsonl")) as f:
        return sum('"kind":"step"' in line and f'"step":"{step}"' in line for line in f)


def _until(ok, wait_s: float = 60.0) -> None:
    """Poll `ok` until it holds or wait_s passed (the test then fails on what it sees)."""
    deadline = time.monotonic() + wait_s
    while not ok() and time.monotonic() < deadline:
        time.sleep(0.05)


def versioned(ctx, v: int, made: str = "", held: str = "") -> None:
    """Notes version `v` and what the file `made` (in the run directory: a dep's) holds,
    writes `v` to its own file, and ends only once step `held` was entered twice (its
    parent's retry submitted it again), so that it still runs then."""
    saw = None
    if made:
        with open(os.path.join(ctx.run_dir, made)) as f:
            saw = f.read()
    _note(ctx, "child", v=v, saw=saw)
    if held:
        _until(lambda: _declared(ctx, held) >= 2)
    with open(os.path.join(ctx.run_dir, ctx.id.replace("/", "-") + ".out"), "w") as f:
        f.write(str(v))
    _note(ctx, "ended", v=v)


def resubmits_changed(ctx) -> None:
    """Submits c0, then c1 after it, both with args that name the attempt, and fails once:
    its retry submits them again, changed, while c0 of attempt 1 still runs (it holds
    until then) and c1 waits for it."""
    if ctx.phase == 0:
        me, v = ctx.id, ctx.attempt
        ctx.submit([{"id": "c0", "call": "children_steps:versioned", "args": {"v": v, "held": f"{me}/c0"}},
                    {"id": "c1", "call": "children_steps:versioned", "args": {"v": v}, "deps": ["c0"]}])
        if ctx.attempt == 1:
            raise RuntimeError("fails after submitting, once")
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def resubmits_dep_of_running(ctx) -> None:
    """Submits a (its args name the attempt) and b after it (the same each time), and
    fails once; its retry submits both again once b runs on what a made first (b holds
    until a is submitted again)."""
    if ctx.phase == 0:
        me = ctx.id
        if ctx.attempt > 1:
            _until(lambda: any(x["step"] == f"{me}/b" for x in ran(ctx.run_dir) if x["what"] == "child"))
        ctx.submit([{"id": "a", "call": "children_steps:versioned", "args": {"v": ctx.attempt}},
                    {"id": "b", "call": "children_steps:versioned", "deps": ["a"],
                     "args": {"v": 0, "made": f"{me}-a.out", "held": f"{me}/a"}}])
        if ctx.attempt == 1:
            raise RuntimeError("fails after submitting, once")
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)


def uncles(ctx, later: bool = False, flag: str = "") -> None:
    """Submits a (its child x depends on a's uncle b, and runs on b's output) and b, in
    one submission, or b only in its next phase (`later`); fails if a child did not
    succeed."""
    me = ctx.id
    uncle = {"id": "b", "call": "children_steps:makes", "args": {"pause": 1.0}}
    if ctx.phase == 0:
        ctx.submit([{"id": "a", "call": "children_steps:nephew", "args": {"uncle": f"{me}/b", "flag": flag},
                     "retries": 0}] + ([] if later else [uncle]))
        raise fleet.WaitForChildren()
    if later and ctx.phase == 1:
        ctx.submit([uncle])
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)
    if any(v not in ("succeeded", "skipped") for v in ctx.children.values()):
        raise RuntimeError("a child did not succeed")


def nephew(ctx, uncle: str, flag: str = "") -> None:
    """Submits x, which depends on `uncle` (its uncle) and reads what it made, and waits
    for it; then fails once if `flag` (a file in the run directory) is not there yet."""
    if ctx.phase == 0:
        ctx.submit([{"id": "x", "call": "children_steps:versioned", "deps": [uncle],
                     "args": {"v": 0, "made": uncle.replace("/", "-") + ".out"}}])
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children)
    path = os.path.join(ctx.run_dir, flag) if flag else ""
    if path and not os.path.exists(path):
        open(path, "w").close()
        raise RuntimeError("fails once, after its children")


def makes(ctx, pause: float = 0.0) -> None:
    """Takes `pause` seconds, then writes "made" to its own file (as versioned names it)."""
    time.sleep(pause)
    with open(os.path.join(ctx.run_dir, ctx.id.replace("/", "-") + ".out"), "w") as f:
        f.write("made")
    _note(ctx, "ended")


def submits_these(ctx, kids: list) -> None:
    """Submits these step tables in phase 0 and waits for them (tests/control/test_children_files.py)."""
    if ctx.phase == 0:
        ctx.submit(kids)
        raise fleet.WaitForChildren()


def gated(ctx, gate: str) -> None:
    """Notes that it started, then waits for the file `gate` (at most 60 s); a SIGTERM
    ends it at once (a call step's child has the default handler)."""
    _note(ctx, "started")
    _until(lambda: os.path.exists(gate))


def cancel_family(ctx, gate: str, running: int, waiting: int) -> None:
    """Submits `running` gated children, `waiting` children after all of them, then
    `running` more gated ones (queued on the nodes behind the first), and waits."""
    if ctx.phase == 0:
        ctx.submit(cancel_steps("", gate, running, waiting))
        raise fleet.WaitForChildren()


def cancel_steps(prefix: str, gate: str, running: int, waiting: int) -> list[dict]:
    """r0.. (gated, first in priority: they run), w0.. (after every r: they wait), q0..
    (gated: queued on the nodes behind the r's), in this order: a `fleet cancel` lists them
    so, the w's between (tests/control/test_cancel_queued.py)."""
    gated_step = {"call": "children_steps:gated", "args": {"gate": gate}}
    rs = [dict(gated_step, id=f"{prefix}r{i}", priority=1) for i in range(running)]
    ws = [{"id": f"{prefix}w{i}", "command": "true", "deps": [r["id"] for r in rs]} for i in range(waiting)]
    return rs + ws + [dict(gated_step, id=f"{prefix}q{i}") for i in range(running)]


def sweeps_as(ctx, tag: str = "", fail: str = "", retried: bool = False, restarted: bool = False) -> None:
    """The user guide's sweep with children named for this run: `<name>-c0..2`, the name
    `tag`, else this attempt's (`a1`, `retried`: the first fails after submitting) or this
    restart's (`r0`, `restarted`: the first restarts after its children). Child 0 of the
    name `fail` fails. Notes what it saw; fails if a child in ctx.children did not succeed."""
    name = tag or (f"a{ctx.attempt}" if retried else f"r{ctx.restarts}")
    if ctx.phase == 0:
        ctx.submit([{"id": f"{name}-c{i}", "command": "false" if (name, i) == (fail, 0) else "true"}
                    for i in range(3)])
        if retried and ctx.attempt == 1:
            raise RuntimeError("fails after submitting, once")
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children, restarts=ctx.restarts)
    if restarted and ctx.restarts == 0:
        raise fleet.Restart()
    bad = [k for k, v in ctx.children.items() if v != "succeeded"]
    if bad:
        raise RuntimeError(f"bad children: {bad}")


def long_id(i: int, length: int) -> str:
    """A child's given id of `length` characters, unique by `i`, in parts of 200 between '/'
    (a directory's name ends at 255)."""
    text = f"k{i:05d}".ljust(length, "x")
    return "/".join(text[j:j + 200] for j in range(0, length, 200))


def long_named(ctx, n: int, length: int, every: int = 0) -> None:
    """Submits n children with ids of `length` characters (every `every`-th fails), waits,
    then notes what ctx.children held and fails if one in it did not succeed."""
    if ctx.phase == 0:
        given = length - len(ctx.id) - 1
        ctx.submit([{"id": long_id(i, given), "call": "children_steps:fails" if every and i % every == 0
                     else "children_steps:nap", "args": {} if every and i % every == 0 else {"s": 0.0}}
                    for i in range(n)])
        raise fleet.WaitForChildren()
    _note(ctx, "resumed", children=ctx.children, omitted=ctx.children_omitted)
    bad = [k for k, v in ctx.children.items() if v != "succeeded"]
    if bad:
        raise RuntimeError(f"{len(bad)} children did not succeed")
