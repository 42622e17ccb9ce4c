"""Pinot's controller `GET /health`: what Kubernetes probes (Pinot's Helm chart) call.

Text `OK` with 200 while this process's ZooKeeper session is connected; 503 with the reason as
text while it is suspended (connection down) or lost (expired, not yet renewed), or when the
process cannot connect at all. No credentials are asked (probes send none) and no ZooKeeper round
trip is made: the kazoo client's own state answers (`tables.zk.client.connection_problem`), so the
answer turns 503 as soon as the client sees the connection drop and 200 once it is back.
`?checkType=liveness` answers `OK` while the process serves requests, as Pinot's does. Served by the
web and by `manage.py run_controller` alike (one URLconf). The console's own deep check is
`/healthz`.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request

from tables.zk.client import connection_problem

from .pinot import PinotView

__all__ = ["Health"]

TEXT = "text/plain; charset=utf-8"


class Health(PinotView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="check_health",
        auth=[],
        parameters=[
            OpenApiParameter(
                "checkType", str, enum=["liveness", "readiness"], description="default: readiness"
            )
        ],
        responses={
            (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="`OK`"),
            (503, "text/plain"): OpenApiResponse(
                OpenApiTypes.STR, description="the reason: the ZooKeeper session is not connected"
            ),
        },
    )
    def get(self, request: Request) -> HttpResponse:
        if request.query_params.get("checkType", "").lower() != "liveness":
            problem = connection_problem(settings.ZK_HOSTS, settings.ZK_TIMEOUT_SECONDS)
            if problem is not None:
                return HttpResponse(problem, status=503, content_type=TEXT)
        return HttpResponse("OK", content_type=TEXT)
