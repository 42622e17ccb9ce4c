"""Pinot's controller REST paths for schemas, tables and segments. Thin: parse, call, shape.

`{t}` accepts the raw table name or `<raw>_REALTIME`. Response shapes are Pinot's. Names are
checked by the services against `tables.domain.names` (400 naming the rule a name breaks, before
anything is read or written); bodies are JSON only (415 otherwise), within the size and depth
limits of `console.api.parsers` (413, 400).
"""

from __future__ import annotations

from django.core.exceptions import SuspiciousOperation
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.audit import reason_of, record, table_target
from tables import build_backoffs, builds
from tables.cluster import context
from tables.cluster.errors import BadRequest, NotFound
from tables.cluster.reads import metadata_as_map
from tables.controller.resources import ResourceManager
from tables.domain.names import raw_table_name
from tables.models import AuditEntry

from .parsers import LimitedJSONParser
from .permissions import ReadAuthenticatedWriteAdmin

# OpenAPI: Pinot's bodies are free-form JSON (schemas, table configs, ZNRecord maps).
JSON = extend_schema(responses=OpenApiTypes.OBJECT)
JSON_BODY = extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
NAMES = {"type": "array", "items": {"type": "string"}}
TYPED_NAMES = {"type": "array", "items": {"type": "object", "additionalProperties": NAMES}}
TAR = extend_schema(
    responses={(200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY)}
)


def _manager() -> ResourceManager:
    return ResourceManager(context.current())


class PinotView(APIView):
    permission_classes = [ReadAuthenticatedWriteAdmin]

    @classmethod
    def as_view(cls, **initkwargs):
        view = super().as_view(**initkwargs)
        # DRF answers unauthenticated calls itself (401 JSON), not the login page redirect.
        view.login_required = False
        return view


class AuditedWrites(PinotView):
    """Audits the outcome of every write (`audit_writes`: HTTP method -> action) to the table or
    schema named in the path or the body: OK, DENIED (403), REJECTED (4xx) or FAILED (5xx).
    Unauthenticated calls (401) have nobody to attribute them to and are not recorded."""

    audit_writes: dict[str, str] = {}
    parser_classes = [LimitedJSONParser]  # Pinot's bodies are JSON: anything else is a 415

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        action = self.audit_writes.get(request.method)
        if action and response.status_code != 401:
            record(
                request,
                action,
                self._target(request, kwargs),
                _outcome(response.status_code),
                reason=reason_of(request),
                status_code=response.status_code,
                detail={"error": response.data["error"]}
                if isinstance(response.data, dict) and "error" in response.data
                else {},
            )
        return response

    @staticmethod
    def _target(request: Request, kwargs: dict) -> str:
        if kwargs.get("table"):
            return table_target(kwargs["table"])
        if kwargs.get("name"):
            return str(kwargs["name"])
        data = _parsed_body(request)
        name = data.get("tableName") or data.get("schemaName") or ""
        return table_target(str(name)) if data.get("tableName") else str(name)


def _parsed_body(request: Request) -> dict:
    """The JSON object of the body; {} when there is none or it was refused (415, 413, 400)."""
    try:
        data = request.data
    except (APIException, SuspiciousOperation):  # Django's RequestDataTooBig is the latter
        return {}
    return data if isinstance(data, dict) else {}


def _outcome(status: int) -> str:
    if status < 300:
        return AuditEntry.Result.OK
    if status == 403:
        return AuditEntry.Result.DENIED
    return AuditEntry.Result.REJECTED if status < 500 else AuditEntry.Result.FAILED


class SchemaList(AuditedWrites):
    audit_writes = {"POST": "add_schema"}

    @extend_schema(operation_id="schemas_list", responses={200: NAMES})
    def get(self, request: Request) -> Response:
        return Response(_manager().list_schemas())

    @JSON_BODY
    def post(self, request: Request) -> Response:
        override = request.query_params.get("override", "true").lower() != "false"
        schema = _manager().add_schema(request.data, override=override)
        return Response(
            {"unrecognizedProperties": {}, "status": f"{schema.name} successfully added"}
        )


class SchemaDetail(AuditedWrites):
    audit_writes = {"DELETE": "delete_schema"}

    @JSON
    def get(self, request: Request, name: str) -> Response:
        return Response(_manager().get_schema(name).raw)

    @JSON
    def delete(self, request: Request, name: str) -> Response:
        _manager().delete_schema(name)
        return Response({"status": f"Schema {name} deleted"})


class TableList(AuditedWrites):
    audit_writes = {"POST": "create_table"}

    @extend_schema(
        operation_id="tables_list",
        parameters=[OpenApiParameter("type", str, description="realtime|offline (any case)")],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request) -> Response:
        # Pinot's `type` filter: this controller has REALTIME tables only, so `offline` lists none.
        kind = request.query_params.get("type") or ""
        if kind.upper() not in ("", "REALTIME", "OFFLINE"):
            raise BadRequest(f"Illegal table type: {kind}")
        tables = [] if kind.upper() == "OFFLINE" else _manager().list_tables()
        return Response({"tables": sorted({raw_table_name(t) for t in tables})})

    @JSON_BODY
    def post(self, request: Request) -> Response:
        config = _manager().add_table(request.data)
        return Response(
            {
                "unrecognizedProperties": {},
                "status": f"Table {config.table_name_with_type} successfully added",
            }
        )


class TableDetail(AuditedWrites):
    audit_writes = {"PUT": "update_table", "DELETE": "delete_table"}

    @JSON
    def get(self, request: Request, table: str) -> Response:
        return Response({"REALTIME": _manager().get_table_config(table).rest})

    @JSON_BODY
    def put(self, request: Request, table: str) -> Response:
        config = _manager().update_table(table, request.data)
        return Response(
            {
                "unrecognizedProperties": {},
                "status": f"Table config updated for {config.table_name_with_type}",
            }
        )

    @JSON
    def delete(self, request: Request, table: str) -> Response:
        deleted = _manager().delete_table(table, deep_store=builds.deep_store())
        build_backoffs.forget_table(deleted)
        return Response({"status": f"Tables: [{deleted}] deleted"})


class TableIdealState(PinotView):
    @JSON
    def get(self, request: Request, table: str) -> Response:
        return Response({"OFFLINE": None, "REALTIME": _manager().idealstate(table)})


class TableExternalView(PinotView):
    @JSON
    def get(self, request: Request, table: str) -> Response:
        return Response({"OFFLINE": None, "REALTIME": _manager().externalview(table)})


class SegmentList(PinotView):
    @extend_schema(operation_id="segments_list", responses={200: TYPED_NAMES})
    def get(self, request: Request, table: str) -> Response:
        return Response([{"REALTIME": _manager().segment_names(table)}])


class SegmentDownload(PinotView):
    """The segment's tar from the deep store: the download URL servers fetch committed segments
    from. Streamed, never read whole into memory."""

    @TAR
    def get(self, request: Request, table: str, segment: str) -> FileResponse:
        manager = _manager()
        config = manager.get_table_config(table)
        segment = manager.segment_name(segment)
        store = builds.deep_store()
        key = store.segment_key(config.raw_table_name, segment)
        if not store.exists(key):
            raise NotFound(
                f"segment {segment} of table {config.raw_table_name} is not in the deep store"
            )
        response = FileResponse(
            store.open_read(key), as_attachment=True, filename=f"{segment}.tar.gz"
        )
        response["Content-Length"] = str(store.size(key))
        return response


class SegmentMetadata(PinotView):
    @JSON
    def get(self, request: Request, table: str, segment: str) -> Response:
        return Response(metadata_as_map(_manager().segment_metadata(table, segment)))
