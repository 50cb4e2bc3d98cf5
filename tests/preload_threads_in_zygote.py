"""A preload module that starts a thread only in a process whose parent has the pid in
FLEET_TEST_THREAD_IF_PARENT: given the test's own pid, only in the zygote it started,
not in the probe the zygote forks (whose parent is the zygote)."""

import os
import threading
import time

if os.getppid() == int(os.environ.get("FLEET_TEST_THREAD_IF_PARENT", "0")):
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
