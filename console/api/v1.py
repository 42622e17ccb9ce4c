"""The console's JSON API (`/api/v1/`): read-only views over the ZooKeeper mirror, for scripts and
dashboards. Thin: validate the query parameters, call one query of `v1_queries` (or of the shared
read model, `tables.mirror.read_model`, where there is nothing to translate), serialize.

Any signed-in account reads (session, `curl -u`, or `Authorization: Token <key>` from
`manage.py console_user --token`). Every response carries the mirror's `lastSynced`, so a script
can tell how old the figures are; `GET /api/v1/mirror` gives the age and a `stale` verdict.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from console import roles
from tables.mirror import read_model

from . import v1_queries as queries
from . import v1_serializers as s

__all__ = [
    "Audit",
    "Errors",
    "Instances",
    "Leaders",
    "Mirror",
    "PartitionDetail",
    "Partitions",
    "SegmentDetail",
    "Segments",
    "TableDetail",
    "Tables",
    "WhoAmI",
]

TABLE = OpenApiParameter(
    "table", OpenApiTypes.STR, OpenApiParameter.PATH, description="raw or with type"
)


class MirrorPagination(PageNumberPagination):
    """`?page=` (from 1) and `?page_size=` (default 50, at most 1000), with the mirror's
    `lastSynced` beside the page."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_paginated_response(self, data: list[Any]) -> Response:
        page = self.page
        return Response(
            {
                "lastSynced": read_model.last_synced(),
                "count": page.paginator.count,
                "page": page.number,
                "pageSize": page.paginator.per_page,
                "numPages": page.paginator.num_pages,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        integer = {"type": "integer"}
        link = {"type": "string", "nullable": True, "format": "uri"}
        return {
            "type": "object",
            "required": ["lastSynced", "count", "page", "pageSize", "numPages", "results"],
            "properties": {
                "lastSynced": {"type": "string", "format": "date-time", "nullable": True},
                "count": integer,
                "page": integer,
                "pageSize": integer,
                "numPages": integer,
                "next": link,
                "previous": link,
                "results": schema,
            },
        }


class V1View(GenericAPIView):
    """Signed-in reads. DRF views are exempt from the login-page redirect: anonymous calls get
    401 with a WWW-Authenticate challenge."""

    permission_classes = [IsAuthenticated]
    pagination_class = MirrorPagination
    query_serializer: type[Serializer] | None = None

    def params(self) -> dict[str, Any]:
        """The validated query parameters (400 with the reason when one is bad)."""
        if self.query_serializer is None:
            return {}
        parsed = self.query_serializer(data=self.request.query_params)
        parsed.is_valid(raise_exception=True)
        return dict(parsed.validated_data)


class V1List(V1View, ListAPIView):
    """A paged list."""


class V1Object(V1View):
    """One object, as `{lastSynced, result}`."""

    def get(self, request: Request, **kwargs: Any) -> Response:
        data = self.get_serializer(self.get_object()).data
        return Response({"lastSynced": read_model.last_synced(), "result": data})


# --- who am I, the mirror -------------------------------------------------------------------------


class WhoAmI(V1View):
    """The signed-in account, its role and the actions it may perform."""

    serializer_class = s.envelope("WhoAmIResponse", s.WhoAmISerializer)

    @extend_schema(operation_id="v1_whoami", summary="The signed-in account and what it may do")
    def get(self, request: Request) -> Response:
        user = request.user
        actions = roles.OPERATOR_ACTIONS | roles.ADMIN_ACTIONS
        result = {
            "username": user.username,
            "role": roles.role_of(user),
            "actions": sorted(a for a in actions if roles.can(user, a)),
        }
        return Response({"lastSynced": read_model.last_synced(), "result": result})


class Mirror(V1View):
    """The ZooKeeper mirror's last sync, its age and whether it is stale."""

    serializer_class = s.envelope("MirrorResponse", s.MirrorStateSerializer)

    @extend_schema(operation_id="v1_mirror", summary="The mirror's last sync and staleness")
    def get(self, request: Request) -> Response:
        state = read_model.mirror_state()
        data = s.MirrorStateSerializer(state, context=queries.freshness(state)).data
        return Response({"lastSynced": state.last_synced, "result": data})


# --- tables, partitions, segments -----------------------------------------------------------------


@extend_schema(parameters=[s.TableQuerySerializer], summary="Tables, filtered, sorted, paged")
class Tables(V1List):
    """Tables, worst first by default; filter by name, health, tenant, type, pause state."""

    serializer_class = s.TableSerializer
    query_serializer = s.TableQuerySerializer

    def get_queryset(self) -> QuerySet:
        return queries.tables(self.params())


@extend_schema(parameters=[TABLE], responses=s.envelope("TableResponse", s.TableDetailSerializer))
class TableDetail(V1Object):
    """One table (raw name or with type): summary, config, znode versions."""

    serializer_class = s.TableDetailSerializer

    def get_object(self) -> Any:
        return queries.table(self.kwargs["table"])


@extend_schema(parameters=[TABLE], summary="A table's stream partitions")
class Partitions(V1List):
    """A table's stream partitions: consuming segment, replicas' offsets and lag, verdict."""

    serializer_class = s.PartitionSerializer

    def get_queryset(self) -> QuerySet:
        return queries.partitions(self.kwargs["table"])


@extend_schema(parameters=[TABLE], responses=s.envelope("PartitionResponse", s.PartitionSerializer))
class PartitionDetail(V1Object):
    """One stream partition of a table."""

    serializer_class = s.PartitionSerializer

    def get_object(self) -> Any:
        return queries.partition(self.kwargs["table"], self.kwargs["partition"])


@extend_schema(parameters=[TABLE, s.SegmentQuerySerializer], summary="A table's segments")
class Segments(V1List):
    """A table's segments, by partition and sequence; filter by display state."""

    serializer_class = s.SegmentSerializer
    query_serializer = s.SegmentQuerySerializer

    def get_queryset(self) -> QuerySet:
        return queries.segments(self.kwargs["table"], self.params())


@extend_schema(
    parameters=[TABLE], responses=s.envelope("SegmentResponse", s.SegmentDetailSerializer)
)
class SegmentDetail(V1Object):
    """One segment with its ZK metadata."""

    serializer_class = s.SegmentDetailSerializer

    def get_object(self) -> Any:
        return queries.segment(self.kwargs["table"], self.kwargs["segment"])


# --- cluster-wide lists ---------------------------------------------------------------------------


@extend_schema(
    parameters=[s.ErrorQuerySerializer],
    summary="Segments in error (an ERROR replica or all replicas OFFLINE), across tables",
)
class Errors(V1List):
    """Segments with an ERROR replica or OFFLINE on every replica, across tables."""

    serializer_class = s.SegmentSerializer
    query_serializer = s.ErrorQuerySerializer

    def get_queryset(self) -> QuerySet:
        return queries.error_segments(self.params())


@extend_schema(summary="The partitions of leadControllerResource, their MASTER and tables")
class Leaders(V1List):
    """The leadControllerResource partitions as the mirror last saw them."""

    serializer_class = s.LeaderPartitionSerializer

    def get_queryset(self) -> QuerySet:
        return read_model.leaders()


@extend_schema(parameters=[s.InstanceQuerySerializer], summary="The cluster's participants")
class Instances(V1List):
    """The cluster's participants (servers, controllers, brokers, minions)."""

    serializer_class = s.InstanceSerializer
    query_serializer = s.InstanceQuerySerializer

    def get_queryset(self) -> QuerySet:
        return queries.instances(self.params())


@extend_schema(parameters=[s.AuditQuerySerializer], summary="The audit log, newest first")
class Audit(V1List):
    """Who did (or tried) what, newest first."""

    serializer_class = s.AuditSerializer
    query_serializer = s.AuditQuerySerializer

    def get_queryset(self) -> QuerySet:
        return queries.audit(self.params())
