"""A server's admin HTTP endpoint (Pinot's server admin API, the parts this project has).

- `GET /tables/{table}/consumingSegmentsInfo`: a JSON list, one item per segment this server is
  consuming for the table (Pinot's server-side `SegmentConsumerInfo`: `segmentName`,
  `consumerState` (NOT_CONSUMING only for a failed or stopped consumer, as Pinot reports it;
  holding and committing are CONSUMING), `lastConsumedTimestamp`, `partitionToOffsetMap`,
  `partitionOffsetInfo{currentOffsets, latestUpstreamOffsets, recordsLag, availabilityLagMs}`;
  offsets and lags as strings, keyed by partition id). The table may be given with or without
  `_REALTIME`; a table this server does not host answers 404.
- `GET /debug/tables/{table}`: every replica this server holds for the table: `segmentName`,
  `currentState` (since `sinceMs`), and for a consumer its `phase` (CONSUMING, HOLDING,
  CATCHING_UP, COMMITTING, COMMITTED, KEPT, DISCARDED, STOPPED, ERROR), `rows`, `startOffset`,
  `nextOffset`, `endReason`, `holdReason` (why a HOLDING consumer does not ask: a build backing
  off after a deterministic failure, with its next try; else null);
  `error` for a failed transition (like Pinot's server `/debug/tables/{table}`, this shape is ours).
- `GET /metrics`: the Prometheus text of `metrics()` (built by the caller from `monitoring`).
- `GET /health`: `OK` while the server runs, as Pinot's server answers.
- `GET /health/liveness`: text `OK` while the server's reconcile loop runs, else 503 with why.
- `GET /health/readiness` (Pinot's meaning, `tables.server.readiness`): text `OK` once every
  segment assigned at startup is loaded and the consuming ones have caught up, while the
  ZooKeeper session is up; else 503 with the reason as text. Both need no credentials (probes).
- `GET /reingestSegment/jobs` and `POST /reingestSegment/{segmentName}` (name URL-decoded): Pinot's
  re-ingestion resource (`tables.server.reingestion`). The POST needs the cluster token
  (`Authorization: Bearer <token>`), else 401.
- Peer download (`tables.server.peer`), both with the cluster token, else 401; names URL-decoded:
  `GET /segments/{tableNameWithType}/{segmentName}`: the tar of a segment this server holds ONLINE
  (`application/octet-stream`), 404 when it holds none;
  `POST /segments/{tableNameWithType}/{segmentName}/uploadCommittedSegment?uploadTimeoutMs=<n>`
  (Pinot's): uploads that copy to the deep store and answers 200 with the segment's ZK simple
  fields as the controller should write them (status DONE, `segment.download.url` = the upload);
  404 when it holds none, 400 for an `uploadTimeoutMs` that is not a positive integer (absent:
  `DEFAULT_UPLOAD_TIMEOUT_MS`), 500 when the upload fails or takes longer.
Errors are JSON `{"code", "error"}` like the controller's API.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tables.domain.completion_trust import check_token
from tables.domain.names import table_name_with_type
from tables.domain.segment_states import SegmentState
from tables.http_servers import NoDelay

from .consumer import SegmentConsumer
from .instance import Replica, ServerInstance
from .peer import CommittedCopies, Refused
from .readiness import ServerReadiness
from .reingestion import ReingestionRefused, SegmentReingestion

__all__ = ["AdminServer", "consuming_segments_info"]

log = logging.getLogger(__name__)

_CONSUMING_INFO = re.compile(r"^/tables/([^/]+)/consumingSegmentsInfo/?$")
_DEBUG = re.compile(r"^/debug/tables/([^/]+)/?$")
_REINGEST_JOBS = "/reingestSegment/jobs"
_REINGEST = re.compile(r"^/reingestSegment/([^/]+)/?$")
_SEGMENT = re.compile(r"^/segments/([^/]+)/([^/]+)/?$")
_UPLOAD_COMMITTED = re.compile(r"^/segments/([^/]+)/([^/]+)/uploadCommittedSegment/?$")
DEFAULT_UPLOAD_TIMEOUT_MS = 600_000


def _info(consumer: SegmentConsumer, now_ms: int) -> dict[str, Any]:
    stats, partition = consumer.stats, str(consumer.spec.partition)
    current = consumer.next_offset
    lag = stats.offset_lag(current)
    return {
        "segmentName": consumer.spec.segment,
        "consumerState": "NOT_CONSUMING" if consumer.failed else "CONSUMING",
        "lastConsumedTimestamp": stats.last_consumed_ms or 0,
        "partitionToOffsetMap": {partition: str(current)},
        "partitionOffsetInfo": {
            "currentOffsets": {partition: str(current)},
            "latestUpstreamOffsets": {partition: str(current + lag)},
            "recordsLag": {partition: str(lag)},
            "availabilityLagMs": {partition: str(stats.delay_ms(now_ms, current))},
        },
    }


def _replicas(instance: ServerInstance, table: str) -> dict[str, Replica] | None:
    name = table if table.endswith("_REALTIME") else table_name_with_type(table, "REALTIME")
    return instance.replicas_of(name)


def debug_info(instance: ServerInstance, table: str) -> list[dict[str, Any]] | None:
    """Every replica of `table` on this server, or None when it is not hosted here."""
    replicas = _replicas(instance, table)
    if replicas is None:
        return None
    out = []
    for segment, replica in sorted(replicas.items()):
        item: dict[str, Any] = {
            "segmentName": segment,
            "currentState": str(replica.state) if replica.state else "OFFLINE",
            "error": replica.error,
            "sinceMs": replica.since_ms,
        }
        consumer = replica.consumer
        if consumer is not None:
            item.update(
                phase=str(consumer.phase),
                rows=consumer.rows,
                startOffset=str(consumer.spec.start_offset),
                nextOffset=str(consumer.next_offset),
                endReason=consumer.end_reason,
                holdReason=consumer.hold_reason,  # a held build's reason (issue 23), else None
            )
        out.append(item)
    return out


def consuming_segments_info(instance: ServerInstance, table: str) -> list[dict[str, Any]] | None:
    """The server-side consumingSegmentsInfo of `table`, or None when it is not hosted here."""
    replicas = _replicas(instance, table)
    if replicas is None:
        return None
    now_ms = int(time.time() * 1000)
    out = []
    for _segment, replica in sorted(replicas.items()):
        consumer = replica.consumer
        if replica.state is SegmentState.CONSUMING and consumer is not None:
            out.append(_info(consumer, now_ms))
    return out


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._text(200, "OK")
            return
        if path in ("/health/liveness", "/health/readiness"):
            self._probe(path)
            return
        if path == "/metrics":
            body, content_type = self.server.metrics()
            self._send(200, body, content_type)
            return
        if path.rstrip("/") == _REINGEST_JOBS:
            self._json(200, self.server.reingestion.jobs())
            return
        match = _SEGMENT.match(path)
        if match is not None:
            self._segment_copy(*(urllib.parse.unquote(g) for g in match.groups()))
            return
        for pattern, view in ((_CONSUMING_INFO, consuming_segments_info), (_DEBUG, debug_info)):
            match = pattern.match(path)
            if match:
                info = view(self.server.instance, match.group(1))
                if info is None:
                    self._json(404, {"code": 404, "error": f"table {match.group(1)} is not hosted"})
                else:
                    self._json(200, info)
                return
        self._json(404, {"code": 404, "error": f"no such endpoint: {path}"})

    def do_POST(self) -> None:
        path, _, query = self.path.partition("?")
        upload = _UPLOAD_COMMITTED.match(path)
        if upload is not None:
            if self._authorized():
                table, segment = (urllib.parse.unquote(g) for g in upload.groups())
                self._upload_committed(table, segment, query)
            return
        match = _REINGEST.match(path)
        if match is None or path.rstrip("/") == _REINGEST_JOBS:
            self._json(404, {"code": 404, "error": f"no such endpoint: POST {path}"})
            return
        if not self._authorized():
            return
        segment = urllib.parse.unquote(match.group(1))
        try:
            self._json(200, self.server.reingestion.start(segment))
        except ReingestionRefused as refused:
            self._json(refused.status, {"code": refused.status, "error": refused.message})

    def _authorized(self) -> bool:
        """The cluster token; False (after answering 401) without it."""
        refusal = check_token(self.headers.get("Authorization"), self.server.instance.client.token)
        if refusal is not None:
            self._json(401, {"code": 401, "error": refusal.reason})
        return refusal is None

    def _segment_copy(self, table: str, segment: str) -> None:
        if not self._authorized():
            return
        path = self.server.copies.held(table, segment)
        if path is None:
            self._json(404, {"code": 404, "error": f"segment {segment} of {table} is not held"})
            return
        with path.open("rb") as stream:
            size = path.stat().st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Disposition", f'attachment; filename="{segment}.tar.gz"')
            self.send_header("Content-Length", str(size))
            self.end_headers()
            shutil.copyfileobj(stream, self.wfile, 1 << 20)

    def _upload_committed(self, table: str, segment: str, query: str) -> None:
        values = urllib.parse.parse_qs(query).get("uploadTimeoutMs", [])
        try:
            timeout_ms = int(values[-1]) if values else DEFAULT_UPLOAD_TIMEOUT_MS
            if timeout_ms <= 0:
                raise ValueError
        except ValueError:
            self._json(400, {"code": 400, "error": "uploadTimeoutMs must be a positive integer"})
            return
        try:
            self._json(200, self.server.copies.upload(table, segment, timeout_ms / 1000))
        except Refused as refused:
            self._json(refused.status, {"code": refused.status, "error": refused.message})

    def _probe(self, path: str) -> None:
        if path == "/health/liveness":
            problem = None if self.server.instance.alive else "the server's reconcile loop ended"
        elif self.server.readiness is None:
            problem = "readiness is not tracked by this process"
        else:
            problem = self.server.readiness.reason()
        if problem is None:
            self._text(200, "OK")
        else:
            self._text(503, problem)

    def _text(self, status: int, text: str) -> None:
        self._send(status, text.encode(), "text/plain; charset=utf-8")

    def _json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("admin %s %s", self.address_string(), format % args)


class _Server(NoDelay, ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops connections of a burst (peer downloads, the
    # console's consumingSegmentsInfo fan-out), which callers' kernels retry only after 1 s.
    request_queue_size = 1024
    instance: ServerInstance
    metrics: Callable[[], tuple[bytes, str]]
    readiness: ServerReadiness | None
    reingestion: SegmentReingestion
    copies: CommittedCopies


class AdminServer:
    def __init__(
        self,
        instance: ServerInstance,
        host: str,
        port: int,
        metrics: Callable[[], tuple[bytes, str]],
        readiness: ServerReadiness | None = None,
        reingestion: SegmentReingestion | None = None,
    ) -> None:
        self.httpd = _Server((host, port), _Handler)
        self.reingestion = reingestion if reingestion is not None else SegmentReingestion(instance)
        self.httpd.reingestion = self.reingestion
        self.httpd.instance = instance
        self.httpd.copies = CommittedCopies(
            instance.replicas_of, instance.local, instance.ctx, instance.committer.deep_store
        )
        self.httpd.metrics = metrics
        self.httpd.readiness = readiness
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="admin-http")
        self._thread.daemon = True

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.reingestion.stop()
        self.httpd.shutdown()
        self.httpd.server_close()
