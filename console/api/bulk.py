"""Bulk pause and resume (`/api/v1/bulk/pause`, `/api/v1/bulk/resume`): several tables at once,
e.g. every realtime table of a tenant, with a dry run first. Thin: select, preview or apply.

Query (or form) parameters: `tables=a,b` (raw or typed names) or `tenant=<server tag>` (the
mirror's realtime tables of that tenant); `comment` (required unless `dryRun`); `dryRun=true`
(default) answers what would happen, read from ZooKeeper, and changes nothing; `dryRun=false`
pauses or resumes each table in turn through `tables.controller.pause.PauseManager`, each table
audited on its own (`console.audit.audited`, detail `bulk: true`); one table's failure does not
stop the others. `consumeFrom` applies to a resume. An operator action: viewers get 403 (audited).

Answer: `{"action", "dryRun", "tables": [{"table", "pauseFlag", "consumingSegments", "change",
...}]}` where `change` says what the action does (or did) to the table; applied items add
`result` (OK, REJECTED, FAILED), `status` and, on failure, `error`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from console.audit import OperatorAction, audited
from tables.cluster.errors import BadRequest, ServiceError
from tables.controller.pause import PauseManager
from tables.domain.names import InvalidName, raw_table_name, table_name_with_type
from tables.models import MirroredTable

from .pause import _manager, _pause_detail, _resume_detail, count_data_loss
from .pinot import PinotView

MAX_TABLES = 500
_QUERY = [
    OpenApiParameter("tables", str, description="comma-separated table names"),
    OpenApiParameter("tenant", str, description="every realtime table of this server tag"),
    OpenApiParameter("dryRun", bool, description="preview only (default true)"),
    OpenApiParameter("comment", str, description="the reason (required to apply)"),
    OpenApiParameter("consumeFrom", str, description="resume only: lastConsumed|smallest|largest"),
]


def _param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is None and hasattr(request, "data") and isinstance(request.data, dict):
        value = request.data.get(name)
    return None if value is None else str(value)


def select_tables(tables: str | None, tenant: str | None) -> list[str]:
    """The typed names of the tables asked for (400 when none, or both ways, or too many)."""
    if bool(tables) == bool(tenant):
        raise BadRequest("give either tables=a,b or tenant=<server tag>")
    if tables:
        try:
            names = {
                table_name_with_type(raw_table_name(t.strip()))
                for t in tables.split(",")
                if t.strip()
            }
        except InvalidName as exc:
            raise BadRequest(str(exc)) from None
    else:
        if "\x00" in tenant:  # no tag has one, and PostgreSQL refuses NUL in a query
            raise BadRequest("tenant must not contain a NUL character")
        found = MirroredTable.objects.filter(tenant=tenant, table_type="REALTIME")
        names = set(found.values_list("name", flat=True))
    if not names:
        raise BadRequest(f"no realtime table selected (tables={tables!r}, tenant={tenant!r})")
    if len(names) > MAX_TABLES:
        raise BadRequest(f"{len(names)} tables selected; at most {MAX_TABLES} at once")
    return sorted(names)


def _preview(manager: PauseManager, table: str, action: str) -> dict[str, Any]:
    try:
        status = manager.status(table)
    except ServiceError as exc:
        return {"table": table, "change": "none", "error": exc.message, "status": exc.status}
    paused = bool(status["pauseFlag"])
    consuming = list(status["consumingSegments"])  # type: ignore[call-overload]
    if action == "pause":
        change = "none: already paused" if paused else f"pause; commit {len(consuming)} segment(s)"
    else:
        change = "resume; start new consuming segments" if paused else "none: not paused"
    return {"table": table, "pauseFlag": paused, "consumingSegments": consuming, "change": change}


class BulkPauseResume(PinotView):
    permission_classes = [OperatorAction]
    audit_action = "pause"  # set per URL: "pause" or "resume"

    def audit_target(self, request: Request, **_: Any) -> str:
        return _param(request, "tenant") or _param(request, "tables") or ""

    @extend_schema(parameters=_QUERY, request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        action = self.audit_action
        names = select_tables(_param(request, "tables"), _param(request, "tenant"))
        dry_run = (_param(request, "dryRun") or "true").lower() != "false"
        comment = _param(request, "comment") or ""
        manager = _manager()
        items = [_preview(manager, table, action) for table in names]
        if not dry_run:
            if len(comment.strip()) < 3:
                raise BadRequest("a comment (the reason, at least 3 characters) is required")
            items = [self._apply(request, manager, item, comment) for item in items]
        return Response({"action": action, "dryRun": dry_run, "tables": items})

    def _apply(
        self, request: Request, manager: PauseManager, item: dict[str, Any], comment: str
    ) -> dict[str, Any]:
        table = item["table"]
        consume_from = _param(request, "consumeFrom")

        def run() -> Any:
            if self.audit_action == "pause":
                return manager.pause(table, comment)
            return manager.resume(table, consume_from, comment)

        def detail(result: Any) -> dict[str, Any]:
            base = _pause_detail(result) if self.audit_action == "pause" else _resume_detail(result)
            return {**base, "bulk": True}

        try:
            result = audited(request, self.audit_action, table, comment, run, detail)
        except ServiceError as exc:
            outcome = "REJECTED" if exc.status < 500 else "FAILED"
            return {**item, "result": outcome, "status": exc.status, "error": exc.message}
        if self.audit_action == "resume":
            count_data_loss(result)
        details = result.details
        return {
            **item,
            "result": "OK",
            "status": 200,
            "pauseFlag": details["pauseFlag"],
            "consumingSegments": details["consumingSegments"],
        }
