"""Serializers of the console's JSON API (`/api/v1/`): read-only views of the mirror, with
camelCase keys as Pinot's own JSON has them, and the query parameters each list accepts
(validated here, so a bad parameter is a 400 and the OpenAPI schema lists them).

Every response carries `lastSynced`, the mirror's last successful sync: a list is
`{lastSynced, count, page, pageSize, numPages, next, previous, results}` and a single object is
`{lastSynced, result}`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.api.v1_queries import SEGMENT_SORTS
from tables.domain import triage
from tables.mirror import read_model
from tables.mirror.flags import TableFlags, table_flags, under_replicated
from tables.models import (
    AuditEntry,
    Health,
    LeadControllerPartition,
    MirroredInstance,
    MirroredSegment,
    MirroredTable,
    MirrorState,
    PartitionStatus,
)

__all__ = [
    "AuditQuerySerializer",
    "AuditSerializer",
    "ErrorQuerySerializer",
    "InstanceQuerySerializer",
    "InstanceSerializer",
    "LeaderPartitionSerializer",
    "MirrorStateSerializer",
    "PartitionSerializer",
    "SegmentDetailSerializer",
    "SegmentQuerySerializer",
    "SegmentSerializer",
    "TableDetailSerializer",
    "TableQuerySerializer",
    "TableSerializer",
    "WhoAmISerializer",
    "envelope",
]


def camel(name: str) -> str:
    """`max_time_lag_ms` -> `maxTimeLagMs`."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class CamelModelSerializer(serializers.ModelSerializer):
    """A read-only ModelSerializer whose keys are the camelCase of the model's field names."""

    def get_fields(self) -> dict[str, serializers.Field]:
        out: dict[str, serializers.Field] = {}
        for name, field in super().get_fields().items():
            key = camel(name)
            if key != name and field.source is None:
                field.source = name
            field.read_only = True
            out[key] = field
        return out


# --- objects --------------------------------------------------------------------------------------

_TABLE_SUMMARY = [
    "name",
    "raw_name",
    "table_type",
    "tenant",
    "replication",
    "stream_type",
    "topic",
    "pauseless",
    "paused",
    "pause_reason",
    "pause_comment",
    "pause_time",
    "paused_partitions",
    "num_partitions",
    "segment_count",
    "consuming_count",
    "error_replicas",
    "error_segments",
    "missing_download_url",
    "missing_consuming",
    "percent_available",
    "max_records_lag",
    "max_time_lag_ms",
    "rows_per_s",
    "health",
    "health_reason",
    "lead_partition",
]


def _now_ms() -> int:
    return int(timezone.now().timestamp() * 1000)


class FlaggedTableList(serializers.ListSerializer):
    """A page of tables: their flags (`tables.mirror.flags.table_flags`) in two queries."""

    def to_representation(self, data: Any) -> list[Any]:
        tables = list(data.all() if hasattr(data, "all") else data)
        self._context["table_flags"] = table_flags(tables, _now_ms())
        return super().to_representation(tables)


class FlaggedTable(CamelModelSerializer):
    """A table with its flags; lags are null while no partition's lag is known."""

    max_records_lag = serializers.IntegerField(read_only=True, allow_null=True)
    max_time_lag_ms = serializers.IntegerField(read_only=True, allow_null=True)
    lag_known = serializers.SerializerMethodField(method_name="get_lag_known")
    under_replicated_partitions = serializers.SerializerMethodField(
        method_name="get_under_replicated_partitions"
    )
    never_committed = serializers.SerializerMethodField(method_name="get_never_committed")

    class Meta:
        list_serializer_class = FlaggedTableList

    def _flags(self, table: MirroredTable) -> TableFlags:
        found = self.context.get("table_flags", {}).get(table.pk)
        return found if found is not None else table_flags([table], _now_ms())[table.pk]

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_lag_known(self, table: MirroredTable) -> bool:
        return self._flags(table).lag_known

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_under_replicated_partitions(self, table: MirroredTable) -> list[int]:
        """Partitions whose consuming segment has fewer replicas up than the replication."""
        return list(self._flags(table).under_replicated)

    @extend_schema_field(OpenApiTypes.STR)
    def get_never_committed(self, table: MirroredTable) -> str:
        """Why the table is flagged as never committing, or "" when it is not."""
        return self._flags(table).never_committed

    def to_representation(self, instance: MirroredTable) -> dict[str, Any]:
        data = super().to_representation(instance)
        if not data["lagKnown"]:
            data["maxRecordsLag"] = data["maxTimeLagMs"] = None
        return data


_TABLE_FLAGS = ["lag_known", "under_replicated_partitions", "never_committed"]


class TableSerializer(FlaggedTable):
    synced = serializers.DateTimeField(source="last_synced", read_only=True)

    class Meta(FlaggedTable.Meta):
        model = MirroredTable
        fields = [*_TABLE_SUMMARY, *_TABLE_FLAGS, "synced"]


