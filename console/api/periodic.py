"""Pinot's periodic task endpoints (reference round 2 §0.3). Thin: check, queue the Celery task,
shape, audit.

- `GET /periodictask/names`: any signed-in account; the JSON list of the controller periodic tasks
  this project runs (`tables.domain.periods.PERIODIC_TASKS`).
- `GET /periodictask/run?taskname=&tableName=&type=[&comment=]`: an operator action
  (`console.audit.OperatorAction`, `run_periodic_task`): viewers get 403 (audited DENIED, nothing
  queued), anonymous callers 401. Queues one run of the task (`tables.realtime_segment_validation`
  with trigger "api", or `tables.segment_status_checker`) for `tableName` (raw or with type;
  `type` REALTIME or OFFLINE) or, without it, for every table, under a run id `api-<8 hex>` that
  is also the Celery task id, and answers Pinot's `PeriodicTaskInvocationResponse`
  `{"taskId": "api-…", "isSuccessful": true}`. The healing run is then recorded under that id
  (`GET /api/v1/healing/runs/{runId}`). An unknown task or table is 404, a malformed name or type
  400, each with the reason (`{"code", "error"}`) and audited REJECTED; nothing is queued.
  The task is sent once the request's database writes are committed (at once outside a
  transaction); Redis down is 503 with the reason. Pinot's method is GET, which CSRF protection
  does not cover: a call signed in by a browser session must carry the console's
  `X-Console-Page: 1` header (which another site's page cannot add), else 403, audited REJECTED;
  basic-auth and token callers (scripts, Pinot's clients) need nothing more.
"""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response

from console.audit import OperatorAction, audited, reason_of, source_of, table_target
from tables.cluster import context
from tables.cluster.errors import BadRequest, NotFound, ServiceError, Unavailable
from tables.cluster.reads import ClusterReader
from tables.domain.names import raw_table_name, table_name_problem, table_type_of
from tables.domain.periods import (
    PERIODIC_TASKS,
    REALTIME_SEGMENT_VALIDATION,
    SEGMENT_STATUS_CHECKER,
)
from tables.models import HealingRun
from tables.outages import outage_reason
from tables.periodic_runs import new_run_id

from .pinot import NAMES, PinotView

ACTION = "run_periodic_task"
TASKS = {
    REALTIME_SEGMENT_VALIDATION: "tables.realtime_segment_validation",
    SEGMENT_STATUS_CHECKER: "tables.segment_status_checker",
}
TABLE_TYPES = ("REALTIME", "OFFLINE")

RUN_QUERY = [
    OpenApiParameter(
        "taskname", str, required=True, enum=list(PERIODIC_TASKS), description="the task to run"
    ),
    OpenApiParameter("tableName", str, description="raw or with type; empty: every table"),
    OpenApiParameter("type", str, enum=list(TABLE_TYPES), description="the table's type"),
    OpenApiParameter("comment", str, description="the reason, kept in the audit log"),
]
RUN_RESPONSE = inline_serializer(
    "PeriodicTaskInvocationResponse",
    {"taskId": serializers.CharField(), "isSuccessful": serializers.BooleanField()},
)


class CrossSiteRefused(ServiceError):
    status = 403


def _check_not_cross_site(request: Request) -> None:
    session = isinstance(request.successful_authenticator, SessionAuthentication)
    if session and source_of(request) != "page":
        raise CrossSiteRefused(
            "a call signed in by a browser session must send the header X-Console-Page: 1 "
            "(this GET changes state, so it is refused without it: cross-site request)"
        )


class PeriodicTaskNames(PinotView):
    @extend_schema(operation_id="periodictask_names", responses={200: NAMES})
    def get(self, request: Request) -> Response:
        return Response(list(PERIODIC_TASKS))


def _table(name: str, table_type: str) -> str:
    """The existing table `name` (with `table_type`, if given) names, with its type: 400 for a
    malformed name or type, 404 for a table ZooKeeper does not have."""
    wanted = table_type.upper()
    if wanted and wanted not in TABLE_TYPES:
        raise BadRequest(f"type must be REALTIME or OFFLINE, not {table_type!r}")
    if problem := table_name_problem(name):
        raise BadRequest(problem)
    given = table_type_of(name)
    if wanted and given and given != wanted:
        raise BadRequest(f"table {name} is not a {wanted} table name")
    if (wanted or given) == "OFFLINE":
        raw = raw_table_name(name)
        raise NotFound(f"table {raw}_OFFLINE not found (this cluster has REALTIME tables only)")
    return ClusterReader(context.current()).get_table_config(name).table_name_with_type


def _send(task: str, table: str | None, run_id: str) -> None:
    kwargs: dict[str, Any] = {"table": table}
    if task == REALTIME_SEGMENT_VALIDATION:
        kwargs.update(trigger=str(HealingRun.Trigger.API), run_id=run_id)
    try:
        current_app.send_task(TASKS[task], kwargs=kwargs, task_id=run_id)
    except Exception as exc:
        reason = outage_reason(exc)
        if reason is None:
            raise
        raise Unavailable(f"the task was not queued: {reason}") from exc


class PeriodicTaskRun(PinotView):
    permission_classes = [OperatorAction]
    audit_action = ACTION

    def audit_target(self, request: Request, **_: Any) -> str:
        table = request.query_params.get("tableName") or ""
        return table_target(table) if table else request.query_params.get("taskname") or ""

    @extend_schema(
        operation_id="periodictask_run", parameters=RUN_QUERY, responses={200: RUN_RESPONSE}
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        task = params.get("taskname") or ""

        def run() -> tuple[str, str | None]:
            _check_not_cross_site(request)
            if task not in PERIODIC_TASKS:
                raise NotFound(f"Periodic task '{task}' not found.")
            name = params.get("tableName") or ""
            table = _table(name, params.get("type") or "") if name else None
            run_id = new_run_id("api")
            transaction.on_commit(lambda: _send(task, table, run_id))
            return run_id, table

        run_id, _table_name = audited(
            request,
            ACTION,
            self.audit_target(request),
            reason_of(request),
            run,
            lambda done: {"taskName": task, "taskId": done[0], "table": done[1]},
        )
        return Response({"taskId": run_id, "isSuccessful": True})
