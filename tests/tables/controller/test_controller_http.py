"""The controller's HTTP server: connections it accepts have Nagle's algorithm off."""

from __future__ import annotations

import socket

from django.core.servers.basehttp import WSGIRequestHandler

from tables.management.commands.run_controller import LISTEN_BACKLOG, _ControllerHTTPServer


def test_accepted_connections_send_without_waiting_for_acks():
    server = _ControllerHTTPServer(("127.0.0.1", 0), WSGIRequestHandler)
    try:
        assert server.request_queue_size == LISTEN_BACKLOG
        with socket.create_connection(server.server_address[:2], timeout=5):
            conn, _address = server.get_request()
            with conn:
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.server_close()
