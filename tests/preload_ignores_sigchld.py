"""A preload module that sets SIGCHLD to SIG_IGN at import (as some libraries and
scripts do to avoid zombies): in a zygote's loop the kernel would then reap every step
itself, unreported (fleet.node.ownsignals)."""

import signal

signal.signal(signal.SIGCHLD, signal.SIG_IGN)
