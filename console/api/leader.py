"""Pinot's `GET /leader/tables` and `GET /leader/tables/{tableName}` (reference §8), read from
ZooKeeper as Pinot's controller does (`PinotLeadControllerRestletResource`): the MASTER of each
`leadControllerResource` partition in the resource's EXTERNALVIEW and the tables it leads.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from tables.cluster import context
from tables.cluster.errors import BadRequest
from tables.cluster.leadership import LeaderEntry, leader_for_table, leader_table_map
from tables.domain.names import table_name_problem

from .pinot import PinotView

__all__ = ["LeaderForTable", "LeaderTables"]


class LeadControllerEntrySerializer(serializers.Serializer):
    leadControllerId = serializers.CharField(
        allow_null=True, help_text="the MASTER participant (Controller_<host>_<port>), or null"
    )
    tableNames = serializers.ListField(
        child=serializers.CharField(), help_text="tables with their type suffix"
    )


class LeadControllerResponseSerializer(serializers.Serializer):
    leadControllerResourceEnabled = serializers.BooleanField()
    leadControllerEntryMap = serializers.DictField(
        child=LeadControllerEntrySerializer(),
        help_text="leadControllerResource_<i> -> entry; empty when the resource is disabled",
    )


EXAMPLE = OpenApiExample(
    "one table",
    value={
        "leadControllerResourceEnabled": True,
        "leadControllerEntryMap": {
            "leadControllerResource_15": {
                "leadControllerId": "Controller_127.0.0.1_9000",
                "tableNames": ["githubEvents_REALTIME"],
            }
        },
    },
)


def _shape(enabled: bool, entries: dict[str, LeaderEntry]) -> dict[str, object]:
    return {
        "leadControllerResourceEnabled": enabled,
        "leadControllerEntryMap": {
            name: {"leadControllerId": entry.leader_id, "tableNames": entry.table_names}
            for name, entry in entries.items()
        },
    }


class LeaderTables(PinotView):
    @extend_schema(
        operation_id="leader_tables",
        tags=["Leader"],
        summary="Lead controller of every table",
        description="Every partition of leadControllerResource, in order, with its MASTER and "
        "the tables it leads.",
        responses={200: LeadControllerResponseSerializer},
        examples=[EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        return Response(_shape(*leader_table_map(context.current())))


class LeaderForTable(PinotView):
    @extend_schema(
        operation_id="leader_table",
        tags=["Leader"],
        summary="Lead controller of one table",
        description="The table's partition of leadControllerResource and its MASTER; the table "
        "need not exist (Pinot hashes the name), but its name must be valid (400 otherwise).",
        parameters=[
            OpenApiParameter(
                "table", OpenApiTypes.STR, OpenApiParameter.PATH, description="raw or with type"
            )
        ],
        responses={200: LeadControllerResponseSerializer},
        examples=[EXAMPLE],
    )
    def get(self, request: Request, table: str) -> Response:
        if problem := table_name_problem(table):
            raise BadRequest(problem)
        return Response(_shape(*leader_for_table(context.current(), table)))
