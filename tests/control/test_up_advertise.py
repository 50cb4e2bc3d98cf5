"""The address agents and clients reach the coordinator at: `fleet up --advertise`
(and `fleet run`'s embedded fleet), $FLEET_ADVERTISE, a machine profile's `advertise`;
a network interface is advertised as its IPv4 address. Real fleets, real processes."""

from __future__ import annotations

import socket
from pathlib import Path

import psutil
import pytest

from fleetharness import assert_nothing_left, fleet, records, write_suite

from fleet.control.coordinator_cli import addresses
from fleet.wire import connection
from fleet.wire import events as E


def interface() -> tuple[str, str]:
    """A network interface of this machine with an IPv4 address, and that address: one
    other than loopback if there is one (what a default local fleet would not use)."""
    found = [(name, a.address) for name, addrs in sorted(psutil.net_if_addrs().items())
             for a in addrs if a.family == socket.AF_INET]
    others = [f for f in found if not f[1].startswith("127.")]
    return (others or found)[0]


def pair(path: Path, run_dir: Path) -> Path:
    return write_suite(path, f'[suite]\nname = "pair"\nrun_dir = "{run_dir}"\n[[steps]]\nid = "a"\n'
                             'command = ["true"]\n[[steps]]\nid = "b"\ncommand = ["true"]\ndeps = ["a"]\n')


def assert_up_at(run_dir: Path, address: str, nodes: int) -> None:
    """fleet.json names address for agents and clients, and every agent joined through it."""
    conn = connection.read(run_dir / connection.NAME)
    assert conn.client.startswith(f"tcp://{address}:") and conn.agents.startswith(f"tcp://{address}:"), conn
    joined = [r.node for r in records(run_dir) if isinstance(r, E.NodeJoined)]
    assert len(joined) == nodes, joined


def test_fleet_up_advertise_names_that_address_in_fleet_json_and_agents_and_clients_use_it(tmp_path):
    _, address = interface()
    run_dir = tmp_path / "run"
    r = fleet("up", "--local", "--nodes", "2", "--advertise", address, "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        assert r.returncode == 0, r.stderr
        assert_up_at(run_dir, address, 2)
        s = fleet("run", str(pair(tmp_path / "s.toml", run_dir)), "--run-dir", str(run_dir), cwd=tmp_path)
        assert s.returncode == 0, s.stdout + s.stderr
    finally:
        d = fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert d.returncode == 0, d.stderr
    assert_nothing_left(run_dir)


@pytest.mark.parametrize("where", ["FLEET_ADVERTISE", "profile"])
def test_a_network_interface_from_the_environment_or_the_machine_profile_is_advertised_as_its_address(
        tmp_path, where):
    name, address = interface()
    run_dir = tmp_path / "run"
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "site.toml").write_text(f'[machine]\nlauncher = "local"\nadvertise = "{name}"\n')
    extra = {"FLEET_ADVERTISE": name} if where == "FLEET_ADVERTISE" else {"FLEET_MACHINES": str(machines)}
    machine = ["--local"] if where == "FLEET_ADVERTISE" else ["--machine", "site"]
    r = fleet("up", *machine, "--run-dir", str(run_dir), cwd=tmp_path, environ=extra)
    try:
        assert r.returncode == 0, r.stderr
        assert_up_at(run_dir, address, 1)
    finally:
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert_nothing_left(run_dir)


def test_fleet_run_advertise_gives_its_embedded_fleet_that_address(tmp_path):
    _, address = interface()
    run_dir = tmp_path / "run"
    r = fleet("run", str(pair(tmp_path / "s.toml", run_dir)), "--advertise", address, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    log = (run_dir / "coordinator.log").read_text()
    assert f"agents connect to tcp://{address}:" in log and f"(listening on {address})" in log, log
    assert_nothing_left(run_dir)


def test_an_address_not_of_this_host_fails_fleet_up_at_once_saying_so_and_leaves_nothing(tmp_path):
    run_dir = tmp_path / "run"
    r = fleet("up", "--local", "--advertise", "198.51.100.7", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert r.returncode == 1
    assert "cannot listen on 198.51.100.7" in r.stderr and "is 198.51.100.7 an address of this host?" in r.stderr
    assert not (run_dir / "fleet.json").exists() and not (run_dir / ".fleet" / "lease").exists()


def test_where_a_coordinator_listens_for_what_it_advertises():
    name, address = interface()
    assert addresses("", "", local=True) == ("127.0.0.1", "")
    assert addresses("", "", local=False) == ("0.0.0.0", "")
    assert addresses("", name, local=True) == (address, address)  # an interface: its address
    assert addresses("", name, local=False) == ("0.0.0.0", address)
    assert addresses("", "localhost", local=True) == ("127.0.0.1", "localhost")  # a host name, as given
    assert addresses("0.0.0.0", address, local=True) == ("0.0.0.0", address)  # --bind wins
    empty = [n for n, addrs in psutil.net_if_addrs().items() if not any(a.family == socket.AF_INET for a in addrs)]
    if empty:
        with pytest.raises(ValueError, match=f"network interface {empty[0]} has no IPv4 address"):
            addresses("", empty[0], local=True)
