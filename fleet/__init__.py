"""fleet: run a suite of steps inside one batch allocation, forked from resident,
pre-imported fork servers on every node."""

__version__ = "0.1.0"
