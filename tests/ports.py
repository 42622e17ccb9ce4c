"""Ports for the processes tests start.

`free_port()` picks a port nothing is bound to from `PORTS`, below the kernel's ephemeral range
(32768-60999 on these machines): a port taken with bind(0) comes from that range, which every
other bind(0) (a JVM starting its services) and every outgoing connection draws from too, and a
process that starts slowly (a controller's Django imports) once lost its port to one of them
between the pick and its own bind ("Address already in use"). `PORTS` also stays clear of the
fixed ports the test services use (PostgreSQL 1543x-1546x, Redis 1637x-1640x, ZooKeeper and the
ensemble 2181x-2184x).
"""

from __future__ import annotations

import random
import socket

__all__ = ["PORTS", "free_port", "free_ports"]

PORTS = range(24000, 32000)
_HOST = "127.0.0.1"


def free_port() -> int:
    """A random port of `PORTS` that nothing is bound to now."""
    for _ in range(1000):
        port = random.choice(PORTS)
        with socket.socket() as sock:
            try:
                sock.bind((_HOST, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports."""
    found: list[int] = []
    while len(found) < count:
        port = free_port()
        if port not in found:
            found.append(port)
    return found
