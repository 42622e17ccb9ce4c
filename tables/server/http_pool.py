"""Kept-alive HTTP/1.1 connections from a server process to the controllers.

Every protocol call used to open a TCP connection (urllib sends `Connection: close`), and the
controller's threaded HTTP server starts a thread per connection: a connect, an accept and a
thread start per call, on the commit path of every segment and ~5 times per segment in a pause.
Pinot's servers keep their connections to the controller alive; so does this pool.

Contract:
- `request(url, method, headers, body, timeout)` sends one request and returns its `Reply`
  (status, body, headers) whatever the status; it raises OSError (connection refused, timeout,
  reset) or `http.client.HTTPException` when no reply came.
- Connections are kept per (host, port) while the reply allows it (HTTP/1.1, a Content-Length,
  no `Connection: close`); at most `max_idle` idle ones per controller, the rest are closed when
  they come back. A connection is used by one call at a time.
- A kept connection the controller closed meanwhile (a restart, a hand-over) fails at once when
  reused: that call is sent again once on a new connection, as urllib3 does. Only those errors,
  and only on a reused connection: a request that timed out, or failed on a new connection, is
  never sent twice (the caller decides, and the protocol's callers ask again anyway).
- `opened` counts the connections made (for tests and benches).
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ConnectionPool", "Reply"]

#: What a kept connection that the other side closed raises when it is used again.
STALE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ConnectionAbortedError,
)

DEFAULT_MAX_IDLE = 8


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]


class ConnectionPool:
    """Thread-safe; one per server process (`tables.server.protocol.CompletionClient`)."""

    def __init__(self, max_idle: int = DEFAULT_MAX_IDLE) -> None:
        self.max_idle = max_idle
        self.opened = 0
        self._idle: dict[tuple[str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def request(
        self,
        url: str,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 10.0,
    ) -> Reply:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not an http:// URL: {url}")
        key = (parts.hostname, parts.port or 80)
        target = parts.path or "/"
        if parts.query:
            target = f"{target}?{parts.query}"
        conn, reused = self._take(key, timeout)
        try:
            reply, keep = _exchange(conn, method, target, headers or {}, body, timeout)
        except STALE:
            conn.close()
            if not reused:
                raise
            conn = self._new(key, timeout)
            reply, keep = self._send_once(conn, method, target, headers or {}, body, timeout)
        except BaseException:
            conn.close()
            raise
        self._give(key, conn, keep)
        return reply

    def close(self) -> None:
        """Close every idle connection (connections in use close when they come back)."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def idle(self) -> int:
        with self._lock:
            return sum(len(conns) for conns in self._idle.values())

    # --- machinery ----------------------------------------------------------------------------
    @staticmethod
    def _send_once(conn, method, target, headers, body, timeout) -> tuple[Reply, bool]:
        try:
            return _exchange(conn, method, target, headers, body, timeout)
        except BaseException:
            conn.close()
            raise

    def _take(
        self, key: tuple[str, int], timeout: float
    ) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            conns = self._idle.get(key)
            if conns:
                return conns.pop(), True
        return self._new(key, timeout), False

    def _new(self, key: tuple[str, int], timeout: float) -> http.client.HTTPConnection:
        with self._lock:
            self.opened += 1
        return http.client.HTTPConnection(key[0], key[1], timeout=timeout)

    def _give(self, key: tuple[str, int], conn: http.client.HTTPConnection, keep: bool) -> None:
        if keep:
            with self._lock:
                conns = self._idle.setdefault(key, [])
                if len(conns) < self.max_idle:
                    conns.append(conn)
                    return
        conn.close()


def _exchange(
    conn: http.client.HTTPConnection,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes | None,
    timeout: float,
) -> tuple[Reply, bool]:
    """One request and its whole reply on `conn`; whether `conn` may be used again."""
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)
    conn.request(method, target, body=body, headers=dict(headers))
    answer = conn.getresponse()
    data = answer.read()
    reply = Reply(answer.status, data, dict(answer.getheaders()))
    return reply, not answer.will_close
