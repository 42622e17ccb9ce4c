"""tables.domain.table_config: Pinot's real example configs, the §3.3 rules, the ZNRecord form."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tables.domain.schema import Schema, parse_schema
from tables.domain.table_config import (
    SECTION_KEYS,
    DisasterRecoveryMode,
    TableConfig,
    TableConfigError,
    parse_table_config,
    switch_stream_type,
    table_config_from_znrecord,
    table_config_to_znrecord,
)
from tables.domain.znrecord import ZNRecord
from tests import envdefaults

FIXTURES = envdefaults.PINOT_FIXTURES
CONFIG_FILES = sorted(FIXTURES.glob("*_realtime_table_config.json"))
FLUSH = "realtime.segment.flush."
PEER_MESSAGE = (
    "Must have a valid peerSegmentDownloadScheme set in validation config for pauseless consumption"
)

# Reference §3.1, verbatim.
EXAMPLE: dict[str, Any] = {
    "tableName": "myTable",
    "tableType": "REALTIME",
    "tenants": {"broker": "DefaultTenant", "server": "DefaultTenant"},
    "segmentsConfig": {
        "timeColumnName": "ts",
        "retentionTimeUnit": "DAYS",
        "retentionTimeValue": "7",
        "replication": "2",
        "peerSegmentDownloadScheme": "http",
        "completionConfig": {"completionMode": "DEFAULT"},
    },
    "tableIndexConfig": {
        "segmentPartitionConfig": {
            "columnPartitionMap": {"id": {"functionName": "Murmur", "numPartitions": 4}}
        }
    },
    "ingestionConfig": {
        "streamIngestionConfig": {
            "streamConfigMaps": [
                {
                    "streamType": "kafka",
                    "stream.kafka.topic.name": "events",
                    "stream.kafka.broker.list": "kafka:9092",
                    "stream.kafka.consumer.factory.class.name": (
                        "org.apache.pinot.plugin.stream.kafka30.KafkaConsumerFactory"
                    ),
                    "stream.kafka.decoder.class.name": (
                        "org.apache.pinot.plugin.stream.kafka.KafkaJSONMessageDecoder"
                    ),
                    "stream.kafka.consumer.prop.auto.offset.reset": "smallest",
                    "realtime.segment.flush.threshold.rows": "0",
                    "realtime.segment.flush.threshold.time": "6h",
                    "realtime.segment.flush.threshold.segment.size": "200M",
                }
            ],
            "pauselessConsumptionEnabled": True,
            "disasterRecoveryMode": "DEFAULT",
        }
    },
    "upsertConfig": {"mode": "FULL"},
    "routing": {"instanceSelectorType": "strictReplicaGroup"},
    "metadata": {"customConfigs": {}},
}


def example(**top: Any) -> dict[str, Any]:
    data = copy.deepcopy(EXAMPLE)
    data.update(top)
    return data


def segments(data: dict[str, Any]) -> dict[str, Any]:
    return data["segmentsConfig"]


def stream(data: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return data["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"][index]


def simple(**stream_keys: str) -> dict[str, Any]:
    """A replication-1, non-pauseless, non-upsert config whose stream map gets `stream_keys`."""
    data = example()
    del data["upsertConfig"]
    del segments(data)["peerSegmentDownloadScheme"]
    segments(data)["replication"] = "1"
    data["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = False
    stream(data).update(stream_keys)
    return data


def problems_of(data: object, schema: Schema | None = None) -> list[str]:
    with pytest.raises(TableConfigError) as info:
        parse_table_config(data, schema)
    return info.value.problems


def fixture_pair(path: Path) -> tuple[dict[str, Any], Schema]:
    name = path.name.removesuffix("_realtime_table_config.json")
    schema = parse_schema(json.loads((FIXTURES / f"{name}_schema.json").read_text()))
    return json.loads(path.read_text()), schema


def assert_round_trip(config: TableConfig) -> None:
    record = table_config_to_znrecord(config)
    assert table_config_from_znrecord(record).rest == config.rest
    assert table_config_from_znrecord(ZNRecord.from_json(record.to_json())).rest == config.rest


# ------------------------------------------------------------------------------ real fixtures


def test_fixture_configs_are_present() -> None:
    assert len(CONFIG_FILES) >= 5


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
def test_fixture_config_parses_and_round_trips(path: Path) -> None:
    data, schema = fixture_pair(path)
    config = parse_table_config(data, schema)
    raw_name = data["tableName"]
    assert config.table_name_with_type == f"{raw_name}_REALTIME"
    assert config.raw_table_name == raw_name
    assert config.schema_name == schema.name == raw_name
    assert config.table_type == "REALTIME"
    assert config.replication == 1
    assert config.server_tenant == "DefaultTenant"
    assert config.server_tag == "DefaultTenant_REALTIME"
    assert config.stream_type == "kafka"
    assert config.topic_name == stream(data)["stream.kafka.topic.name"]
    assert not config.pauseless_enabled
    assert config.peer_segment_download_scheme is None
    assert config.time_column_name == data["segmentsConfig"]["timeColumnName"]
    assert config.is_upsert == (raw_name == "upsertMeetupRsvp")
    assert not config.is_dedup
    # nothing but the normalisation changed
    expected = dict(data, tableName=f"{raw_name}_REALTIME", isDimTable=False)
    expected["isMaterializedView"] = False
    assert config.rest == expected
    assert_round_trip(config)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
def test_fixture_config_switched_to_redis(path: Path) -> None:
    data, schema = fixture_pair(path)
    topic = stream(data)["stream.kafka.topic.name"]
    switched = switch_stream_type(data, "redis", topic)
    assert data == json.loads(path.read_text()), "switch_stream_type must not modify its input"
    config = parse_table_config(switched, schema)
    assert config.stream_type == "redis"
    assert config.topic_name == topic
    assert not any(key.startswith("stream.kafka.") for key in config.stream_config)
    original_reset = stream(data).get("stream.kafka.consumer.prop.auto.offset.reset", "largest")
    assert config.offset_reset == original_reset
    flush_keys = {k: v for k, v in stream(data).items() if k.startswith("realtime.")}
    assert {k: v for k, v in config.stream_config.items() if k.startswith("realtime.")} == (
        flush_keys
    )
    assert_round_trip(config)


def test_fixture_offset_resets() -> None:
    offsets = {
        path.name.removesuffix("_realtime_table_config.json"): parse_table_config(
            *fixture_pair(path)
        ).offset_reset
        for path in CONFIG_FILES
    }
    assert offsets["airlineStats"] == "smallest"
    assert offsets["meetupRsvp"] == "largest"
    assert offsets["upsertMeetupRsvp"] == "largest"  # not set: Pinot's default


# --------------------------------------------------------------------------- §3.1 and basics


def test_reference_example_parses() -> None:
    config = parse_table_config(EXAMPLE)
    assert config.table_name_with_type == "myTable_REALTIME"
    assert config.raw_table_name == "myTable"
    assert config.replication == 2
    assert config.pauseless_enabled
    assert config.peer_segment_download_scheme == "http"
    assert config.is_upsert and not config.is_dedup
    assert config.stream_type == "kafka"
    assert config.topic_name == "events"
    assert config.offset_reset == "smallest"
    assert config.time_column_name == "ts"
    assert len(config.stream_configs) == 1
    assert EXAMPLE["tableName"] == "myTable", "the input must not be modified"
    assert_round_trip(config)


def test_name_with_type_is_kept_and_type_normalised() -> None:
    config = parse_table_config(example(tableName="myTable_REALTIME", tableType="realtime"))
    assert config.rest["tableName"] == "myTable_REALTIME"
    assert config.rest["tableType"] == "REALTIME"


def test_replicas_per_partition_wins_for_realtime() -> None:
    data = example()
    segments(data)["replicasPerPartition"] = 3
    assert parse_table_config(data).replication == 3
    data = simple()
    del segments(data)["replication"]
    assert parse_table_config(data).replication == 1


def test_znrecord_layout() -> None:
    data = example(description="demo", customTopLevel={"kept": [1, 2]})
    data["tenants"]["server"] = "Gold"
    config = parse_table_config(data)
    assert config.server_tag == "Gold_REALTIME"
    record = table_config_to_znrecord(config)
    assert record.id == "myTable_REALTIME"
    fields = record.simple_fields
    assert fields["tableName"] == "myTable_REALTIME"
    assert fields["tableType"] == "REALTIME"
    assert fields["isDimTable"] == "false"
    assert fields["isMaterializedView"] == "false"
    assert fields["segmentsConfig"] == json.dumps(data["segmentsConfig"], separators=(",", ":"))
    assert json.loads(fields["ingestionConfig"]) == data["ingestionConfig"]
    assert fields["description"] == '"demo"'
    assert json.loads(fields["customTopLevel"]) == {"kept": [1, 2]}
    assert record.map_fields == {} and record.list_fields == {}
    assert_round_trip(config)


def test_dim_table_flag_round_trips() -> None:
    config = parse_table_config(example(isDimTable=True))
    assert table_config_to_znrecord(config).simple_fields["isDimTable"] == "true"
    assert_round_trip(config)


def test_section_keys_cover_reference() -> None:
    assert len(SECTION_KEYS) == 25
    assert {"tableName", "tierConfigs", "tags", "isMaterializedView"} <= set(SECTION_KEYS)


def test_from_znrecord_bad_json() -> None:
    record = table_config_to_znrecord(parse_table_config(EXAMPLE))
    record.simple_fields["tenants"] = "{nope"
    with pytest.raises(TableConfigError) as info:
        table_config_from_znrecord(record)
    assert info.value.problems == ["ZNRecord 'myTable_REALTIME' field 'tenants' is not valid JSON"]


def test_offline_needs_no_stream() -> None:
    data = simple()
    data["tableType"] = "OFFLINE"
    del data["ingestionConfig"]
    config = parse_table_config(data)
    assert config.table_name_with_type == "myTable_OFFLINE"
    assert config.stream_configs == [] and config.stream_type is None
    assert_round_trip(config)


def test_unknown_stream_type_is_not_a_domain_error() -> None:
    data = switch_stream_type(EXAMPLE, "nosuchstream", "t")
    assert parse_table_config(data).stream_type == "nosuchstream"


# ---------------------------------------------------------------------------- switch helper


def test_switch_legacy_stream_configs() -> None:
    data = simple()
    legacy = data["ingestionConfig"].pop("streamIngestionConfig")["streamConfigMaps"][0]
    data["tableIndexConfig"]["streamConfigs"] = legacy
    assert parse_table_config(data).topic_name == "events"
    switched = switch_stream_type(data, "redis", "events", {"stream.redis.url": "redis://x"})
    config = parse_table_config(switched)
    assert config.stream_config == {
        "streamType": "redis",
        "realtime.segment.flush.threshold.rows": "0",
        "realtime.segment.flush.threshold.time": "6h",
        "realtime.segment.flush.threshold.segment.size": "200M",
        "stream.redis.topic.name": "events",
        "stream.redis.consumer.prop.auto.offset.reset": "smallest",
        "stream.redis.url": "redis://x",
    }
    assert "streamIngestionConfig" not in config.rest["ingestionConfig"]


def test_switch_multi_stream_keeps_later_topics() -> None:
    data = simple()
    second = dict(stream(data), **{"stream.kafka.topic.name": "other"})
    data["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"].append(second)
    config = parse_table_config(switch_stream_type(data, "redis", "first"))
    assert [c["stream.redis.topic.name"] for c in config.stream_configs] == ["first", "other"]


# ------------------------------------------------------------------------------ §3.3 and more


@pytest.mark.parametrize("data", [None, [], "x", 1])
def test_not_an_object(data: object) -> None:
    assert problems_of(data) == ["The table config must be a JSON object"]


@pytest.mark.parametrize("name", [None, "", "   ", 5])
def test_table_name_required(name: object) -> None:
    assert problems_of(example(tableName=name)) == [
        "tableName is required and must be a non-empty string"
    ]


def test_table_name_double_underscore() -> None:
    assert problems_of(example(tableName="a__b")) == [
        "table name 'a__b' must not contain '__' (it separates the parts of segment names)"
    ]
    assert problems_of(example(tableName="a_")) == [
        "table name 'a__REALTIME' must not contain '__' (it separates the parts of segment names)"
    ]


def test_table_name_whitespace() -> None:
    assert problems_of(example(tableName="my table")) == [
        "table name 'my table' has whitespace ' ' at position 2: only ASCII letters, digits, "
        "'_' and '-' are allowed"
    ]


def test_table_name_suffix_disagrees_with_type() -> None:
    assert problems_of(example(tableName="myTable_OFFLINE")) == [
        "table name 'myTable_OFFLINE' ends with '_OFFLINE' but tableType is REALTIME"
    ]


@pytest.mark.parametrize(
    ("table_type", "problem"),
    [
        ("HYBRID", "tableType must be REALTIME or OFFLINE, got 'HYBRID'"),
        (3, "tableType must be REALTIME or OFFLINE, got 3"),
        (None, "tableType is required and must be REALTIME or OFFLINE"),
    ],
)
def test_table_type(table_type: object, problem: str) -> None:
    assert problems_of(example(tableType=table_type)) == [problem]


@pytest.mark.parametrize("value", ["0", 0, -1, "two", "1.5", True, 2.0])
def test_replication_positive_integer(value: object) -> None:
    data = simple()
    segments(data)["replication"] = value
    shown = f"'{value}'" if isinstance(value, str) else json.dumps(value)
    assert problems_of(data) == [
        f"segmentsConfig.replication must be a positive integer, got {shown}"
    ]


def test_replicas_per_partition_positive_integer() -> None:
    data = simple()
    segments(data)["replicasPerPartition"] = "none"
    assert problems_of(data) == [
        "segmentsConfig.replicasPerPartition must be a positive integer, got 'none'"
    ]


def test_realtime_needs_a_stream() -> None:
    data = simple()
    del data["ingestionConfig"]
    assert problems_of(data) == [
        "A REALTIME table must have at least one stream config "
        "(ingestionConfig.streamIngestionConfig.streamConfigMaps)"
    ]
    data = simple()
    data["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"] = []
    assert len(problems_of(data)) == 1


def test_stream_maps_and_legacy_not_both() -> None:
    data = simple()
    data["tableIndexConfig"]["streamConfigs"] = dict(stream(data))
    assert problems_of(data) == [
        "Stream configs must be given either in ingestionConfig.streamIngestionConfig."
        "streamConfigMaps or in the legacy tableIndexConfig.streamConfigs, not both"
    ]


def test_stream_type_required() -> None:
    data = simple()
    del stream(data)["streamType"]
    assert problems_of(data) == ["stream config #1 has no streamType"]


def test_topic_required() -> None:
    data = simple()
    del stream(data)["stream.kafka.topic.name"]
    assert problems_of(data) == ["stream config #1 has no 'stream.kafka.topic.name'"]


def test_stream_values_must_be_scalars() -> None:
    data = simple(**{"stream.kafka.broker.list": ["a", "b"]})  # type: ignore[arg-type]
    assert problems_of(data) == [
        "stream config #1: 'stream.kafka.broker.list' must be a string, number or boolean"
    ]


def add_stream(data: dict[str, Any], **changes: str) -> dict[str, Any]:
    maps = data["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"]
    maps.append({**maps[0], "stream.kafka.topic.name": "second", **changes})
    return data


def test_multi_stream_allowed_when_consistent() -> None:
    config = parse_table_config(add_stream(simple()))
    assert [c["stream.kafka.topic.name"] for c in config.stream_configs] == ["events", "second"]
    assert config.topic_name == "events"


def test_multi_stream_types_differ() -> None:
    data = add_stream(simple(), streamType="redis", **{"stream.redis.topic.name": "r"})
    assert problems_of(data) == [
        "All stream configs must have the same streamType, found 'kafka', 'redis'"
    ]


def test_multi_stream_flush_differs() -> None:
    data = add_stream(simple(), **{FLUSH + "threshold.time": "5h"})
    assert problems_of(data) == [
        "Segment flush parameters must be consistent across all stream configs"
    ]
    # the same value written differently is consistent
    data = add_stream(simple(), **{FLUSH + "threshold.time": "21600000"})
    parse_table_config(data)


def test_multi_stream_duplicate_topic() -> None:
    data = add_stream(simple(), **{"stream.kafka.topic.name": "events"})
    assert problems_of(data) == ["Topic 'events' appears in more than one stream config"]


def test_multi_stream_with_pauseless() -> None:
    data = add_stream(simple())
    data["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    assert problems_of(data) == [
        "Multiple stream configs are not supported with pauseless consumption enabled"
    ]


def test_multi_stream_with_upsert() -> None:
    data = add_stream(simple())
    data["upsertConfig"] = {"mode": "PARTIAL"}
    assert problems_of(data) == ["Multiple stream configs are not supported for upsert table"]
    data["upsertConfig"] = {"mode": "NONE"}
    assert not parse_table_config(data).is_upsert


@pytest.mark.parametrize("scheme", ["ftp", "", "hdfs"])
def test_peer_scheme_must_be_http(scheme: str) -> None:
    data = example()
    segments(data)["peerSegmentDownloadScheme"] = scheme
    assert problems_of(data) == [
        f"Invalid value '{scheme}' for peerSegmentDownloadScheme. Must be one of http or https",
        PEER_MESSAGE,
    ]


def test_peer_scheme_case_insensitive() -> None:
    data = example()
    segments(data)["peerSegmentDownloadScheme"] = "HTTPS"
    assert parse_table_config(data).peer_segment_download_scheme == "HTTPS"


def test_peer_scheme_needs_replication_two() -> None:
    data = simple()
    segments(data)["peerSegmentDownloadScheme"] = "http"
    assert problems_of(data) == ["peerSegmentDownloadScheme can't be used when replication is < 2"]


def test_pauseless_replicated_needs_peer_scheme() -> None:
    data = example()
    del segments(data)["peerSegmentDownloadScheme"]
    assert problems_of(data) == [PEER_MESSAGE]
    # replication 1 pauseless without a scheme is allowed (Pinot only warns)
    segments(data)["replication"] = "1"
    assert parse_table_config(data).pauseless_enabled


def test_pauseless_is_accepted_for_write_with_pinots_rules() -> None:
    data = example()
    config = parse_table_config(data, for_write=True)
    assert config.pauseless_enabled
    assert config.peer_segment_download_scheme == "http"
    # Pinot's own pauseless rule still applies to writes
    del segments(data)["peerSegmentDownloadScheme"]
    with pytest.raises(TableConfigError) as info:
        parse_table_config(data, for_write=True)
    assert info.value.problems == [PEER_MESSAGE]


@pytest.mark.parametrize("mode", ["ALWAYS", "DEFAULT"])
def test_disaster_recovery_mode_is_read(mode: str) -> None:
    data = example()
    data["ingestionConfig"]["streamIngestionConfig"]["disasterRecoveryMode"] = mode
    assert parse_table_config(data, for_write=True).disaster_recovery_mode == mode
    assert parse_table_config(data).disaster_recovery_mode is DisasterRecoveryMode(mode)


@pytest.mark.parametrize("written", ["absent", "null"])
def test_disaster_recovery_mode_defaults_to_default(written: str) -> None:
    data = example()
    sic = data["ingestionConfig"]["streamIngestionConfig"]
    if written == "absent":
        del sic["disasterRecoveryMode"]
    else:
        sic["disasterRecoveryMode"] = None
    assert parse_table_config(data).disaster_recovery_mode is DisasterRecoveryMode.DEFAULT


@pytest.mark.parametrize(
    ("value", "shown"),
    [("NEVER", "'NEVER'"), ("always", "'always'"), ("", "''"), (1, "1"), (True, "true")],
)
def test_disaster_recovery_mode_must_be_pinots_enum(value: object, shown: str) -> None:
    data = example()
    data["ingestionConfig"]["streamIngestionConfig"]["disasterRecoveryMode"] = value
    assert problems_of(data) == [
        f"streamIngestionConfig.disasterRecoveryMode must be one of [ALWAYS, DEFAULT], got {shown}"
    ]
    with pytest.raises(TableConfigError):
        parse_table_config(data, for_write=True)


def test_a_stored_pauseless_config_still_reads_back_as_pauseless() -> None:
    # A table made by a real Pinot is read from ZooKeeper and shown as it is.
    record = table_config_to_znrecord(parse_table_config(EXAMPLE))
    assert table_config_from_znrecord(record).pauseless_enabled


def test_pauseless_flag_must_be_boolean() -> None:
    data = simple()
    data["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = "yes"
    assert problems_of(data) == [
        "streamIngestionConfig.pauselessConsumptionEnabled must be true or false"
    ]


COUNT = "a non-negative integer"
TIME = "a positive period like '6h', '30m', '1h30m' or milliseconds"
SIZE = "a non-negative size like '200M', '100K' or a number of bytes"


@pytest.mark.parametrize(
    ("key", "value", "what"),
    [
        ("threshold.rows", "-1", COUNT),
        ("threshold.rows", "many", COUNT),
        ("threshold.size", "-5", COUNT),
        ("threshold.segment.rows", "-1", COUNT),
        ("threshold.segment.rows", "1e6", COUNT),
        ("threshold.time", "soon", TIME),
        ("threshold.time", "-1h", TIME),
        ("threshold.time", "0", TIME),
        ("threshold.segment.size", "-1", SIZE),
        ("threshold.segment.size", "big", SIZE),
        ("desired.size", "-100K", SIZE),
        ("threshold.variance.fraction", "0.6", "a number from 0 to 0.5"),
        ("threshold.variance.fraction", "-0.1", "a number from 0 to 0.5"),
        ("threshold.variance.fraction", "lots", "a number from 0 to 0.5"),
        ("autotune.initialRows", "-10", COUNT),
    ],
)
def test_bad_flush_threshold(key: str, value: str, what: str) -> None:
    data = simple(**{FLUSH + key: value})
    assert f"stream config #1: '{FLUSH + key}' must be {what}, got '{value}'" in problems_of(data)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("threshold.time", "6h"),
        ("threshold.time", "30m"),
        ("threshold.time", "1h30m"),
        ("threshold.time", "3600000"),
        ("threshold.time", "2d"),
        ("threshold.segment.size", "100K"),
        ("threshold.segment.size", "1048576"),
        ("threshold.variance.fraction", "0.5"),
        ("autotune.initialRows", "100000"),
    ],
)
def test_good_flush_threshold(key: str, value: str) -> None:
    parse_table_config(simple(**{FLUSH + key: value}))


def test_only_one_flush_threshold() -> None:
    data = simple(**{FLUSH + "threshold.rows": "1000"})
    assert problems_of(data) == [
        "stream config #1: only one of flush threshold rows (1000), segment rows (None) "
        "and segment size (209715200) can be set"
    ]


@pytest.mark.parametrize("value", ["earliest", "latest", "", "yesterday", "12"])
def test_bad_offset_reset(value: str) -> None:
    data = simple(**{"stream.kafka.consumer.prop.auto.offset.reset": value})
    assert problems_of(data) == [
        "stream config #1: offset reset must be smallest, largest, a period like '2d' or an "
        f"ISO-8601 timestamp, got '{value}'"
    ]


@pytest.mark.parametrize(
    ("value", "normalised"),
    [
        ("smallest", "smallest"),
        ("LARGEST", "largest"),
        ("2d", "2d"),
        ("1H30M", "1h30m"),
        ("2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"),
        ("2024-01-01T00:00:00.000+00:00", "2024-01-01T00:00:00.000+00:00"),
    ],
)
def test_good_offset_reset(value: str, normalised: str) -> None:
    data = simple(**{"stream.kafka.consumer.prop.auto.offset.reset": value})
    assert parse_table_config(data).offset_reset == normalised


def test_offset_reset_default_is_largest() -> None:
    data = simple()
    del stream(data)["stream.kafka.consumer.prop.auto.offset.reset"]
    assert parse_table_config(data).offset_reset == "largest"


def test_time_column_must_be_in_schema() -> None:
    _, schema = fixture_pair(FIXTURES / "meetupRsvp_realtime_table_config.json")
    data = simple()
    assert problems_of(data, schema) == ["time column 'ts' is not a column of schema 'meetupRsvp'"]
    segments(data)["timeColumnName"] = "event_time"
    assert problems_of(data, schema) == [
        "time column 'event_time' must be a dateTime field of schema 'meetupRsvp', "
        "not a DIMENSION field"
    ]
    segments(data)["timeColumnName"] = "mtime"
    assert parse_table_config(data, schema).time_column_name == "mtime"
    # without a schema the column cannot be checked
    segments(data)["timeColumnName"] = "ts"
    assert parse_table_config(data).time_column_name == "ts"


def test_section_shapes() -> None:
    data = example(tenants=[], fieldConfigList={})
    assert problems_of(data) == [
        "tenants must be a JSON object",
        "fieldConfigList must be a JSON list",
    ]


def test_every_problem_is_reported() -> None:
    data = example(tableName="bad__name")
    segments(data)["replication"] = "0"
    segments(data)["peerSegmentDownloadScheme"] = "ftp"
    add_stream(data, streamType="redis")
    stream(data)[FLUSH + "threshold.time"] = "whenever"
    stream(data)["stream.kafka.consumer.prop.auto.offset.reset"] = "earliest"
    problems = problems_of(data)
    expected = [
        "table name 'bad__name' must not contain '__' (it separates the parts of segment names)",
        "segmentsConfig.replication must be a positive integer, got '0'",
        "Invalid value 'ftp' for peerSegmentDownloadScheme. Must be one of http or https",
        f"stream config #1: '{FLUSH}threshold.time' must be {TIME}, got 'whenever'",
        "stream config #1: offset reset must be smallest, largest, a period like '2d' or an "
        "ISO-8601 timestamp, got 'earliest'",
        "stream config #2 has no 'stream.redis.topic.name'",
        "Multiple stream configs are not supported with pauseless consumption enabled",
        "Multiple stream configs are not supported for upsert table",
        "All stream configs must have the same streamType, found 'kafka', 'redis'",
    ]
    for problem in expected:
        assert problem in problems
    assert len(problems) == len(expected)
    with pytest.raises(TableConfigError) as info:
        parse_table_config(data)
    assert str(info.value) == "; ".join(problems)
    assert isinstance(info.value, ValueError)


def _fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def test_upsert_and_dedup_tables_need_primary_keys_and_strict_replica_group_routing():
    load = _fixture
    schema = parse_schema({**load("githubEvents_schema.json")})
    keyed = parse_schema({**load("githubEvents_schema.json"), "primaryKeyColumns": ["id"]})
    base = load("githubEvents_realtime_table_config.json")
    routing = {"instanceSelectorType": "strictReplicaGroup"}
    for section in ({"upsertConfig": {"mode": "FULL"}}, {"dedupConfig": {"dedupEnabled": True}}):
        with pytest.raises(TableConfigError) as caught:
            parse_table_config({**base, **section}, schema, for_write=True)
        assert caught.value.problems == [
            "Upsert/Dedup table must have primary key columns in the schema",
            "Upsert/Dedup table must use strict replica-group (i.e. strictReplicaGroup) based "
            "routing",
        ]
        accepted = parse_table_config(
            {**base, **section, "routing": routing}, keyed, for_write=True
        )
        assert accepted.is_upsert or accepted.is_dedup
        # Read back from ZooKeeper (written by Pinot or an older version): not refused.
        assert parse_table_config({**base, **section}, schema).raw_table_name == "githubEvents"
    # Neither upsert nor dedup ("mode": "NONE", dedup off): no such rule.
    for section in ({"upsertConfig": {"mode": "NONE"}}, {"dedupConfig": {"dedupEnabled": False}}):
        parse_table_config({**base, **section}, schema, for_write=True)
