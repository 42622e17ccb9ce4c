"""The healing manager's history in the console's JSON API (`/api/v1/`): database only.

- `GET /api/v1/tables/{table}/healing[?trigger=schedule|mirror|api][&acted=true][&page=]`:
  the table's runs (`tables.models.HealingRun`), newest first, paged as every `/api/v1` list;
  `acted=true` keeps the runs that repaired something or failed. 404 for a table the mirror does
  not have, 400 for a name no table could have.
- `GET /api/v1/healing/runs/{runId}`: the run `runId` (an `api-…` id from
  `GET /periodictask/run` or the console's "Run healer now"), one result per table it covered:
  `{lastSynced, runId, count, results}`. 404 until the run is recorded (the console polls it), 400
  for an id no run could have.
A run is `{runId, table, trigger, startedAt, finishedAt, durationMs, actionCount, actions,
waiting, skipped, error}`; `actions` are the healing manager's `HealingAction`s as recorded.
Any signed-in account reads.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from tables.cluster.errors import BadRequest, NotFound
from tables.mirror import read_model
from tables.models import HealingRun

from . import v1_queries as queries
from .v1 import TABLE, V1List, V1View
from .v1_serializers import CamelModelSerializer, PagedQuerySerializer

__all__ = ["HealingRunDetail", "HealingRunSerializer", "TableHealing", "runs_of_table"]

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


class HealingActionSerializer(serializers.Serializer):
    """One repair (the healing manager's `HealingAction`), keys as recorded."""

    kind = serializers.CharField(help_text="e.g. commitStoppedAfterStep1, errorReset")
    detail = serializers.CharField(help_text="what was done and why, for an operator")
    partition = serializers.IntegerField(allow_null=True, required=False)
    segment = serializers.CharField(allow_null=True, required=False)
    new_segment = serializers.CharField(allow_null=True, required=False)
    instances = serializers.ListField(child=serializers.CharField(), required=False)
    data_loss = serializers.BooleanField(
        required=False, help_text="the new segment starts past offsets the stream had dropped"
    )


class HealingRunSerializer(CamelModelSerializer):
    duration_ms = serializers.SerializerMethodField(method_name="get_duration_ms")
    actions = HealingActionSerializer(many=True, read_only=True)
    waiting = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="left alone for now, and why"
    )
    skipped = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="parts of the run not done, why"
    )
    error = serializers.CharField(read_only=True, allow_null=True, help_text="null: no error")

    class Meta:
        model = HealingRun
        fields = [
            "run_id",
            "table",
            "trigger",
            "started_at",
            "finished_at",
            "duration_ms",
            "action_count",
            "actions",
            "waiting",
            "skipped",
            "error",
        ]

    @extend_schema_field(OpenApiTypes.INT)
    def get_duration_ms(self, run: HealingRun) -> int:
        return int((run.finished_at - run.started_at).total_seconds() * 1000)

    def to_representation(self, instance: HealingRun) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["error"] = instance.error or None
        return data


class HealingQuerySerializer(PagedQuerySerializer):
    trigger = serializers.ChoiceField(choices=HealingRun.Trigger.values, required=False)
    acted = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: only runs that repaired something or failed; false: only the others",
    )


def runs_of_table(table: str, trigger: str = "", acted: bool | None = None) -> QuerySet:
    """The runs of `table` (with type), newest first, by trigger and whether they acted."""
    rows = HealingRun.objects.filter(table=table)
    if trigger:
        rows = rows.filter(trigger=trigger)
    if acted is not None:
        did = Q(action_count__gt=0) | ~Q(error="")
        rows = rows.filter(did) if acted else rows.exclude(did)
    return rows.order_by("-started_at", "-id")


@extend_schema(
    parameters=[TABLE, HealingQuerySerializer], summary="A table's healing runs, newest first"
)
class TableHealing(V1List):
    """What the healing manager did on a table, run by run, newest first."""

    serializer_class = HealingRunSerializer
    query_serializer = HealingQuerySerializer

    def get_queryset(self) -> QuerySet:
        params = self.params()
        table = queries.table(self.kwargs["table"])
        return runs_of_table(table.name, params.get("trigger") or "", params.get("acted"))


HEALING_RUN_RESPONSE = inline_serializer(
    "HealingRunResponse",
    {
        "lastSynced": serializers.DateTimeField(allow_null=True),
        "runId": serializers.CharField(),
        "count": serializers.IntegerField(),
        "results": HealingRunSerializer(many=True),
    },
)


class HealingRunDetail(V1View):
    """One healing run (one result per table it covered); 404 until it is recorded."""

    serializer_class = HealingRunSerializer

    @extend_schema(
        operation_id="v1_healing_run",
        parameters=[OpenApiParameter("run_id", str, OpenApiParameter.PATH, description="runId")],
        responses={200: HEALING_RUN_RESPONSE},
        summary="A healing run by its id (404 until recorded)",
    )
    def get(self, request: Request, run_id: str) -> Response:
        if not RUN_ID.fullmatch(run_id):
            raise BadRequest(f"{run_id!r} is not a run id (letters, digits, _ . : -, at most 64)")
        runs = list(HealingRun.objects.filter(run_id=run_id).order_by("table"))
        if not runs:
            raise NotFound(f"healing run {run_id} not found (not recorded yet, or pruned)")
        return Response(
            {
                "lastSynced": read_model.last_synced(),
                "runId": run_id,
                "count": len(runs),
                "results": HealingRunSerializer(runs, many=True).data,
            }
        )
