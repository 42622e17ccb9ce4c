"""The servers' kept-alive connections (`tables.server.http_pool`) against Django's threaded HTTP
server, the class the controller serves with (`run_controller`), on a loopback port: calls reuse
one connection; a reply that closes it, a controller that went away and came back, a timeout, and
more connections than are kept idle behave as the module's contract says."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

from tables.server.http_pool import ConnectionPool
from tests.ingest_cluster import free_port


class _Server:
    """A WSGI app behind Django's ThreadedWSGIServer; counts the connections it accepted and can
    drop them all, as a controller process that exits does."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connections: list[socket.socket] = []
        self.calls: list[str] = []
        self.release = threading.Event()
        self.arrived = threading.Semaphore(0)
        owner = self

        class Handler(WSGIRequestHandler):
            def setup(self) -> None:
                owner.connections.append(self.request)
                super().setup()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadedWSGIServer(("127.0.0.1", port), Handler)
        self.httpd.set_app(self.app)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def app(self, environ, start_response) -> Iterator[bytes] | list[bytes]:
        path = environ["PATH_INFO"]
        self.calls.append(path)
        if path == "/stream":  # no Content-Length: the server closes the connection after it
            start_response("200 OK", [("Content-Type", "text/plain")])
            return iter([b"one", b"two"])
        if path == "/wait":
            self.arrived.release()
            self.release.wait(30)
        status = "400 Bad Request" if path == "/refuse" else "200 OK"
        body = f"{path} {environ.get('QUERY_STRING', '')}".encode()
        start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


@pytest.fixture
def server() -> Iterator[_Server]:
    found = _Server(free_port())
    yield found
    found.stop()


def test_calls_reuse_one_connection(server):
    pool = ConnectionPool()
    url = f"http://127.0.0.1:{server.port}"
    replies = [pool.request(f"{url}/ok?n={n}") for n in range(3)]
    assert [r.body for r in replies] == [f"/ok n={n}".encode() for n in range(3)]
    assert [r.status for r in replies] == [200, 200, 200]
    assert pool.opened == 1
    assert len(server.connections) == 1
    assert pool.idle() == 1


def test_a_refusal_is_a_reply_and_keeps_the_connection(server):
    pool = ConnectionPool()
    url = f"http://127.0.0.1:{server.port}"
    reply = pool.request(f"{url}/refuse", "POST", {"X-Test": "1"}, b"body")
    assert (reply.status, reply.body) == (400, b"/refuse ")
    assert pool.request(f"{url}/ok").status == 200
    assert pool.opened == 1


def test_a_reply_that_closes_the_connection_is_not_kept(server):
    pool = ConnectionPool()
    url = f"http://127.0.0.1:{server.port}"
    assert pool.request(f"{url}/stream").body == b"onetwo"
    assert pool.idle() == 0
    assert pool.request(f"{url}/stream").body == b"onetwo"
    assert pool.opened == 2
    assert len(server.connections) == 2


def test_a_controller_that_went_away_and_came_back_is_called_on_a_new_connection(server):
    pool = ConnectionPool()
    url = f"http://127.0.0.1:{server.port}"
    assert pool.request(f"{url}/ok").status == 200
    server.stop()
    again = _Server(server.port)
    try:
        reply = pool.request(f"{url}/ok?after=restart")
        assert (reply.status, reply.body) == (200, b"/ok after=restart")
        assert pool.opened == 2
        assert again.calls == ["/ok"]  # sent once to the new one
    finally:
        again.stop()


def test_no_controller_at_all_raises(server):
    pool = ConnectionPool()
    url = f"http://127.0.0.1:{server.port}"
    assert pool.request(f"{url}/ok").status == 200
    server.stop()
    with pytest.raises(OSError):
        pool.request(f"{url}/ok")  # the stale connection, then a refused one
    assert pool.opened == 2
    assert pool.idle() == 0


def test_a_timed_out_call_is_not_sent_again(server):
    pool = ConnectionPool()
    url = f"http://127.0.0.1:{server.port}"
    assert pool.request(f"{url}/ok").status == 200
    with pytest.raises(TimeoutError):
        pool.request(f"{url}/wait", timeout=0.2)
    server.release.set()
    assert server.calls == ["/ok", "/wait"]
    assert pool.idle() == 0  # a connection with a reply still to come is never reused


def test_at_most_max_idle_connections_are_kept(server):
    pool = ConnectionPool(max_idle=2)
    url = f"http://127.0.0.1:{server.port}"
    errors: list[BaseException] = []

    def call() -> None:
        try:
            pool.request(f"{url}/wait")
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in threads:  # all three in the server at once: three connections
        assert server.arrived.acquire(timeout=10)
    server.release.set()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert pool.opened == 3
    assert pool.idle() == 2
    pool.close()
    assert pool.idle() == 0