class TableDetailSerializer(FlaggedTable):
    synced = serializers.DateTimeField(source="last_synced", read_only=True)
    config = serializers.DictField(read_only=True, help_text="the table config, REST form")

    class Meta(FlaggedTable.Meta):
        model = MirroredTable
        fields = [
            *_TABLE_SUMMARY,
            *_TABLE_FLAGS,
            "flush_rows",
            "flush_time",
            "config",
            "config_version",
            "idealstate_version",
            "externalview_version",
            "synced",
        ]


class PartitionSerializer(CamelModelSerializer):
    table = serializers.CharField(source="table.name", read_only=True)
    replicas = serializers.DictField(
        read_only=True,
        child=serializers.DictField(),
        help_text="server -> {state, currentOffset, upstreamOffset, recordsLag, phase, "
        "phaseSinceMs, completingSinceMs, ...}",
    )
    records_lag = serializers.IntegerField(read_only=True, allow_null=True)
    time_lag_ms = serializers.IntegerField(read_only=True, allow_null=True)
    replication = serializers.IntegerField(source="table.replication", read_only=True)
    replicas_up = serializers.SerializerMethodField(method_name="get_replicas_up")
    under_replicated = serializers.SerializerMethodField(method_name="get_under_replicated")
    synced = serializers.DateTimeField(
        source="table.last_synced",
        read_only=True,
        help_text="the last sync that confirmed the partition (its table's)",
    )

    @extend_schema_field(OpenApiTypes.INT)
    def get_replicas_up(self, status: PartitionStatus) -> int:
        """Replicas of the consuming segment CONSUMING or ONLINE in the ExternalView."""
        replicas = status.replicas if isinstance(status.replicas, dict) else {}
        return triage.replicas_up(
            {r: str(v.get("state") or "") for r, v in replicas.items() if isinstance(v, dict)}
        )

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_under_replicated(self, status: PartitionStatus) -> bool:
        return under_replicated(status.consuming_segment, status.replicas, status.table.replication)

    def to_representation(self, instance: PartitionStatus) -> dict[str, Any]:
        """Lags are null while unknown (no reporting replica knows its upstream offset)."""
        data = super().to_representation(instance)
        if not triage.lag_known(instance.upstream_offset):
            data["recordsLag"] = data["timeLagMs"] = None
        return data

    class Meta:
        model = PartitionStatus
        fields = [
            "table",
            "partition",
            "consuming_segment",
            "latest_segment",
            "replicas",
            "current_offset",
            "upstream_offset",
            "records_lag",
            "time_lag_ms",
            "rows_per_s",
            "progressed_at",
            "stalled_s",
            "lost_offsets",
            "verdict",
            "verdict_detail",
            "health",
            "replication",
            "replicas_up",
            "under_replicated",
            "synced",
        ]


_SEGMENT_FIELDS = [
    "table",
    "name",
    "partition",
    "sequence",
    "created_ms",
    "ideal_states",
    "external_states",
    "display_state",
    "has_error",
    "all_offline",
    "status",
    "start_offset",
    "end_offset",
    "total_docs",
    "size_bytes",
    "download_url",
    "synced",
]


class SegmentSerializer(CamelModelSerializer):
    table = serializers.CharField(source="table.name", read_only=True)
    ideal_states = serializers.DictField(
        child=serializers.CharField(), read_only=True, help_text="instance -> IdealState state"
    )
    external_states = serializers.DictField(
        child=serializers.CharField(), read_only=True, help_text="instance -> ExternalView state"
    )
    synced = serializers.DateTimeField(
        source="table.last_synced",
        read_only=True,
        help_text="the last sync that confirmed the segment (its table's)",
    )

    class Meta:
        model = MirroredSegment
        fields = _SEGMENT_FIELDS


class SegmentDetailSerializer(SegmentSerializer):
    metadata = serializers.DictField(
        child=serializers.CharField(), read_only=True, help_text="the ZK metadata's simpleFields"
    )

    class Meta:
        model = MirroredSegment
        fields = [
            *_SEGMENT_FIELDS[:-1],
            "crc",
            "start_time_ms",
            "end_time_ms",
            "creation_time_ms",
            "metadata",
            "metadata_version",
            "metadata_mtime_ms",
            "synced",
        ]


class LeaderPartitionSerializer(CamelModelSerializer):
    tables = serializers.ListField(child=serializers.CharField(), read_only=True)
    synced = serializers.DateTimeField(source="last_synced", read_only=True)

    class Meta:
        model = LeadControllerPartition
        fields = ["partition_id", "name", "controller", "tables", "synced"]


class InstanceSerializer(CamelModelSerializer):
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    synced = serializers.DateTimeField(source="last_synced", read_only=True)

    class Meta:
        model = MirroredInstance
        fields = [
            "name",
            "kind",
            "host",
            "port",
            "admin_port",
            "tags",
            "enabled",
            "live",
            "session_id",
            "synced",
        ]


class AuditSerializer(CamelModelSerializer):
    detail = serializers.DictField(read_only=True)

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "username",
            "role",
            "action",
            "target",
            "reason",
            "result",
            "status_code",
            "detail",
            "source",
            "remote_addr",
        ]


