"""Call steps that draw from numpy's global random generator (preloaded or not) and
write what they drew, so a test can tell whether forked steps share the zygote's state."""

import json
import os


def draw(ctx):
    """Write three draws of numpy.random (the global RandomState) to draws.json."""
    import numpy

    with open(os.path.join(ctx.workdir, "draws.json"), "w") as f:
        json.dump([float(x) for x in numpy.random.random(3)], f)
