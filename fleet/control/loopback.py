"""A batch job's coordinator that would tell the agents on other nodes a loopback address.

In a batch job the coordinator advertises its host name's address (fleet.control.transport,
gethostbyname(hostname)). Where that name resolves to a loopback address (127.0.1.1, as
Debian-like systems set it in /etc/hosts, or 127.0.0.1), the agent on every other node
is told to reach the coordinator at its own node, and never joins. Before 2026-12-07
`fleet up` then waited out its --timeout and said only which nodes had not joined: the
hint to choose another address was left out for a loopback one, taken for a fleet on
one host. Now `fleet up` (and `fleet run` for the fleet it starts) says so at once,
before anything starts, the coordinator's log too, and the line that says the agents
did not join gives the hint (fleet.control.comingup).

A warning, not a refusal: the nodes of a test cluster may all be this host (Slurm nodes
with NodeAddr=127.0.0.1, tests/cluster/slurm-up.sh), whose agents do join there. A host
name given to advertise is left alone even if it resolves to loopback here: the agents
resolve it on their own nodes (only `localhost` is the node itself everywhere).
"""

from __future__ import annotations

import ipaddress
import socket

HOW = ('give fleet up --advertise ADDR (fleet run --advertise for the fleet it starts), FLEET_ADVERTISE=ADDR, '
       'or advertise = "ADDR" in the machine profile: an address, host name or network interface (e.g. ib0, '
       'hsn0) of this host that the other nodes can reach')


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a host name, as advertised) is every node's own:
    127.0.0.0/8, ::1, or the name localhost."""
    if host.lower().rstrip(".") in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def said(named: str) -> str:
    """What a loopback address is, said with where it came from: this host's name
    `named` ("": it was given)."""
    return f"the loopback address this host's name {named} resolves to" if named else "a loopback address"


def warning(address: str, named: str, nodes: int, local: bool) -> str | None:
    """What to say of a fleet of `nodes` nodes (started by a batch launcher unless
    `local`) whose agents are told `address` (resolved from this host's name `named`,
    "" if it was given), or None: nothing for a local fleet or a one-node job, whose
    agents run on this host, nor for an address other nodes may reach."""
    if local or nodes <= 1 or not is_loopback(address):
        return None
    who = "the agent on the other node" if nodes == 2 else f"the agents on the other {nodes - 1} nodes"
    return (f"{who} of this {nodes}-node job will be told to reach the coordinator at {address}, {said(named)}: "
            f"that address is each node's own, and an agent on another host will not join; {HOW}")


def advertised(given: str) -> tuple[str, str]:
    """What a batch job's agents are told (fleet.control.transport): `given` as it is
    (an address, or a host name that they resolve), else this host's name resolved;
    and that name ("" when given, or "" for the address if it does not resolve)."""
    if given:
        return given, ""
    name = socket.gethostname()
    try:
        return socket.gethostbyname(name), name
    except OSError:  # (the coordinator fails on it, saying so)
        return "", name


def here(profile, advertise: str | None) -> str | None:
    """The warning for a fleet of `profile` (fleet.site.profiles.Profile) about to start
    in this batch job, advertising `advertise` (--advertise or $FLEET_ADVERTISE as
    given, else the profile's), or None."""
    from fleet.control.coordinator_cli import addresses
    from fleet.site.allocation import AllocationError, from_environment
    if profile.launcher == "local":
        return None
    try:
        nodes = len(from_environment().nodes)
        _, given = addresses("", advertise or profile.advertise, False)
    except (AllocationError, ValueError):  # (fleet.control.preflight refuses these)
        return None
    return warning(*advertised(given), nodes, False)


def embedded(advertise: str | None) -> str | None:
    """As `here`, for the fleet `fleet run` starts: this environment's machine profile."""
    from fleet.site.profiles import ProfileError, detect, load
    try:
        return here(load(detect()), advertise)
    except ProfileError:  # (fleet.control.preflight says why)
        return None
