"""A preload module whose import leaves a daemon in a session of its own (fork, setsid,
fork), holding every descriptor its importer had. The daemon writes its pid and its
importer's pid to a file in FLEET_TEST_DAEMON_DIR, then sleeps at most 120 s; tests
check that fleet ends it. Without that variable it starts nothing."""

import os
import time

_dir = os.environ.get("FLEET_TEST_DAEMON_DIR")
if _dir:
    importer = os.getpid()
    first = os.fork()
    if first == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                path = os.path.join(_dir, f"{os.getpid()}.pid")
                with open(path + ".tmp", "w") as f:
                    f.write(f"{os.getpid()} {importer}\n")
                os.rename(path + ".tmp", path)
                time.sleep(120)
        finally:
            os._exit(0)
    try:
        os.waitpid(first, 0)  # it exits at once (only it: a zygote's steps are the zygote's to reap)
    except ChildProcessError:
        pass
    # The import ends once the daemon is up and has said so: a test that then finds it gone
    # knows it was ended, not that it never started.
    _deadline = time.monotonic() + 30
    while not any(n.endswith(".pid") for n in os.listdir(_dir)) and time.monotonic() < _deadline:
        time.sleep(0.01)
