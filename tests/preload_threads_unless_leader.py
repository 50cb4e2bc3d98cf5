"""A preload module that starts a thread only in a process that does not lead its
process group: in a fleet's zygote, not in the probe it forks (which leads one), so
the probe passes it and the zygote's own import leaves it with a thread."""

import os
import threading
import time

if os.getpgrp() != os.getpid():
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
