"""Times the coordinator's record paths in a run (benchmarks/README.md, "The records side
of a step, by shape"): on the PYTHONPATH ahead of the tree, with CPUREC_TIMING=<file>,
the coordinator process of benchmarks/_simagents.py wraps each record path in
time.thread_time_ns and writes {part: {ns, calls}} to <file> at exit ("_calibration":
a wrapped no-op, the wrapper's own cost per call). Nothing happens otherwise.

    CPUREC_TIMING=/tmp/t.json PYTHONPATH=benchmarks/recordtiming:$PWD \
        python benchmarks/control_scale.py --agents 1000 --steps 50000 --duration 0 \
        --agent-timeout 60 --idle 3 --work /tmp/<dir> --out /tmp/<file>
"""
import os, sys
if os.environ.get("CPUREC_TIMING") and "coordinator" in sys.argv[1:2]:
    import atexit, json, time
    from fleet.control import coordinator, launching, outcomes, recording
    from fleet.wire import events as E
    tt = time.thread_time_ns
    acc = {}
    def wrap(owner, name, label, pick=None):
        f = getattr(owner, name)
        def w(*a, **k):
            t0 = tt()
            try:
                return f(*a, **k)
            finally:
                lab = pick(a) if pick else label
                c = acc.setdefault(lab, [0, 0]); c[0] += tt() - t0; c[1] += 1
        setattr(owner, name, w)
    # calibration: a wrapped no-op
    class _C:
        @staticmethod
        def nop(): pass
    wrap(_C, "nop", "_calibration")
    for _ in range(20000): _C.nop()
    wrap(recording.Recorder, "claim", "claim at start")
    wrap(recording.Recorder, "exited", "attempt and done records")
    wrap(recording.Recorder, "turn", "journal write, fsync, markers")
    wrap(launching, "write_start", "start line")
    wrap(launching, "recorded", "start line (begin) / unqueued")
    wrap(coordinator.Coordinator, "_started", "started (check and line)")
    if hasattr(outcomes, "written"):
        wrap(outcomes, "written", "exit record")
    else:
        wrap(outcomes, "reported_exit", "exit record")
        wrap(E.EventLog, "write", None, lambda a: "exit record" if type(a[1]) is E.Exit else "other event records")
    def dump():
        out = os.environ["CPUREC_TIMING"]
        json.dump({k: {"ns": v[0], "calls": v[1]} for k, v in acc.items()}, open(out, "w"), indent=1)
    atexit.register(dump)
