"""Loopback ports for servers the tests start or point at."""

import socket


def free_port() -> int:
    """A loopback port nothing listens on now (bound, then released): for a server that must be told its port,
    or for an address where nothing answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
