"""The table page's Re-ingest button and re-ingestion jobs (round 2 §C), in `/api/v1/`.

Pinot's controller has no re-ingestion endpoint of its own: its servers do (`POST
/reingestSegment/{segment}`, `GET /reingestSegment/jobs`). These two paths ask them, with the
cluster token, the way the healer does (`tables.controller.reingest_trigger`).

`POST /api/v1/tables/{table}/segments/{segment}/reingest[?comment=]`: an operator action
(`console.audit.OperatorAction`, action `reingest`; viewers 403 audited DENIED, anonymous 401).
Checked first, in this order, each refusal audited (REJECTED, or FAILED for a 5xx) with ZooKeeper
and the servers untouched: a malformed table name 400; a segment name that is not LLC 400 (Pinot's
"Segment name is not in LLC format: …"), or of another table 400; an unknown table 404; a segment
not in the IdealState 404; a partial-upsert or dedup table in disasterRecoveryMode DEFAULT 409
(Pinot's `allowRepairOfCommittingSegments`, `tables.domain.doctor_facts.committing_repair_allowed`:
the healer does not re-ingest such a segment and neither does the button); a job for the segment
already listed by one of its live servers 409 (`ReingestTrigger.running_on`, as the healer checks:
a server's own 409 covers only its jobs, and a second job on another replica would fail at
`/segments/reingested`); no live server of the segment with a known admin endpoint 503. Then one
live replica's server, picked at random, is asked, and its answer is the answer: 200 `{"jobId",
"segmentName", "startTimeMs", "server"}` (audited OK with that detail); Pinot's refusals 400, 404,
409 and 500 keep their status, with `error` "<server> answered HTTP <status>: <the server's
message>"; any other status, or a server that cannot be reached, is 502.

`GET /api/v1/tables/{table}/reingestJobs`: any signed-in account. The servers of the table's
IdealState are asked in parallel for their running jobs, each within `JOBS_TIMEOUT_S`;
`{"table", "askedAtMs", "timeoutMs", "servers": [{"server", "live", "answered", "error",
"jobs"}], "jobs": [{"jobId", "segmentName", "startTimeMs", "elapsedMs", "server"}]}` with the
jobs of this table's segments only, oldest first. A server that is not live is not asked; one that
does not answer in time, answers another status or something that is not a job list has
`answered` false and `error` saying why. 400 for a malformed name, 404 for an unknown table.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from console.audit import OperatorAction, audited, reason_of, table_target
from tables.cluster import context
from tables.cluster.context import ClusterContext
from tables.cluster.errors import BadRequest, Conflict, NotFound, ServiceError, Unavailable
from tables.cluster.reads import ClusterReader
from tables.controller.consuming import admin_urls
from tables.controller.reingest_trigger import ReingestTrigger, ServerReply
from tables.domain.doctor_facts import committing_repair_allowed
from tables.domain.names import LLCSegmentName, raw_table_name
from tables.security import cluster_token

from .pinot import PinotView

__all__ = ["ACTION", "JOBS_TIMEOUT_S", "ReingestJobs", "SegmentReingest", "start", "table_jobs"]

ACTION = "reingest"
JOBS_TIMEOUT_S = 2.0
JOBS_PATH = "/reingestSegment/jobs"
PINOT_REFUSALS = (400, 404, 409, 500)  # what ReingestionResource answers (round 2 §C.2)
MAX_THREADS = 16
MESSAGE_CHARS = 300


class ServerRefused(ServiceError):
    """A server's refusal, with its status (or 502 for an answer Pinot would not give)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _json(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _message(body: str) -> str:
    """The server's message: `error` of Pinot's `{"code", "error"}`, else the text itself."""
    found = _json(body)
    if isinstance(found, dict) and isinstance(found.get("error"), str):
        return found["error"][:MESSAGE_CHARS]
    return body.strip()[:MESSAGE_CHARS] or "(no message)"


def _llc_name(segment: str, raw: str) -> None:
    name = LLCSegmentName.parse(segment)
    if name is None:
        raise BadRequest(f"Segment name is not in LLC format: {segment}")
    if name.table_name != raw:
        raise BadRequest(f"segment {segment} is not a segment of table {raw}")


def _answer(reply: ServerReply, segment: str) -> dict[str, Any]:
    """The server's 200 as the endpoint's answer; ServerRefused for anything else."""
    server, status = reply.server, reply.status
    if status is None:
        raise ServerRefused(502, f"{server} ({reply.url}) cannot be reached: {reply.error}")
    if status != 200:
        code = status if status in PINOT_REFUSALS else 502
        raise ServerRefused(code, f"{server} answered HTTP {status}: {_message(reply.body)}")
    found = _json(reply.body)
    found = found if isinstance(found, dict) else {}
    return {
        "jobId": found.get("jobId"),
        "segmentName": found.get("segmentName", segment),
        "startTimeMs": found.get("startTimeMs"),
        "server": server,
    }


