"""Pinot's segment reset endpoint (reference round 2 §A.7). Thin: check, call
`tables.controller.healing.RealtimeSegmentValidationManager.reset_segment`, shape, audit.

`POST /segments/{tableNameWithType}/{segmentName}/reset[?comment=]`: an operator action
(`console.audit.OperatorAction`, `reset_segment`); viewers get 403 (audited DENIED, nothing
written), anonymous callers 401. Every replica the IdealState gives the segment whose ExternalView
state is not OFFLINE gets a Helix `STATE_TRANSITION` message (current state -> OFFLINE) in
`INSTANCES/<id>/MESSAGES/`; the server drops the replica and follows the IdealState back. A replica
on an instance that is not live, or with a reset already pending, is left alone.

Answers Pinot's SuccessResponse `{"status": "Successfully reset segment: <seg> of table: <t>"}`
plus `instances` (those messaged; empty when no replica needed one, then `note` says so). The
table may be given raw or with its type. A malformed name is 400, an unknown table or a segment
not in the IdealState 404, each with the reason (`{"code", "error"}`), audited REJECTED.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from console.audit import OperatorAction, audited, reason_of, table_target
from tables.cluster import context
from tables.cluster.reads import ClusterReader
from tables.controller.healing import RealtimeSegmentValidationManager

from .pinot import PinotView

ACTION = "reset_segment"
NOTHING_SENT = (
    "no replica was messaged: every replica is OFFLINE in the ExternalView, on an instance that "
    "is not live, or already has a reset pending"
)

RESET_RESPONSE = inline_serializer(
    "SegmentResetResponse",
    {
        "status": serializers.CharField(),
        "instances": serializers.ListField(child=serializers.CharField()),
        "note": serializers.CharField(required=False),
    },
)


def reset_answer(table: str, segment: str, instances: list[str]) -> dict[str, Any]:
    """The endpoint's JSON: Pinot's SuccessResponse plus the instances messaged."""
    body: dict[str, Any] = {
        "status": f"Successfully reset segment: {segment} of table: {table}",
        "instances": list(instances),
    }
    if not instances:
        body["note"] = NOTHING_SENT
    return body


class SegmentReset(PinotView):
    permission_classes = [OperatorAction]
    audit_action = ACTION

    def audit_target(self, request: Request, table: str = "", segment: str = "", **_: Any) -> str:
        return f"{table_target(table)}/{segment}"

    @extend_schema(
        operation_id="segment_reset",
        parameters=[OpenApiParameter("comment", str, description="the reason, kept in the audit")],
        request=None,
        responses={200: RESET_RESPONSE},
    )
    def post(self, request: Request, table: str, segment: str) -> Response:
        target = self.audit_target(request, table, segment)
        typed = table_target(table)

        def run() -> list[str]:
            ClusterReader.segment_name(segment)  # 400 before ZooKeeper is read
            manager = RealtimeSegmentValidationManager(
                context.current(), source=settings.CONTROLLER_INSTANCE_ID
            )
            return manager.reset_segment(table, segment)

        sent = audited(
            request, ACTION, target, reason_of(request), run, lambda done: {"instances": done}
        )
        return Response(reset_answer(typed, segment, sent))
