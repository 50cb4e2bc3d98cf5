"""A preload module whose import kills the interpreter, as a crash in a C extension would
(SIGSEGV; no core file: the test is about the message, not the dump)."""

import os
import resource
import signal

resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.kill(os.getpid(), signal.SIGSEGV)