def start(ctx: ClusterContext, table: str, segment: str) -> dict[str, Any]:
    """Ask a live replica's server to re-ingest `segment` of `table` (module docstring)."""
    reader = ClusterReader(ctx)
    typed = reader.table_name(table)
    _llc_name(segment, raw_table_name(typed))
    config = reader.get_table_config(typed)
    instances = reader.idealstate(typed).get(segment)
    if not instances:
        raise NotFound(f"segment {segment} is not in the IdealState of {typed}")
    if not committing_repair_allowed(config.rest):
        raise Conflict(
            f"{typed} is a partial-upsert or dedup table in disasterRecoveryMode DEFAULT: its "
            "segments are not re-ingested (set streamIngestionConfig.disasterRecoveryMode to "
            "ALWAYS first)"
        )
    trigger = ReingestTrigger(ctx)
    running = trigger.running_on(segment, instances)
    if running is not None:
        raise Conflict(
            f"Re-ingestion for segment: {segment} is already in progress on {running} (its "
            "GET /reingestSegment/jobs lists it): nothing sent"
        )
    reply = trigger.request(segment, instances)
    if reply is None:
        raise Unavailable(
            f"no live server of {segment} with a known admin endpoint "
            f"(its replicas: {', '.join(sorted(instances))})"
        )
    return _answer(reply, segment)


@dataclass
class ServerJobs:
    """One server's part of the jobs fan-out."""

    server: str
    live: bool
    url: str | None
    answered: bool = False
    error: str = ""
    jobs: list[dict[str, Any]] = field(default_factory=list)


def _ask(entry: ServerJobs, token: str, timeout_s: float) -> ServerJobs:
    request = urllib.request.Request(
        f"{entry.url}{JOBS_PATH}", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            body = answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as refused:
        with refused:
            entry.error = f"answered HTTP {refused.code}"
        return entry
    except (OSError, ValueError) as exc:  # refused, timed out, unreachable
        entry.error = f"did not answer within {timeout_s:g} s: {exc}"
        return entry
    found = _json(body)
    if not isinstance(found, list) or not all(
        isinstance(job, dict) and isinstance(job.get("segmentName"), str) for job in found
    ):
        entry.error = "answered something that is not a job list"
        return entry
    entry.answered, entry.jobs = True, found
    return entry


def _servers(ctx: ClusterContext, instances: list[str]) -> list[ServerJobs]:
    urls = admin_urls(ctx, instances)
    out = []
    for server in instances:
        live = ctx.client.exists(ctx.paths.liveinstance(server)) is not None
        entry = ServerJobs(server, live, urls.get(server))
        if not live:
            entry.error = "not live: not asked"
        elif not entry.url:
            entry.error = "no admin endpoint in its instance config: not asked"
        out.append(entry)
    return out


def table_jobs(
    ctx: ClusterContext, table: str, timeout_s: float = JOBS_TIMEOUT_S
) -> dict[str, Any]:
    """The running re-ingestion jobs of `table`'s servers (module docstring)."""
    reader = ClusterReader(ctx)
    typed = reader.table_name(table)
    ideal = reader.idealstate(typed)  # 404 for an unknown table
    raw = raw_table_name(typed)
    entries = _servers(ctx, sorted({server for states in ideal.values() for server in states}))
    asked = [entry for entry in entries if entry.live and entry.url]
    if asked:
        token = cluster_token()
        with ThreadPoolExecutor(max_workers=min(len(asked), MAX_THREADS)) as pool:
            list(pool.map(lambda entry: _ask(entry, token, timeout_s), asked))
    now_ms = int(time.time() * 1000)
    jobs = []
    for entry in entries:
        for job in entry.jobs:
            name = LLCSegmentName.parse(job["segmentName"])
            if name is None or name.table_name != raw:
                continue
            started = job.get("startTimeMs")
            elapsed = now_ms - started if isinstance(started, int) else None
            jobs.append({**job, "elapsedMs": elapsed, "server": entry.server})
    jobs.sort(key=lambda job: (job.get("startTimeMs") or 0, job["segmentName"]))
    servers = [
        {
            "server": entry.server,
            "live": entry.live,
            "answered": entry.answered,
            "error": entry.error or None,
            "jobs": len(entry.jobs),
        }
        for entry in entries
    ]
    return {
        "table": typed,
        "askedAtMs": now_ms,
        "timeoutMs": int(timeout_s * 1000),
        "servers": servers,
        "jobs": jobs,
    }


TABLE = OpenApiParameter("table", str, OpenApiParameter.PATH, description="raw or with type")


class SegmentReingest(PinotView):
    permission_classes = [OperatorAction]
    audit_action = ACTION

    def audit_target(self, request: Request, table: str = "", segment: str = "", **_: Any) -> str:
        return f"{table_target(table)}/{segment}"

    @extend_schema(
        operation_id="segment_reingest",
        parameters=[
            TABLE,
            OpenApiParameter("segment", str, OpenApiParameter.PATH),
            OpenApiParameter("comment", str, description="the reason, kept in the audit"),
        ],
        request=None,
        responses={200: OpenApiTypes.OBJECT},
        description="Ask a live replica's server to re-ingest the segment "
        "(POST /reingestSegment/{segment} on it); its answer is the answer.",
    )
    def post(self, request: Request, table: str, segment: str) -> Response:
        target = self.audit_target(request, table, segment)
        started = audited(
            request,
            ACTION,
            target,
            reason_of(request),
            lambda: start(context.current(), table, segment),
            dict,
        )
        return Response(started)


class ReingestJobs(PinotView):
    @extend_schema(
        operation_id="table_reingest_jobs",
        parameters=[TABLE],
        responses={200: OpenApiTypes.OBJECT},
        description="The running re-ingestion jobs of the table's servers "
        "(GET /reingestSegment/jobs on each).",
    )
    def get(self, request: Request, table: str) -> Response:
        return Response(table_jobs(context.current(), table))
