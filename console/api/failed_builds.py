"""Failed builds backing off (issue 23), in `/api/v1/`: the errors page's section as JSON, and its
"Retry now" button.

`GET /api/v1/failedBuilds[?table=]`: any signed-in account. `{"failedBuilds": [{"table",
"segment", "failures", "error", "fingerprint", "servers", "firstFailureMs", "lastFailureMs",
"nextRetryMs", "waiting"}]}`, newest failure first (`tables.build_backoffs.rows`; `table` filters
by a part of the name), at most `console.pages.failed_builds.ROWS_SHOWN`.

`POST /api/v1/tables/{table}/segments/{segment}/retryBuild[?comment=]`: an operator action
(`console.audit.OperatorAction`, action `retry_build`; viewers 403 audited DENIED, anonymous
401). `tables.build_backoffs.retry` clears the segment's back-off: 200 `{"table", "segment",
"failures"}` (audited OK); a malformed table name, or a segment name that is not an LLC name of
that table, 400 with the reason; a segment without a failed build backing off 404; each refusal
audited REJECTED, nothing changed.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from console.audit import OperatorAction, audited, reason_of, table_target
from console.pages.failed_builds import ACTION, ROWS_SHOWN
from tables import build_backoffs
from tables.models import FailedBuild

from .pinot import PinotView

__all__ = ["FailedBuilds", "RetryBuild", "as_json"]


def _ms(moment: Any) -> int:
    return int(moment.timestamp() * 1000)


def as_json(build: FailedBuild, now_ms: int) -> dict[str, Any]:
    next_ms = _ms(build.next_retry_at)
    return {
        "table": build.table,
        "segment": build.segment,
        "failures": build.failures,
        "error": build.error,
        "fingerprint": build.fingerprint,
        "servers": list(build.servers or []),
        "firstFailureMs": _ms(build.first_failure_at),
        "lastFailureMs": _ms(build.last_failure_at),
        "nextRetryMs": next_ms,
        "waiting": next_ms > now_ms,
    }


class FailedBuilds(PinotView):
    @extend_schema(
        operation_id="failed_builds",
        parameters=[OpenApiParameter("table", str, description="a part of the table name")],
        responses={200: OpenApiTypes.OBJECT},
        description="Segments whose build failed deterministically and now backs off.",
    )
    def get(self, request: Request) -> Response:
        now_ms = _ms(timezone.now())
        found = build_backoffs.rows(request.query_params.get("table", "").strip())[:ROWS_SHOWN]
        return Response({"failedBuilds": [as_json(b, now_ms) for b in found]})


class RetryBuild(PinotView):
    permission_classes = [OperatorAction]
    audit_action = ACTION

    def audit_target(self, request: Request, table: str = "", segment: str = "", **_: Any) -> str:
        return f"{table_target(table)}/{segment}"

    @extend_schema(
        operation_id="segment_retry_build",
        parameters=[
            OpenApiParameter("table", str, OpenApiParameter.PATH, description="raw or with type"),
            OpenApiParameter("segment", str, OpenApiParameter.PATH),
            OpenApiParameter("comment", str, description="the reason, kept in the audit"),
        ],
        request=None,
        responses={200: OpenApiTypes.OBJECT},
        description="Clear the segment's build back-off: its replicas ask for the commit again "
        "and build it.",
    )
    def post(self, request: Request, table: str, segment: str) -> Response:
        cleared = audited(
            request,
            ACTION,
            self.audit_target(request, table, segment),
            reason_of(request),
            lambda: build_backoffs.retry(table, segment),
            dict,
        )
        return Response(cleared)