class MirrorStateSerializer(CamelModelSerializer):
    age_seconds = serializers.SerializerMethodField(
        method_name="get_age_seconds",
        help_text="seconds since the last successful sync; null if it never synced",
    )
    stale = serializers.SerializerMethodField(
        help_text="true when the mirror never synced or is older than three sync intervals",
    )
    sync_interval_seconds = serializers.SerializerMethodField(
        method_name="get_sync_interval_seconds"
    )

    class Meta:
        model = MirrorState
        fields = [
            "name",
            "last_synced",
            "last_attempt",
            "duration_ms",
            "tables_read",
            "segments_read",
            "error",
            "age_seconds",
            "stale",
            "sync_interval_seconds",
        ]

    def get_age_seconds(self, state: MirrorState) -> float | None:
        return self.context["age_seconds"]

    def get_stale(self, state: MirrorState) -> bool:
        return self.context["stale"]

    def get_sync_interval_seconds(self, state: MirrorState) -> float:
        return self.context["sync_interval_seconds"]


class WhoAmISerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=["viewer", "operator", "admin", "cluster"])
    actions = serializers.ListField(
        child=serializers.CharField(), help_text="the actions this account may perform"
    )


# --- envelopes ----------------------------------------------------------------------------------


def envelope(name: str, inner: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """The `{lastSynced, result}` wrapper of a single object, as a named serializer (for the
    OpenAPI schema)."""
    fields: dict[str, Any] = {
        "lastSynced": serializers.DateTimeField(
            allow_null=True, help_text="the mirror's last successful sync (null: never)"
        ),
        "result": inner(),
    }
    return type(name, (serializers.Serializer,), fields)


# --- query parameters ---------------------------------------------------------------------------


class CsvMultipleChoiceField(serializers.MultipleChoiceField):
    """Several choices, given as `?k=a,b` or `?k=a&k=b`."""

    def get_value(self, dictionary: Any) -> Any:
        if self.field_name not in dictionary:
            return serializers.empty
        values = (
            dictionary.getlist(self.field_name)
            if hasattr(dictionary, "getlist")
            else [dictionary[self.field_name]]
        )
        return [v.strip() for item in values for v in str(item).split(",") if v.strip()]


def _sorts(keys: Iterable[str]) -> list[str]:
    return [k for key in keys for k in (key, f"-{key}")]


class PagedQuerySerializer(serializers.Serializer):
    page = serializers.IntegerField(required=False, min_value=1, help_text="from 1")
    page_size = serializers.IntegerField(
        required=False, min_value=1, max_value=1000, help_text="rows per page (default 50)"
    )


class TableQuerySerializer(PagedQuerySerializer):
    q = serializers.CharField(required=False, help_text="part of the table name")
    health = CsvMultipleChoiceField(
        choices=Health.values, required=False, help_text="one or more (comma-separated)"
    )
    paused = serializers.BooleanField(required=False, allow_null=True, default=None)
    pauseless = serializers.BooleanField(required=False, allow_null=True, default=None)
    tenant = serializers.CharField(required=False)
    type = serializers.ChoiceField(choices=["REALTIME", "OFFLINE"], required=False)
    sort = serializers.ChoiceField(
        choices=_sorts(read_model.TABLE_SORTS),  # the pages' keys too
        required=False,
        default="-health",
        help_text="a key, `-` first for descending: -health is worst first, -lag most behind",
    )


class SegmentQuerySerializer(PagedQuerySerializer):
    state = CsvMultipleChoiceField(
        choices=list(read_model.SEGMENT_STATES),
        required=False,
        help_text="display state(s), comma-separated",
    )
    partition = serializers.IntegerField(required=False, min_value=0)
    status = serializers.CharField(required=False, help_text="ZK metadata status, e.g. DONE")
    q = serializers.CharField(required=False, help_text="part of the segment name")
    sort = serializers.ChoiceField(
        choices=_sorts(SEGMENT_SORTS), required=False, default="partition"
    )


class ErrorQuerySerializer(PagedQuerySerializer):
    table = serializers.CharField(required=False, help_text="raw or with type")


class InstanceQuerySerializer(PagedQuerySerializer):
    kind = serializers.ChoiceField(choices=list(read_model.INSTANCE_KINDS), required=False)
    live = serializers.BooleanField(required=False, allow_null=True, default=None)
    tag = serializers.CharField(required=False)


class AuditQuerySerializer(PagedQuerySerializer):
    user = serializers.CharField(required=False, help_text="part of the username")
    action = serializers.CharField(required=False)
    result = serializers.ChoiceField(choices=AuditEntry.Result.values, required=False)
    source = serializers.CharField(required=False, help_text="page, api or cli")
    target = serializers.CharField(required=False, help_text="part of the target")
    since = serializers.DateTimeField(required=False, help_text="ISO 8601, inclusive")
    until = serializers.DateTimeField(required=False, help_text="ISO 8601, exclusive")
