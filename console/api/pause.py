"""Pinot's pause and resume endpoints (reference §4.1 to §4.4). Thin: parse, call
`tables.controller.pause.PauseManager`, shape, audit.

- `POST /tables/{table}/pauseConsumption?comment=&batchSize=&batchStatusCheckIntervalSec=
  &batchStatusCheckTimeoutSec=` and, for a partition-level pause, `&partitions=0,3`: an operator
  action (`pause`); answers `PauseStatusDetails`. Audit detail: the consuming segments being
  committed, the force commit job id, and whether anything was written (a repeated pause is not).
- `POST /tables/{table}/resumeConsumption?consumeFrom=lastConsumed|smallest|largest&comment=`
  (`&partitions=` for a partition-level resume): an operator action (`resume`); answers
  `PauseStatusDetails`. Audit detail: every new segment with its start offset and, where it differs
  from where consumption stopped, the offsets skipped and why. Offsets the stream had dropped are
  added to the durable counter `llcStreamDataLoss` of the table.
- `GET /tables/{table}/pauseStatus`: any signed-in account.
Viewers get 403 (audited DENIED, nothing written); errors are `{"code", "error"}`.
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
from tables.controller.force_commit import ForceCommitManager, batch_config_of
from tables.controller.pause import PauseManager, PauseResult, ResumeResult
from tables.models import DurableCounter

from .force_commit import _QUERY as _BATCH_QUERY
from .pinot import PinotView

_PARTITIONS = OpenApiParameter(
    "partitions", str, description="comma-separated partition ids: pause or resume only these"
)
_COMMENT = OpenApiParameter("comment", str, description="the reason, kept in the audit log")
_PAUSE_QUERY = [p for p in _BATCH_QUERY if p.name.startswith("batch")] + [_COMMENT, _PARTITIONS]
_RESUME_QUERY = [
    OpenApiParameter(
        "consumeFrom",
        str,
        enum=["lastConsumed", "smallest", "largest"],
        description="where the new consuming segments start (default lastConsumed)",
    ),
    _COMMENT,
    _PARTITIONS,
]


def _manager() -> PauseManager:
    ctx = context.current()
    return PauseManager(ctx, ForceCommitManager(ctx, source=settings.CONTROLLER_INSTANCE_ID))


def _pause_detail(result: PauseResult) -> dict[str, Any]:
    commit = result.commit
    return {
        "written": result.written,
        "consumingSegments": list(commit.segments) if commit else [],
        "jobId": commit.job_id if commit else None,
    }


def _resume_detail(result: ResumeResult) -> dict[str, Any]:
    return {
        "segments": [
            {
                "segment": s.segment,
                "startOffset": s.start_offset,
                "previousOffset": s.wanted_offset,
                "startReason": str(s.skip_reason) if s.skip_reason else None,
                "skipped": s.skipped,
            }
            for s in result.segments
        ],
        "dataLoss": result.data_loss,
    }


def count_data_loss(result: ResumeResult) -> None:
    """Offsets the stream dropped before a resume could read them: `llcStreamDataLoss`."""
    if result.data_loss:
        DurableCounter.increment("llcStreamDataLoss", result.table, by=result.data_loss)


class _TableAction(PinotView):
    permission_classes = [OperatorAction]

    def audit_target(self, request: Request, table: str = "", **_: Any) -> str:
        return table_target(table)


class PauseConsumption(_TableAction):
    audit_action = "pause"

    @extend_schema(parameters=_PAUSE_QUERY, request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, table: str) -> Response:
        params = request.query_params

        def run() -> PauseResult:
            batch = batch_config_of(params)
            return _manager().pause(table, params.get("comment"), batch, params.get("partitions"))

        result = audited(
            request, "pause", table_target(table), reason_of(request), run, _pause_detail
        )
        return Response(result.details)


class ResumeConsumption(_TableAction):
    audit_action = "resume"

    @extend_schema(parameters=_RESUME_QUERY, request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, table: str) -> Response:
        params = request.query_params

        def run() -> ResumeResult:
            return _manager().resume(
                table, params.get("consumeFrom"), params.get("comment"), params.get("partitions")
            )

        result = audited(
            request, "resume", table_target(table), reason_of(request), run, _resume_detail
        )
        count_data_loss(result)
        return Response(result.details)


class PauseStatus(PinotView):
    @extend_schema(responses=OpenApiTypes.OBJECT)  # PauseStatusDetails (reference §4.3)
    def get(self, request: Request, table: str) -> Response:
        return Response(_manager().status(table))
