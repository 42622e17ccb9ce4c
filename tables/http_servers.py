"""What this project's HTTP servers (the controller's, a server's admin port) share.

`NoDelay`: a socketserver mix-in that turns Nagle's algorithm off on every accepted connection.
Both servers write a reply in several small sends (status and headers, then the body); with Nagle
on, the body waits for the ACK of the headers, which the caller's kernel delays by up to 40 ms.
Measured (`bench/pause.py`): every commit end was answered ~45 ms after the controller had
committed; with Nagle off, ~5 ms.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["NoDelay"]


class NoDelay:
    """Mix in before the socketserver class: `class S(NoDelay, ThreadingHTTPServer)`."""

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()  # type: ignore[misc]
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, address
