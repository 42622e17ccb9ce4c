"""`GET /tables/{t}/consumingSegmentsInfo`: Pinot's controller view of what the servers consume.

Thin: the fan-out to the servers' admin endpoints and the merge are
`tables.controller.consuming.consuming_segments_info`. Read-only: any signed-in account.

Servers failing: a server that cannot be reached, times out (SERVER_ADMIN_TIMEOUT_SECONDS each,
asked in parallel) or answers an error status is counted in `serversFailingToRespond`; one that
answers something other than a JSON list of consumer items is counted in
`serversUnparsableRespond`. Neither fails the call (200); their segments show the other replicas'
items, or `[]`. Unknown table: 404 `{"code": 404, "error": "Table <t>_REALTIME not found!"}`;
malformed name: 400.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from tables.cluster import context
from tables.controller.consuming import consuming_segments_info

from .pinot import PinotView


class ConsumingSegmentsInfo(PinotView):
    @extend_schema(responses=OpenApiTypes.OBJECT)  # Pinot's ConsumingSegmentsInfoMap
    def get(self, request: Request, table: str) -> Response:
        return Response(
            consuming_segments_info(context.current(), table, settings.SERVER_ADMIN_TIMEOUT_SECONDS)
        )
