"""CURVE keys for every ZeroMQ socket of a fleet.

The coordinator makes three key pairs when it starts: its own (the secret half never
leaves its memory), one for agents (handed to them in their environment, which only
their owner can read) and one for clients (written to the 0600 connection file). A
ZAP handler admits, on each socket, only the public key meant for it: a peer without
the right keys completes no handshake, so it gets no reply and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import zmq
import zmq.auth.thread

AGENT_ENV = "FLEET_CURVE"  # read (and removed from the environment) by fleet.node.agent


@dataclass(frozen=True)
class Keys:
    server_public: str
    server_secret: str
    agent_public: str
    agent_secret: str
    client_public: str
    client_secret: str

    @classmethod
    def generate(cls) -> "Keys":
        s, a, c = zmq.curve_keypair(), zmq.curve_keypair(), zmq.curve_keypair()
        return cls(*(k.decode("ascii") for k in (*s, *a, *c)))

    def agent_env(self) -> str:
        return f"{self.server_public} {self.agent_public} {self.agent_secret}"


def serve(sock: zmq.Socket, keys: Keys, domain: str) -> None:
    """Make sock a CURVE server whose peers are checked in ZAP domain `domain`."""
    sock.curve_secretkey = keys.server_secret.encode()
    sock.curve_publickey = keys.server_public.encode()
    sock.curve_server = True
    sock.zap_domain = domain.encode()


def connect_as(sock: zmq.Socket, server_public: str, public: str, secret: str) -> None:
    """Make sock a CURVE client of the server with that public key."""
    sock.curve_serverkey = server_public.encode()
    sock.curve_publickey = public.encode()
    sock.curve_secretkey = secret.encode()


class _OneKey:
    """A ZAP credentials provider admitting exactly one client public key."""

    def __init__(self, public: str):
        self.public = public.encode()

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.public


def start_authenticator(ctx: zmq.Context, keys: Keys) -> zmq.auth.thread.ThreadAuthenticator:
    """The ZAP handler (a thread of the coordinator, which never forks)."""
    auth = zmq.auth.thread.ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(domain="agents", credentials_provider=_OneKey(keys.agent_public))
    auth.configure_curve_callback(domain="clients", credentials_provider=_OneKey(keys.client_public))
    return auth

