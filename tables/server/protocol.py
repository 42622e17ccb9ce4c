"""The server's side of the segment completion protocol: HTTP calls to the table's lead
controller (reference §5.1, §5.8).

Contract:
- The lead controller is found as Pinot's ControllerLeaderLocator does: the MASTER of the table's
  partition in leadControllerResource's EXTERNALVIEW (or `/CONTROLLER/LEADER` when the resource is
  disabled), then that participant's `HELIX_HOST`/`HELIX_PORT`. The answer is cached until a call
  fails or answers NOT_LEADER; a lookup happens at most once per `relocate_interval_s`.
- Calls go over kept-alive HTTP/1.1 connections (`tables.server.http_pool`: no connect, and no
  new thread on the controller, per call); one that the controller closed meanwhile is replaced.
- Every call carries the cluster token (`Authorization: Bearer <token>`; default
  `tables.security.cluster_token()`): the controller refuses calls without it.
- A call that cannot be made or answered (no leader, connection refused, timeout, a reply that is
  not protocol JSON) returns `NOT_SENT`: the caller treats it like HOLD and asks again.
- A refusal (HTTP 4xx with a protocol body, e.g. a bad token, not a replica, an offset past the
  stream's end) returns that body's status (FAILED): the caller backs off and asks again; the
  reason is logged at most once a minute per call type and HTTP status.
- Protocol calls time out after 10 s; commit end, which moves the segment in the deep store, after
  `commit_timeout_s` (60 s); a pauseless commit start, during which the controller does the
  COMMITTING, next-segment and IdealState writes, after the caller's `timeout` (the committer
  passes `MAX_SEGMENT_COMMIT_TIME_S`, Pinot's `getMaxSegmentCommitTimeMs()`, PR #17885).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.client import HTTPException

from tables.cluster.context import ClusterContext
from tables.cluster.leadership import lead_controller_for
from tables.domain.backoff import LogThrottle
from tables.domain.completion_response import RESP_NOT_SENT, Response
from tables.security import cluster_token
from tables.server.http_pool import ConnectionPool
from tables.zk.records import read_record

__all__ = [
    "MAX_SEGMENT_COMMIT_TIME_S",
    "PROTOCOL_TIMEOUT_S",
    "CompletionClient",
    "LeaderLocator",
    "SegmentFiles",
    "query_params",
]

log = logging.getLogger(__name__)

PROTOCOL_TIMEOUT_S = 10.0
MAX_SEGMENT_COMMIT_TIME_S = 120.0  # SegmentCompletionProtocol's default max segment commit time
REFUSAL_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class SegmentFiles:
    """The two files commit end carries (the committed tar's metadata)."""

    metadata_properties: bytes
    creation_meta: bytes


class LeaderLocator:
    """Base URL (`http://host:port`) of the controller leading a table."""

    def __init__(self, ctx: Callable[[], ClusterContext], relocate_interval_s: float = 1.0) -> None:
        self._ctx = ctx
        self._interval = relocate_interval_s
        self._lock = threading.Lock()
        self._cache: dict[str, str] = {}
        self._looked_up: dict[str, float] = {}

    def url_for(self, table: str) -> str | None:
        with self._lock:
            cached = self._cache.get(table)
            if cached is not None:
                return cached
            if time.monotonic() - self._looked_up.get(table, -1e9) < self._interval:
                return None
            self._looked_up[table] = time.monotonic()
        url = self._lookup(table)
        if url is not None:
            with self._lock:
                self._cache[table] = url
        return url

    def invalidate(self, table: str) -> None:
        with self._lock:
            self._cache.pop(table, None)

    def _lookup(self, table: str) -> str | None:
        try:
            ctx = self._ctx()
            leader = lead_controller_for(ctx, table)
            if leader is None:
                return None
            config = read_record(ctx.client, ctx.paths.participant_config(leader))
        except Exception:  # ZooKeeper away: the caller retries
            log.warning("cannot locate the lead controller of %s", table, exc_info=True)
            return None
        if config is None:
            return None
        host = config.record.simple_fields.get("HELIX_HOST")
        port = config.record.simple_fields.get("HELIX_PORT")
        return f"http://{host}:{port}" if host and port else None


def _multipart(files: Mapping[str, bytes]) -> tuple[bytes, str]:
    boundary = f"----segment-{uuid.uuid4().hex}"
    body = bytearray()
    for name, content in files.items():
        body += f"--{boundary}\r\n".encode()
        body += (
            f'Content-Disposition: form-data; name="{name}"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        body += content + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return bytes(body), f"multipart/form-data; boundary={boundary}"


def query_params(
    instance: str, segment: str, offset: int, optional: Mapping[str, object]
) -> dict[str, object]:
    """A protocol call's query parameters: the required three, then `optional` ones that are
    set (Pinot sends optional numeric parameters only when they are > 0)."""
    params: dict[str, object] = {
        "instance": instance,
        "name": segment,
        "streamPartitionMsgOffset": offset,
    }
    for key, value in optional.items():
        if value is None or (isinstance(value, int) and value <= 0) or value == "":
            continue
        params[key] = value
    return params


class CompletionClient:
    """One server instance's protocol calls. Thread-safe."""

    def __init__(
        self,
        instance_id: str,
        locator: LeaderLocator,
        commit_timeout_s: float = 60.0,
        token: str | None = None,
        pool: ConnectionPool | None = None,
    ) -> None:
        """`pool`: the process's kept-alive connections (`tables.server.http_pool`); a new one
        by default."""
        self.instance_id = instance_id
        self.locator = locator
        self.pool = pool if pool is not None else ConnectionPool()
        self.commit_timeout_s = commit_timeout_s
        self.token = token if token is not None else cluster_token()
        self.responses: dict[str, int] = {}  # status -> count (llcControllerResponse<Status>)
        self._lock = threading.Lock()
        self._refusals = LogThrottle(every_s=REFUSAL_LOG_EVERY_S)

    # --- calls --------------------------------------------------------------------------------
    def segment_consumed(
        self,
        table: str,
        segment: str,
        offset: int,
        reason: str | None,
        row_count: int,
        start_commit: bool = False,
    ) -> Response:
        """`start_commit`: ask for the early commit start (pauseless: should this call make
        us the committer, the controller runs commit start in it)."""
        optional: dict[str, object] = {"reason": reason, "rowCount": row_count}
        if start_commit:
            optional["startCommit"] = "true"
        return self._call(table, "segmentConsumed", segment, offset, optional)

    def segment_stopped_consuming(
        self, table: str, segment: str, offset: int, reason: str
    ) -> Response:
        return self._call(table, "segmentStoppedConsuming", segment, offset, {"reason": reason})

    def extend_build_time(
        self, table: str, segment: str, offset: int, extra_time_sec: int
    ) -> Response:
        return self._call(
            table, "extendBuildTime", segment, offset, {"extraTimeSec": extra_time_sec}
        )

    def segment_commit_start(
        self,
        table: str,
        segment: str,
        offset: int,
        params: Mapping[str, object],
        timeout: float = PROTOCOL_TIMEOUT_S,
    ) -> Response:
        return self._call(table, "segmentCommitStart", segment, offset, params, timeout=timeout)

    def segment_commit_end(
        self,
        table: str,
        segment: str,
        offset: int,
        location: str,
        files: SegmentFiles,
        params: Mapping[str, object],
    ) -> Response:
        body, content_type = _multipart(
            {"metadata.properties": files.metadata_properties, "creation.meta": files.creation_meta}
        )
        return self._call(
            table,
            "segmentCommitEndWithMetadata",
            segment,
            offset,
            {**params, "location": location},
            body=body,
            content_type=content_type,
            timeout=self.commit_timeout_s,
        )

    # --- machinery ----------------------------------------------------------------------------
    def _call(
        self,
        table: str,
        msg_type: str,
        segment: str,
        offset: int,
        optional: Mapping[str, object],
        body: bytes | None = None,
        content_type: str | None = None,
        timeout: float = PROTOCOL_TIMEOUT_S,
    ) -> Response:
        response = self._send(
            table, msg_type, segment, offset, optional, body, content_type, timeout
        )
        with self._lock:
            key = str(response.status)
            self.responses[key] = self.responses.get(key, 0) + 1
        if response.status in ("NOT_LEADER", "NOT_SENT"):
            self.locator.invalidate(table)
        return response

    def _send(self, table, msg_type, segment, offset, optional, body, content_type, timeout):
        base = self.locator.url_for(table)
        if base is None:
            return RESP_NOT_SENT
        params = query_params(self.instance_id, segment, offset, optional)
        url = f"{base}/{msg_type}?{urllib.parse.urlencode(params)}"
        headers = {"Authorization": f"Bearer {self.token}"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            reply = self.pool.request(url, "POST" if body else "GET", headers, body, timeout)
            if not 200 <= reply.status < 300:
                return self._refused(msg_type, segment, reply.status, reply.body)
            return Response.from_json(json.loads(reply.body))
        except (OSError, HTTPException, ValueError, KeyError) as exc:  # timeouts, bad JSON
            log.info("%s %s to %s not answered: %s", msg_type, segment, base, exc)
            return RESP_NOT_SENT

    def _refused(self, msg_type: str, segment: str, code: int, body: bytes) -> Response:
        """A 4xx with a protocol body is the controller refusing the call: its status (FAILED).
        Anything else (5xx, a redirect, a proxy's page) is a call not answered: NOT_SENT."""
        try:
            data = json.loads(body)
            response = Response.from_json(data) if 400 <= code < 500 else None
        except (ValueError, KeyError, TypeError):
            response = None
        if response is None:
            log.info("%s %s not answered: HTTP %d", msg_type, segment, code)
            return RESP_NOT_SENT
        with self._lock:
            write, unlogged = self._refusals.allow(f"{msg_type}:{code}", time.monotonic())
        if write:
            log.warning(
                "%s %s refused by the controller (HTTP %d): %s%s",
                msg_type,
                segment,
                code,
                data.get("reason", "no reason given"),
                f" (and {unlogged} more refusals since the last such message)" if unlogged else "",
            )
        return response
