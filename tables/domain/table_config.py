"""Pinot table configs: validate the REST JSON, convert to and from the ZooKeeper ZNRecord.

Contract:
- `parse_table_config(data, schema=None, *, for_write=False)` takes the decoded REST JSON of a table
  config and returns a frozen `TableConfig`, or raises `TableConfigError` whose `problems` lists
  every problem found (one sentence each). It applies the structural checks and the rules of
  Pinot's `TableConfigUtils` that the real-time control plane depends on (reference §3.3); the
  time-column check needs `schema`. Whether the stream type is installed here is the service's
  business. Pauseless tables (`streamIngestionConfig.pauselessConsumptionEnabled: true`) are
  accepted with Pinot's rules: with replication > 1 `segmentsConfig.peerSegmentDownloadScheme`
  must be http or https, and only one stream config. `streamIngestionConfig.disasterRecoveryMode`
  must be `ALWAYS` or `DEFAULT` (Pinot's enum; absent means `DEFAULT`,
  `TableConfig.disaster_recovery_mode`). `for_write=True` (a create or update by this control
  plane) adds Pinot's upsert/dedup rules (`TableConfigUtils.validateUpsertAndDedupConfig`): such a
  table's schema must have `primaryKeyColumns` (checked when `schema` is given) and its
  `routing.instanceSelectorType` must be `strictReplicaGroup`. Configs read back from ZooKeeper
  (written by Pinot or by an older version) are not refused for them. `for_write=True` also
  refuses `ingestionConfig.transformConfigs` the segment build cannot run (an unknown function,
  Groovy, a wrong argument count; the destination must be a schema column when `schema` is given),
  naming the column and the function, an `ingestionConfig.filterConfig` it cannot run (naming
  `filterConfig` and the function) and a `complexTypeConfig` it cannot honour
  (`tables.domain.transform_expr`).
- `TableConfig.rest` is the normalised REST form: a deep copy of the input where `tableName` carries
  the type suffix ("myTable" -> "myTable_REALTIME"), `tableType` is upper case and `isDimTable` /
  `isMaterializedView` are booleans (default false). Everything else is kept exactly as written.
- ZooKeeper form (`/CONFIGS/TABLE/<nameWithType>`, Pinot's `TableConfigSerDeUtils`): a ZNRecord
  whose id is the name with type; `tableName` and `tableType` are plain strings, the two flags are
  "true"/"false", and every other top-level key (known or not) is a compact JSON string.
  `table_config_from_znrecord(table_config_to_znrecord(c)).rest == c.rest` always holds.
- `switch_stream_type` re-points a REST dict at another stream type (pure; returns a new dict).
- The stream config checks and readers live in `tables.domain.stream_config`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tables.domain.names import schema_name_problem, table_name_problem
from tables.domain.schema import FieldKind, Schema, schema_transform_problems
from tables.domain.stream_config import (
    LEGACY_STREAM_CONFIGS,
    OFFSET_RESET,
    STREAM_CONFIG_MAPS,
    STREAM_INGESTION,
    STREAM_TYPE,
    TOPIC,
    DisasterRecoveryMode,
    check_streams,
    disaster_recovery_mode,
    is_flag,
    is_timestamp,
    pauseless_enabled,
    raw_stream_maps,
    stream_value,
    truthy,
)
from tables.domain.transform_expr import (
    complex_type_problems,
    filter_config_problems,
    transform_config_problems,
)
from tables.domain.znrecord import ZNRecord

__all__ = [
    "DEDUP_CONFIG", "DEFAULT_OFFSET_RESET", "DEFAULT_TENANT", "DESCRIPTION",
    "DIMENSION_TABLE_CONFIG", "FIELD_CONFIG_LIST", "INGESTION_CONFIG",
    "INSTANCE_ASSIGNMENT_CONFIG_MAP", "INSTANCE_PARTITIONS_MAP", "IS_DIM_TABLE",
    "IS_MATERIALIZED_VIEW", "METADATA", "OFFLINE", "QUERY", "QUOTA", "REALTIME", "ROUTING",
    "SECTION_KEYS", "SEGMENTS_CONFIG", "SEGMENT_ASSIGNMENT_CONFIG_MAP", "TABLE_INDEX_CONFIG",
    "TABLE_NAME", "TABLE_SAMPLERS", "TABLE_TYPE", "TABLE_TYPES", "TAGS", "TASK", "TENANTS",
    "TIER_CONFIGS", "TUNER_CONFIGS", "UPSERT_CONFIG", "DisasterRecoveryMode", "TableConfig",
    "TableConfigError",
    "parse_table_config", "switch_stream_type", "table_config_from_znrecord",
    "table_config_to_znrecord",
]  # fmt: skip

TABLE_NAME = "tableName"
TABLE_TYPE = "tableType"
SEGMENTS_CONFIG = "segmentsConfig"
TENANTS = "tenants"
TABLE_INDEX_CONFIG = "tableIndexConfig"
METADATA = "metadata"
IS_DIM_TABLE = "isDimTable"
IS_MATERIALIZED_VIEW = "isMaterializedView"
QUOTA = "quota"
TASK = "task"
ROUTING = "routing"
QUERY = "query"
INSTANCE_ASSIGNMENT_CONFIG_MAP = "instanceAssignmentConfigMap"
FIELD_CONFIG_LIST = "fieldConfigList"
UPSERT_CONFIG = "upsertConfig"
DEDUP_CONFIG = "dedupConfig"
DIMENSION_TABLE_CONFIG = "dimensionTableConfig"
INGESTION_CONFIG = "ingestionConfig"
TIER_CONFIGS = "tierConfigs"
TUNER_CONFIGS = "tunerConfigs"
INSTANCE_PARTITIONS_MAP = "instancePartitionsMap"
SEGMENT_ASSIGNMENT_CONFIG_MAP = "segmentAssignmentConfigMap"
TABLE_SAMPLERS = "tableSamplers"
DESCRIPTION = "description"
TAGS = "tags"

#: Every top-level key of Pinot's TableConfig (REST object = ZNRecord simple fields).
SECTION_KEYS: tuple[str, ...] = (
    TABLE_NAME, TABLE_TYPE, SEGMENTS_CONFIG, TENANTS, TABLE_INDEX_CONFIG, METADATA, IS_DIM_TABLE,
    IS_MATERIALIZED_VIEW, QUOTA, TASK, ROUTING, QUERY, INSTANCE_ASSIGNMENT_CONFIG_MAP,
    FIELD_CONFIG_LIST, UPSERT_CONFIG, DEDUP_CONFIG, DIMENSION_TABLE_CONFIG, INGESTION_CONFIG,
    TIER_CONFIGS, TUNER_CONFIGS, INSTANCE_PARTITIONS_MAP, SEGMENT_ASSIGNMENT_CONFIG_MAP,
    TABLE_SAMPLERS, DESCRIPTION, TAGS,
)  # fmt: skip

REALTIME = "REALTIME"
OFFLINE = "OFFLINE"
TABLE_TYPES: tuple[str, ...] = (REALTIME, OFFLINE)
DEFAULT_TENANT = "DefaultTenant"
DEFAULT_OFFSET_RESET = "largest"

_OBJECT_SECTIONS = (
    SEGMENTS_CONFIG, TENANTS, TABLE_INDEX_CONFIG, METADATA, QUOTA, TASK, ROUTING, QUERY,
    INSTANCE_ASSIGNMENT_CONFIG_MAP, UPSERT_CONFIG, DEDUP_CONFIG, DIMENSION_TABLE_CONFIG,
    INGESTION_CONFIG, INSTANCE_PARTITIONS_MAP, SEGMENT_ASSIGNMENT_CONFIG_MAP,
)  # fmt: skip
_LIST_SECTIONS = (FIELD_CONFIG_LIST, TIER_CONFIGS, TUNER_CONFIGS, TABLE_SAMPLERS)
_PLAIN_FIELDS = (TABLE_NAME, TABLE_TYPE)
_FLAG_FIELDS = (IS_DIM_TABLE, IS_MATERIALIZED_VIEW)

_PAUSELESS_PEER_MESSAGE = (
    "Must have a valid peerSegmentDownloadScheme set in validation config for pauseless consumption"
)
_NO_EXTRA: Mapping[str, str] = MappingProxyType({})


class TableConfigError(ValueError):
    """A table config that Pinot would refuse; `problems` holds every reason, one sentence each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def _section(rest: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = rest.get(key)
    return value if isinstance(value, dict) else {}


def _show(value: object) -> str:
    return f"'{value}'" if isinstance(value, str) else json.dumps(value)


def _positive_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.isdecimal():
        return int(value) or None
    return None


def _split_type_suffix(name: str) -> tuple[str, str | None]:
    for table_type in TABLE_TYPES:
        suffix = f"_{table_type}"
        if name.endswith(suffix):
            return name[: -len(suffix)], table_type
    return name, None


def _replication(rest: Mapping[str, Any], table_type: str | None) -> int | None:
    """Pinot's TableConfig.getReplication(): REALTIME tables prefer replicasPerPartition."""
    segments = _section(rest, SEGMENTS_CONFIG)
    if table_type == REALTIME and segments.get("replicasPerPartition") is not None:
        return _positive_int(segments["replicasPerPartition"])
    if segments.get("replication") is None:
        return 1
    return _positive_int(segments["replication"])


@dataclass(frozen=True)
class TableConfig:
    """A validated table config; `rest` is its normalised REST form (see the module docstring)."""

    rest: dict[str, Any]

    @property
    def table_name_with_type(self) -> str:
        return str(self.rest[TABLE_NAME])

    @property
    def raw_table_name(self) -> str:
        return _split_type_suffix(self.table_name_with_type)[0]

    @property
    def table_type(self) -> str:
        return str(self.rest[TABLE_TYPE])

    @property
    def replication(self) -> int:
        return _replication(self.rest, self.table_type) or 1

    @property
    def server_tenant(self) -> str:
        server = _section(self.rest, TENANTS).get("server")
        return server if isinstance(server, str) and server else DEFAULT_TENANT

    @property
    def server_tag(self) -> str:
        return f"{self.server_tenant}_REALTIME"

    @property
    def stream_configs(self) -> list[dict[str, str]]:
        """Every stream config map (values as strings); empty for OFFLINE tables."""
        result = []
        ingestion = _section(self.rest, INGESTION_CONFIG)
        for raw in raw_stream_maps(ingestion, _section(self.rest, TABLE_INDEX_CONFIG)):
            if isinstance(raw, dict):
                items = ((str(k), stream_value(v)) for k, v in raw.items())
                result.append({k: v for k, v in items if v is not None})
        return result

    @property
    def stream_config(self) -> dict[str, str]:
        """The first stream config map; empty for OFFLINE tables."""
        configs = self.stream_configs
        return configs[0] if configs else {}

    @property
    def stream_type(self) -> str | None:
        return self.stream_config.get(STREAM_TYPE)

    def stream_property(self, prop: str) -> str | None:
        """`stream.<streamType>.<prop>` of the first stream config."""
        return self.stream_config.get(f"stream.{self.stream_type}.{prop}")

    @property
    def topic_name(self) -> str | None:
        return self.stream_property(TOPIC)

    @property
    def offset_reset(self) -> str:
        """smallest / largest / a period, lower-cased; an ISO timestamp as written."""
        value = self.stream_property(OFFSET_RESET)
        if value is None:
            return DEFAULT_OFFSET_RESET
        return value if is_timestamp(value) else value.lower()

    @property
    def pauseless_enabled(self) -> bool:
        return pauseless_enabled(_section(self.rest, INGESTION_CONFIG))

    @property
    def disaster_recovery_mode(self) -> DisasterRecoveryMode:
        """`streamIngestionConfig.disasterRecoveryMode`, DEFAULT when not set."""
        return disaster_recovery_mode(_section(self.rest, INGESTION_CONFIG))

    @property
    def peer_segment_download_scheme(self) -> str | None:
        scheme = _section(self.rest, SEGMENTS_CONFIG).get("peerSegmentDownloadScheme")
        return scheme if isinstance(scheme, str) else None

    @property
    def time_column_name(self) -> str | None:
        column = _section(self.rest, SEGMENTS_CONFIG).get("timeColumnName")
        return column if isinstance(column, str) and column else None

    @property
    def schema_name(self) -> str:
        name = _section(self.rest, SEGMENTS_CONFIG).get("schemaName")
        return name if isinstance(name, str) and name else self.raw_table_name

    @property
    def is_upsert(self) -> bool:
        upsert = self.rest.get(UPSERT_CONFIG)
        return isinstance(upsert, dict) and str(upsert.get("mode") or "FULL").upper() != "NONE"

    @property
    def is_dedup(self) -> bool:
        dedup = self.rest.get(DEDUP_CONFIG)
        return isinstance(dedup, dict) and dedup.get("dedupEnabled", True) not in (False, "false")


def _check_identity(rest: dict[str, Any], problems: list[str]) -> tuple[str | None, str | None]:
    """Check tableName / tableType; return (upper-case type, name with type) where usable."""
    table_type: str | None = None
    raw_type = rest.get(TABLE_TYPE)
    if raw_type is None:
        problems.append("tableType is required and must be REALTIME or OFFLINE")
    elif not isinstance(raw_type, str) or raw_type.upper() not in TABLE_TYPES:
        problems.append(f"tableType must be REALTIME or OFFLINE, got {_show(raw_type)}")
    else:
        table_type = raw_type.upper()

    name = rest.get(TABLE_NAME)
    if not isinstance(name, str) or not name.strip():
        problems.append("tableName is required and must be a non-empty string")
        return table_type, None
    raw_name, suffix = _split_type_suffix(name)
    if not raw_name:
        problems.append(f"table name '{name}' has nothing before its type suffix")
        return table_type, None
    if suffix is not None and table_type is not None and suffix != table_type:
        problems.append(f"table name '{name}' ends with '_{suffix}' but tableType is {table_type}")
    with_type = f"{raw_name}_{table_type or suffix or REALTIME}"
    problem = table_name_problem(name)  # Pinot's rules and where names go (tables.domain.names)
    if problem:
        problems.append(problem)
    schema_name = _section(rest, SEGMENTS_CONFIG).get("schemaName")
    if schema_name not in (None, ""):
        problem = schema_name_problem(schema_name)
        if problem:
            problems.append(f"segmentsConfig.schemaName: {problem}")
    return table_type, with_type


def _check_shapes(rest: dict[str, Any], problems: list[str]) -> None:
    for key in _OBJECT_SECTIONS:
        if rest.get(key) is not None and not isinstance(rest[key], dict):
            problems.append(f"{key} must be a JSON object")
    for key in _LIST_SECTIONS:
        if rest.get(key) is not None and not isinstance(rest[key], list):
            problems.append(f"{key} must be a JSON list")
    for key in _FLAG_FIELDS:
        if not is_flag(rest.get(key)):
            problems.append(f"{key} must be true or false")


def _valid_peer_scheme(scheme: object) -> bool:
    return isinstance(scheme, str) and scheme.lower() in ("http", "https")


def _check_replication(rest: dict[str, Any], table_type: str | None, problems: list[str]) -> None:
    segments = _section(rest, SEGMENTS_CONFIG)
    for key in ("replication", "replicasPerPartition"):
        value = segments.get(key)
        if value is not None and _positive_int(value) is None:
            problems.append(f"segmentsConfig.{key} must be a positive integer, got {_show(value)}")
    scheme = segments.get("peerSegmentDownloadScheme")
    if scheme is None:
        return
    if not _valid_peer_scheme(scheme):
        problems.append(
            f"Invalid value {_show(scheme)} for peerSegmentDownloadScheme. "
            "Must be one of http or https"
        )
    replication = _replication(rest, table_type)
    if replication is not None and replication < 2:
        problems.append("peerSegmentDownloadScheme can't be used when replication is < 2")


def _check_streams(rest: dict[str, Any], problems: list[str]) -> None:
    """The stream configs (stream_config.check_streams), then Pinot's pauseless peer-download
    rule (replication > 1 needs peerSegmentDownloadScheme http or https)."""
    ingestion = _section(rest, INGESTION_CONFIG)
    problems.extend(
        check_streams(
            ingestion, _section(rest, TABLE_INDEX_CONFIG), is_upsert=TableConfig(rest).is_upsert
        )
    )
    replication = _replication(rest, REALTIME)
    if pauseless_enabled(ingestion) and replication is not None and replication > 1:
        scheme = _section(rest, SEGMENTS_CONFIG).get("peerSegmentDownloadScheme")
        if not _valid_peer_scheme(scheme):
            problems.append(_PAUSELESS_PEER_MESSAGE)


def _check_time_column(rest: dict[str, Any], schema: Schema | None, problems: list[str]) -> None:
    column = _section(rest, SEGMENTS_CONFIG).get("timeColumnName")
    if column is None:
        return
    if not isinstance(column, str) or not column:
        problems.append("segmentsConfig.timeColumnName must be a non-empty string")
        return
    if schema is None:
        return
    spec = schema.field(column)
    if spec is None:
        problems.append(f"time column '{column}' is not a column of schema '{schema.name}'")
    elif spec.kind not in (FieldKind.DATE_TIME, FieldKind.TIME):
        problems.append(
            f"time column '{column}' must be a dateTime field of schema '{schema.name}', "
            f"not a {spec.kind.value} field"
        )


_UPSERT_DEDUP_NEEDS_KEYS = "Upsert/Dedup table must have primary key columns in the schema"
_UPSERT_DEDUP_NEEDS_ROUTING = (
    "Upsert/Dedup table must use strict replica-group (i.e. strictReplicaGroup) based routing"
)


def _check_upsert_dedup(rest: dict[str, Any], schema: Schema | None, problems: list[str]) -> None:
    """Pinot's rules for an upsert or dedup table (module docstring)."""
    config = TableConfig(rest)
    if not (config.is_upsert or config.is_dedup):
        return
    if schema is not None and not schema.primary_key_columns:
        problems.append(_UPSERT_DEDUP_NEEDS_KEYS)
    routing = rest.get("routing")
    selector = routing.get("instanceSelectorType") if isinstance(routing, dict) else None
    if selector != "strictReplicaGroup":
        problems.append(_UPSERT_DEDUP_NEEDS_ROUTING)


def _check_transforms(rest: dict[str, Any], schema: Schema | None, problems: list[str]) -> None:
    ingestion = rest.get(INGESTION_CONFIG)
    if not isinstance(ingestion, Mapping):
        ingestion = {}
    configs = ingestion.get("transformConfigs")
    columns = schema.column_names() if schema is not None else None
    problems.extend(transform_config_problems(configs, columns))
    if schema is not None:  # the schema's own transformFunctions, where the table sets none
        entries = configs if isinstance(configs, list) else []
        own = [c.get("columnName") for c in entries if isinstance(c, Mapping)]
        problems.extend(schema_transform_problems(schema, [c for c in own if isinstance(c, str)]))
    problems.extend(filter_config_problems(ingestion.get("filterConfig")))
    problems.extend(complex_type_problems(ingestion.get("complexTypeConfig")))


def parse_table_config(
    data: object, schema: Schema | None = None, *, for_write: bool = False
) -> TableConfig:
    """Validate a table config's REST JSON and return it normalised; raise TableConfigError.

    `for_write`: the config is about to be created or updated by this control plane (the
    upsert/dedup rules apply; see the module docstring)."""
    if not isinstance(data, dict):
        raise TableConfigError(["The table config must be a JSON object"])
    rest: dict[str, Any] = copy.deepcopy(data)
    problems: list[str] = []
    table_type, name_with_type = _check_identity(rest, problems)
    _check_shapes(rest, problems)
    _check_replication(rest, table_type, problems)
    if table_type == REALTIME:
        _check_streams(rest, problems)
    _check_time_column(rest, schema, problems)
    if for_write:
        _check_upsert_dedup(rest, schema, problems)
        _check_transforms(rest, schema, problems)
    if problems:
        raise TableConfigError(problems)
    rest[TABLE_NAME] = name_with_type
    rest[TABLE_TYPE] = table_type
    for flag in _FLAG_FIELDS:
        rest[flag] = truthy(rest.get(flag))
    return TableConfig(rest=rest)


def table_config_to_znrecord(config: TableConfig) -> ZNRecord:
    """The ZNRecord stored at `/CONFIGS/TABLE/<tableNameWithType>`."""
    simple: dict[str, str] = {}
    for key, value in config.rest.items():
        if key in _PLAIN_FIELDS:
            simple[key] = str(value)
        elif key in _FLAG_FIELDS:
            simple[key] = "true" if truthy(value) else "false"
        else:
            simple[key] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for flag in _FLAG_FIELDS:
        simple.setdefault(flag, "false")
    return ZNRecord(id=config.table_name_with_type, simple_fields=simple)


def table_config_from_znrecord(record: ZNRecord) -> TableConfig:
    """Read a table config back from its ZNRecord; raise TableConfigError if it is not valid."""
    rest: dict[str, Any] = {}
    problems: list[str] = []
    for key, text in record.simple_fields.items():
        if key in _PLAIN_FIELDS:
            rest[key] = text
        elif key in _FLAG_FIELDS:
            rest[key] = truthy(text)
        else:
            try:
                rest[key] = json.loads(text)
            except json.JSONDecodeError:
                problems.append(f"ZNRecord '{record.id}' field '{key}' is not valid JSON")
    if problems:
        raise TableConfigError(problems)
    return parse_table_config(rest)


def _switch_map(
    stream_map: Mapping[str, Any], stream_type: str, topic: str | None, extra: Mapping[str, str]
) -> dict[str, Any]:
    old_type = stream_map.get(STREAM_TYPE)
    old_prefix = f"stream.{old_type}." if isinstance(old_type, str) and old_type else None
    carried: dict[str, Any] = {}
    switched: dict[str, Any] = {}
    for key, value in stream_map.items():
        if old_prefix and old_type != stream_type and key.startswith(old_prefix):
            carried[key[len(old_prefix) :]] = value
        else:
            switched[key] = value
    switched[STREAM_TYPE] = stream_type
    new_topic = topic if topic is not None else carried.get(TOPIC)
    if new_topic is not None:
        switched[f"stream.{stream_type}.{TOPIC}"] = new_topic
    if OFFSET_RESET in carried:
        switched[f"stream.{stream_type}.{OFFSET_RESET}"] = carried[OFFSET_RESET]
    switched.update(extra)
    return switched


def switch_stream_type(
    config_rest: Mapping[str, Any],
    stream_type: str,
    topic: str,
    extra: Mapping[str, str] = _NO_EXTRA,
) -> dict[str, Any]:
    """A copy of `config_rest` whose stream configs use `stream_type` instead.

    In every stream config (streamConfigMaps or legacy streamConfigs) `streamType` becomes
    `stream_type`, the old type's `stream.<old>.*` keys are dropped except the offset reset, which
    moves to `stream.<new>.consumer.prop.auto.offset.reset`; the first config's topic becomes
    `topic` (later ones keep their own topic under the new prefix); `extra` is applied last.
    """
    rest = copy.deepcopy(dict(config_rest))
    sic = _section(rest, INGESTION_CONFIG).get(STREAM_INGESTION)
    if isinstance(sic, dict) and isinstance(sic.get(STREAM_CONFIG_MAPS), list):
        sic[STREAM_CONFIG_MAPS] = [
            _switch_map(m, stream_type, topic if i == 0 else None, extra)
            if isinstance(m, dict)
            else m
            for i, m in enumerate(sic[STREAM_CONFIG_MAPS])
        ]
    index_config = _section(rest, TABLE_INDEX_CONFIG)
    legacy = index_config.get(LEGACY_STREAM_CONFIGS)
    if isinstance(legacy, dict) and legacy:
        index_config[LEGACY_STREAM_CONFIGS] = _switch_map(legacy, stream_type, topic, extra)
    return rest
