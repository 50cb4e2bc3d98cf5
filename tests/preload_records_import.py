"""A preload module that records who imported it, so a test can tell where the import
happened: the zygote (a step's parent, before the step was forked) or the step.

At import it appends {"pid", "ppid"} as one line to the file named by
FLEET_TEST_IMPORT_LOG (if set); the call target `where` writes what its step saw.
"""

import json
import os

IMPORTED_BY = os.getpid()

_log = os.environ.get("FLEET_TEST_IMPORT_LOG")
if _log:
    with open(_log, "a") as f:  # one short line in O_APPEND: whole lines, whoever writes
        f.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid()}) + "\n")


def where(ctx):
    """Write this step's pid and parent, and which process imported this module."""
    with open(os.path.join(ctx.workdir, "where.json"), "w") as f:
        json.dump({"pid": os.getpid(), "ppid": os.getppid(), "imported_by": IMPORTED_BY}, f)
