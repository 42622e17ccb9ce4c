"""Pinot's force commit endpoints (reference §4.1, §4.5). Thin: parse, call
`tables.controller.force_commit.ForceCommitManager`, shape, audit.

- `POST /tables/{table}/forceCommit?partitions=|segments=&batchSize=&batchStatusCheckIntervalSec=
  &batchStatusCheckTimeoutSec=&comment=`: an operator action (`console.audit.OperatorAction`,
  `force_commit`): viewers get 403 (audited DENIED, nothing written). The outcome is audited too:
  OK (200, detail jobId + segments), REJECTED (4xx) or FAILED (5xx), with `comment` as the reason.
  Answers `{"forceCommitStatus", "jobMetaZKWriteStatus", "forceCommitJobId"}` as Pinot does.
- `GET /tables/forceCommitStatus/{jobId}`: read-only, any signed-in account; the job's fields plus
  `segmentsYetToBeCommitted` and `numberOfSegmentsYetToBeCommitted`; unknown job -> 404.
Errors are `{"code", "error"}` (`console.api.errors`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from console.audit import OperatorAction, audited, reason_of, table_target
from tables.cluster import context
from tables.controller.force_commit import ForceCommitManager, ForceCommitResult, batch_config_of

from .pinot import PinotView

ACTION = "force_commit"
_CSV = "comma-separated; give partitions or segments, not both"
_QUERY = [
    OpenApiParameter("partitions", str, description=f"partition group ids, {_CSV}"),
    OpenApiParameter("segments", str, description=f"CONSUMING segment names, {_CSV}"),
    OpenApiParameter("batchSize", int, description="segments per batch (> 0; default all)"),
    OpenApiParameter(
        "batchStatusCheckIntervalSec", int, description="seconds between batch checks (> 0; 5)"
    ),
    OpenApiParameter(
        "batchStatusCheckTimeoutSec", int, description="seconds to wait for a batch (> 0; 180)"
    ),
    OpenApiParameter("comment", str, description="the reason, kept in the audit log"),
]


def _manager() -> ForceCommitManager:
    return ForceCommitManager(context.current(), source=settings.CONTROLLER_INSTANCE_ID)


class ForceCommit(PinotView):
    permission_classes = [OperatorAction]
    audit_action = ACTION

    def audit_target(self, request: Request, table: str = "", **_: Any) -> str:
        return table_target(table)

    @extend_schema(parameters=_QUERY, request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, table: str) -> Response:
        params = request.query_params

        def run() -> ForceCommitResult:
            batch = batch_config_of(params)
            return _manager().force_commit(
                table, params.get("partitions"), params.get("segments"), batch
            )

        result = audited(
            request,
            ACTION,
            table_target(table),
            reason_of(request),
            run,
            lambda done: {"jobId": done.job_id, "segments": list(done.segments)},
        )
        return Response(result.response())


class ForceCommitStatus(PinotView):
    @extend_schema(responses=OpenApiTypes.OBJECT)  # the job map (reference §4.5)
    def get(self, request: Request, job_id: str) -> Response:
        return Response(_manager().status(job_id))
