"""The pure scheduler core with the pool full against the pool never full (issue 12).

    python benchmarks/core_fullpool.py full|zero [STEPS] [profile]

A real Scheduler (window=0, as benchmarks/control_scale.py's coordinator), 1,000 nodes of
64 cores, STEPS (default 200,000) one-core steps entered as the coordinator enters them.
"zero": each turn the steps the last turn started all end (zero-length steps); "full": each
turn the 200 oldest running steps end, in start order, so the pool stays full and steps
queue (1-s steps with the coordinator the bottleneck). Prints the CPU of the handle()
calls per step and the decisions by kind; with a third argument, a cProfile of them.
Used in benchmarks/README.md, "A full pool's extra coordinator CPU per step".
"""
import gc, sys, time, random, cProfile, pstats, collections
from pathlib import Path
from fleet.core.decisions import EnterMore, Entering, Exits, NodeJoined, StepExited, Submitted, GoOn
from fleet.core.resources import NodeSpec
from fleet.core.scheduler import Scheduler
from fleet.core.suite import parse_suite

NODES, STEPS, K = 1000, int(sys.argv[2]) if len(sys.argv) > 2 else 200_000, 200
mode = sys.argv[1]
specs = tuple(parse_suite({"steps": [{"id": "s/{i}", "array": f"1-{STEPS}", "command": "true"}]}, Path("/run/s.toml")).steps)
sched = Scheduler(window=0)
for i in range(NODES):
    sched.handle(NodeJoined(NodeSpec(f"n{i:05d}", tuple(range(64)), (), 256 << 30)), 0.0)
now = 1.0
out = sched.handle(Submitted(specs, {s.id: s.deps for s in specs}, frozenset(), chunk=2000, order=tuple(s.id for s in specs)), now)
while any(isinstance(d, Entering) and d.entered < d.total for d in out):
    out = sched.handle(EnterMore(), now)
gc.collect(); gc.freeze()
prof = cProfile.Profile() if len(sys.argv) > 3 else None
running = collections.deque()
kinds = collections.Counter()
cpu = time.process_time
t0 = cpu()
if prof: prof.enable()
while not sched.finished():
    for d in out:
        kinds[type(d).__name__] += 1
    started = [d for d in out if type(d).__name__ in ("Start", "Begin")]
    running.extend((now, d) for d in started)
    goon = any(isinstance(d, GoOn) for d in out)
    now += 0.03
    if goon:
        ev = Exits(())
    elif mode == "zero":
        ex = [running.popleft()[1] for _ in range(len(running))]
        ev = Exits(tuple(StepExited(d.step, d.attempt, "succeeded") for d in ex))
    else:
        ex = [running.popleft()[1] for _ in range(min(K, len(running)))]
        ev = Exits(tuple(StepExited(d.step, d.attempt, "succeeded") for d in ex))
    out = sched.handle(ev, now)
if prof: prof.disable()
t = cpu() - t0
print(mode, f"{t / STEPS * 1e6:.2f} us/step", dict(kinds))
if prof:
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)
