"""More of Pinot's controller paths for tables and segments (issue 22), in Pinot's JSON shapes.

Thin: parse the query, call a service, answer. The shapes and what the figures mean are the
services' contracts: `tables.cluster.table_info` (size, schema, instances, servers of segments,
CRCs, segment status, enabled state), `tables.controller.table_state` (enable/disable) and
`tables.controller.table_debug` (`/debug/tables/{t}`).

- `type` (`tableType` for segmentsStatus) is Pinot's table type, case-insensitive: REALTIME is the
  table; OFFLINE names a table this controller never has (404); anything else is 400 "Illegal
  table type: <type>". `GET`/`PUT /tables/{t}/state` require it, as Pinot does.
- `PUT /tables/{t}/state?state=enable|disable&type=realtime` takes the admin role and is audited
  (`table_state`) like every write; an unknown state is 400 and changes nothing.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from tables import builds
from tables.cluster import context, table_info
from tables.cluster.errors import BadRequest, NotFound
from tables.cluster.reads import ClusterReader
from tables.controller.table_debug import table_debug_info
from tables.controller.table_state import set_table_enabled
from tables.domain.names import raw_table_name

from .pinot import AuditedWrites, PinotView

REALTIME, OFFLINE = "REALTIME", "OFFLINE"
STATES = ("enable", "disable")


def _param(name: str, description: str, required: bool = False, kind=OpenApiTypes.STR):
    return OpenApiParameter(name, kind, OpenApiParameter.QUERY, required, description)


TYPE = _param("type", "realtime|offline (case-insensitive)")
TYPE_REQUIRED = _param("type", "realtime|offline (case-insensitive)", required=True)


def table_type(value: str | None, required: bool = False, quote: bool = False) -> str | None:
    """REALTIME, OFFLINE or None (not given, and not required); 400 for anything else."""
    if value is None or (value == "" and not required):
        if required:
            raise BadRequest("Illegal table type: null")
        return None
    kind = value.upper()
    if kind not in (REALTIME, OFFLINE):
        shown = f" '{value}'" if quote else f": {value}"  # Pinot words the two paths so
        raise BadRequest(f"Illegal table type{shown}")
    return kind


def _realtime(table: str, kind: str | None, message: str) -> str:
    """The checked name; 404 `message` (with {t} the OFFLINE table) when OFFLINE was asked."""
    if kind == OFFLINE:
        ClusterReader(context.current()).table_name(table)  # 400 for a malformed name first
        raise NotFound(message.format(t=f"{raw_table_name(table)}_OFFLINE"))
    return table


class TableSize(PinotView):
    @extend_schema(responses=OpenApiTypes.OBJECT)  # Pinot's TableSizeDetails
    def get(self, request: Request, table: str) -> Response:
        return Response(table_info.table_size(context.current(), table, builds.deep_store()))


class TableSchema(PinotView):
    @extend_schema(responses=OpenApiTypes.OBJECT)  # the schema JSON
    def get(self, request: Request, table: str) -> Response:
        return Response(table_info.table_schema(context.current(), table))


class TableInstances(PinotView):
    @extend_schema(
        parameters=[_param("type", "broker|server: only that list (case-insensitive)")],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request, table: str) -> Response:
        data = table_info.table_instances(context.current(), table)
        wanted = (request.query_params.get("type") or "").lower()
        if wanted not in ("", "broker"):
            data["brokers"] = []
        if wanted not in ("", "server"):
            data["server"] = []
        return Response(data)


class TableState(AuditedWrites):
    audit_writes = {"PUT": "table_state"}

    @extend_schema(parameters=[TYPE_REQUIRED], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, table: str) -> Response:
        kind = table_type(request.query_params.get("type"), required=True)
        _realtime(table, kind, "Failed to find table: {t}")
        enabled = table_info.table_enabled(context.current(), table)
        return Response({"state": "enabled" if enabled else "disabled"})

    @extend_schema(
        request=None,
        parameters=[TYPE_REQUIRED, _param("state", "enable|disable", required=True)],
        responses=OpenApiTypes.OBJECT,
    )
    def put(self, request: Request, table: str) -> Response:
        kind = table_type(request.query_params.get("type"), required=True)
        state = request.query_params.get("state")
        if (state or "").lower() not in STATES:
            raise BadRequest(f"Unknown state '{state}'")
        _realtime(table, kind, "Table '{t}' does not exist")
        name = set_table_enabled(context.current(), table, state.lower() == "enable")
        return Response({"status": f"Request to {state} table '{name}' is successful"})


class SegmentServers(PinotView):
    @extend_schema(
        parameters=[TYPE, _param("verbose", "false: counts only", kind=OpenApiTypes.BOOL)],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request, table: str) -> Response:
        kind = table_type(request.query_params.get("type"))
        _realtime(table, kind, "Table {t} does not exist")
        name, servers = table_info.server_to_segments(context.current(), table)
        counts = {server: len(segments) for server, segments in servers.items()}
        item: dict = {"tableName": name}
        if request.query_params.get("verbose", "true").lower() != "false":
            item["serverToSegmentsMap"] = servers
        item["serverToSegmentsCountMap"] = counts
        return Response([item])


class SegmentCrc(PinotView):
    @extend_schema(responses={200: {"type": "object", "additionalProperties": {"type": "string"}}})
    def get(self, request: Request, table: str) -> Response:
        return Response(table_info.segment_crcs(context.current(), table))


class SegmentsStatus(PinotView):
    @extend_schema(
        parameters=[_param("tableType", "realtime|offline (case-insensitive)")],
        responses={200: {"type": "array", "items": {"type": "object"}}},
    )
    def get(self, request: Request, table: str) -> Response:
        kind = table_type(request.query_params.get("tableType"), quote=True)
        _realtime(table, kind, "Table not found")
        return Response(table_info.segments_status(context.current(), table))


class TableDebug(PinotView):
    @extend_schema(
        parameters=[TYPE, _param("verbosity", "0: only replicas with a problem", kind=int)],
        responses={200: {"type": "array", "items": {"type": "object"}}},
    )
    def get(self, request: Request, table: str) -> Response:
        kind = table_type(request.query_params.get("type"))
        _realtime(table, kind, "Table '{t}' not found")
        raw = request.query_params.get("verbosity", "0")
        try:
            verbosity = int(raw)
        except ValueError:
            raise BadRequest(f"verbosity must be an integer, not {raw!r}") from None
        return Response(
            table_debug_info(
                context.current(),
                table,
                verbosity,
                settings.SERVER_ADMIN_TIMEOUT_SECONDS,
                builds.deep_store(),
            )
        )
