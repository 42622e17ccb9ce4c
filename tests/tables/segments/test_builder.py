"""Segment builds end to end: Pinot's 800 githubEvents rows, staged or re-read from Redis."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

import pytest

from tables.segments import builder
from tables.segments.builder import (
    BuildError,
    BuildRequest,
    DataLoss,
    build_from_staging,
    build_from_stream,
    read_segment,
    write_staging,
)
from tables.segments.segment_format import read_segment_files, unpack_creation_meta
from tables.streams.redis_streams import RedisTopicAdmin
from tests.envdefaults import PINOT_FIXTURES

pytestmark = pytest.mark.spark

SEGMENT = "githubEvents__1__0__20210721T0600Z"
CREATED_MS = 1626847260123
SCHEMA = json.loads((PINOT_FIXTURES / "githubEvents_schema.json").read_text())
CONFIG = json.loads((PINOT_FIXTURES / "githubEvents_realtime_table_config.json").read_text())
LINES = [
    line.encode()
    for line in (PINOT_FIXTURES / "githubEvents_2021-07-21-few-hours.json")
    .read_text(encoding="utf-8")
    .splitlines()
    if line.strip()
]
ROWS = [json.loads(line) for line in LINES]


def request(start=1, end=801, schema=SCHEMA, config=CONFIG, name=SEGMENT):
    return BuildRequest("githubEvents", name, schema, config, start, end, CREATED_MS)


def millis(created_at: str) -> int:
    when = dt.datetime.strptime(created_at, "%Y-%m-%dT%H:%M:%S%z")
    return int(when.timestamp()) * 1000


@pytest.fixture(scope="module")
def staging(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("staging") / "rows.parquet"
    assert write_staging(enumerate(LINES, start=1), path) == 800
    return path


@pytest.fixture(scope="module")
def built(spark, staging, tmp_path_factory):
    return build_from_staging(spark, request(), staging.as_uri(), tmp_path_factory.mktemp("one"))


def test_the_segment_holds_every_row_with_pinot_metadata(built):
    assert len(ROWS) == 800
    assert built.total_docs == 800 and built.incomplete_rows == 0 and built.problems == []
    times = [millis(r["created_at"]) for r in ROWS]
    assert (built.start_time_ms, built.end_time_ms) == (min(times), max(times))
    assert (built.min_offset, built.max_offset) == (1, 800)
    md = built.metadata
    assert md["segment.name"] == SEGMENT and md["segment.table.name"] == "githubEvents"
    assert md["segment.total.docs"] == "800"
    assert md["segment.start.time"] == str(min(times))
    assert md["segment.end.time"] == str(max(times))
    assert md["segment.time.unit"] == "MILLISECONDS"
    assert md["segment.realtime.startOffset"] == "1" and md["segment.realtime.endOffset"] == "801"
    assert md["segment.creation.time"] == str(CREATED_MS)
    assert md["segment.index.version"] == "parquet-v1"

    types = [r["type"] for r in ROWS]
    ids = [r["id"] for r in ROWS]
    assert md["column.type.cardinality"] == str(len(set(types)))
    assert (md["column.type.minValue"], md["column.type.maxValue"]) == (min(types), max(types))
    assert md["column.id.cardinality"] == str(len(set(ids)))
    assert (md["column.id.minValue"], md["column.id.maxValue"]) == (min(ids), max(ids))
    assert md["column.id.dataType"] == "STRING" and md["column.id.isSingleValues"] == "true"
    assert md["column.created_at_timestamp.dataType"] == "TIMESTAMP"
    assert md["column.created_at_timestamp.minValue"] == str(min(times))
    assert md["column.created_at_timestamp.cardinality"] == str(len(set(times)))
    assert md["column.created_at_timestamp.hasNullValue"] == "false"
    assert all(md[f"column.{c}.totalDocs"] == "800" for c in ("id", "type", "created_at"))


def test_reading_back_gives_the_input_in_time_order(built):
    metadata, table = read_segment(built.tar_path)
    assert metadata == built.metadata
    assert table.column_names == ["id", "type", "created_at", "created_at_timestamp", "__offset"]
    assert str(table.schema.field("created_at_timestamp").type) == "timestamp[us, tz=UTC]"
    expected = sorted(
        ((millis(r["created_at"]), offset, r) for offset, r in enumerate(ROWS, start=1)),
        key=lambda item: item[:2],
    )
    got = table.to_pylist()
    assert [row["__offset"] for row in got] == [offset for _, offset, _ in expected]
    for row, (ms, _, source) in zip(got, expected, strict=True):
        assert (row["id"], row["type"], row["created_at"]) == (
            source["id"],
            source["type"],
            source["created_at"],
        )
        assert int(row["created_at_timestamp"].timestamp() * 1000) == ms
    files = read_segment_files(built.tar_path)
    assert unpack_creation_meta(files["creation.meta"]) == (built.crc, CREATED_MS)
    assert built.size_bytes == built.tar_path.stat().st_size and built.data_crc == built.crc


def test_two_builds_of_the_same_rows_are_byte_identical(spark, built, staging, tmp_path):
    again = build_from_staging(spark, request(), str(staging), tmp_path)
    assert again.crc == built.crc
    assert again.tar_path.read_bytes() == built.tar_path.read_bytes()
    assert again.metadata == built.metadata


def test_bad_values_are_kept_nulled_and_counted(spark, tmp_path):
    lines = list(LINES[:20])
    lines[3] = lines[3].replace(ROWS[3]["created_at"].encode(), b"not a date")
    lines[7] = b"{broken json"
    staged = tmp_path / "rows.parquet"
    write_staging(enumerate(lines, start=101), staged)
    result = build_from_staging(spark, request(101, 121), str(staged), tmp_path / "out")
    assert result.total_docs == 20 and result.incomplete_rows == 2
    assert result.incomplete_by_column == {"(message)": 1, "created_at_timestamp": 1}
    assert result.problems == [
        "offset 104: column created_at_timestamp: cannot convert 'not a date'",
        "offset 108: column (message): not a JSON object '{broken json'",
    ]
    _, table = read_segment(result.tar_path)
    rows = {r["__offset"]: r for r in table.to_pylist()}
    # Pinot's NullValueTransformer (pinot-segment-local .../recordtransformer/
    # NullValueTransformer.java): a null takes the column's default (STRING "null"); the time
    # column's default (TIMESTAMP 0) is outside the valid range, so it takes "now": here the
    # segment's creation time (tables.segments.null_values), which the time range then includes.
    assert rows[104]["created_at"] == "not a date"
    assert rows[104]["created_at_timestamp"].timestamp() * 1000 == CREATED_MS
    assert rows[108]["id"] == "null" and rows[108]["created_at"] == "null"
    assert rows[108]["created_at_timestamp"].timestamp() * 1000 == CREATED_MS
    assert [r["__offset"] for r in table.to_pylist()][-2:] == [104, 108]  # the latest times
    assert result.end_time_ms == CREATED_MS
    assert result.metadata["column.created_at_timestamp.hasNullValue"] == "false"


def test_a_synthetic_schema_with_an_int_given_text(spark, tmp_path):
    schema = {
        "schemaName": "synthetic",
        "dimensionFieldSpecs": [
            {"name": "n", "dataType": "INT"},
            {"name": "__key", "dataType": "LONG"},
        ],
        "dateTimeFieldSpecs": [
            {
                "name": "ts",
                "dataType": "LONG",
                "format": "1:SECONDS:EPOCH",
                "granularity": "1:SECONDS",
            }
        ],
    }
    config = copy.deepcopy(CONFIG)
    config["tableName"] = "synthetic"
    config["segmentsConfig"]["timeColumnName"] = "ts"
    del config["ingestionConfig"]["transformConfigs"]
    values = [{"__key": 0, "n": 5, "ts": 20, "extra": 1}, {"__key": 1, "n": "abc", "ts": 10}]
    staged = tmp_path / "rows.parquet"
    write_staging([(i + 1, json.dumps(v).encode()) for i, v in enumerate(values)], staged)
    result = build_from_staging(
        spark,
        request(1, 3, schema, config, "synthetic__0__0__20210721T0600Z"),
        str(staged),
        tmp_path,
    )
    assert result.incomplete_by_column == {"n": 1}
    assert result.problems == ["offset 2: column n: cannot convert 'abc'"]
    assert (result.start_time_ms, result.end_time_ms) == (10_000, 20_000)
    _, table = read_segment(result.tar_path)
    assert table.column_names == ["n", "__key", "ts", "__offset"]  # "extra" is not a column
    assert table.to_pylist() == [  # Pinot: a dimension INT's null is Integer.MIN_VALUE
        {"n": -(2**31), "__key": 1, "ts": 10, "__offset": 2},
        {"n": 5, "__key": 0, "ts": 20, "__offset": 1},
    ]


def test_configuration_problems_fail_before_reading(spark, tmp_path):
    config = copy.deepcopy(CONFIG)
    config["ingestionConfig"]["transformConfigs"][0]["transformFunction"] = "Groovy({x}, x)"
    missing = str(tmp_path / "does-not-exist.parquet")
    with pytest.raises(BuildError, match="unsupported transform function"):
        build_from_staging(spark, request(config=config), missing, tmp_path)
    with pytest.raises(BuildError, match="invalid offset range"):
        build_from_staging(spark, request(5, 4), missing, tmp_path)


def test_an_empty_range_builds_an_empty_segment(spark, tmp_path):
    staged = tmp_path / "empty.parquet"
    assert write_staging([], staged) == 0
    result = build_from_staging(spark, request(5, 5), str(staged), tmp_path / "out")
    assert result.total_docs == 0 and (result.min_offset, result.max_offset) == (None, None)
    assert (result.start_time_ms, result.end_time_ms) == (CREATED_MS, CREATED_MS)
    metadata, table = read_segment(result.tar_path)
    assert table.num_rows == 0 and table.column_names[-1] == "__offset"
    assert metadata["column.id.cardinality"] == "0" and "column.id.minValue" not in metadata


def test_offsets_must_be_unique_and_inside_the_range(spark, tmp_path):
    staged = tmp_path / "dup.parquet"
    write_staging([(1, LINES[0]), (1, LINES[1])], staged)
    with pytest.raises(BuildError, match="repeats offsets"):
        build_from_staging(spark, request(1, 3), str(staged), tmp_path / "a")
    write_staging([(1, LINES[0]), (9, LINES[1])], staged)
    with pytest.raises(BuildError, match="outside"):
        build_from_staging(spark, request(1, 3), str(staged), tmp_path / "b")


@pytest.mark.redis
def test_reingesting_from_redis_equals_the_staged_build(
    spark, built, redis_client, redis_prefix, settings, tmp_path, monkeypatch
):
    prefix = f"{redis_prefix}stream:"
    admin = RedisTopicAdmin(redis_client, key_prefix=prefix)
    admin.create_topic("githubEvents", 2)
    assert admin.produce("githubEvents", 1, LINES, now_ms=CREATED_MS) == list(range(1, 801))
    admin.produce("githubEvents", 0, LINES[:5], now_ms=CREATED_MS)  # another partition
    monkeypatch.setattr(builder, "_STREAM_CHUNK", 300)  # three Spark tasks, one client each

    stream = {
        "streamType": "redis",
        "stream.redis.topic.name": "githubEvents",
        "stream.redis.key.prefix": prefix,
    }
    url = settings.REDIS_URL

    result = build_from_stream(spark, request(), stream, 1, tmp_path / "re", url)
    assert result.total_docs == 800 and result.crc == built.crc
    assert result.tar_path.read_bytes() == built.tar_path.read_bytes()

    with pytest.raises(BuildError, match="not all produced yet"):
        build_from_stream(spark, request(1, 802), stream, 1, tmp_path / "late", url)

    admin.trim_before("githubEvents", 1, 101)
    with pytest.raises(DataLoss, match="first available offset is 101") as lost:
        build_from_stream(spark, request(), stream, 1, tmp_path / "lost", url)
    assert lost.value.first_available_offset == 101 and lost.value.missing == 100

    partial = build_from_stream(
        spark, request(), stream, 1, tmp_path / "partial", url, allow_data_loss=True
    )
    assert partial.total_docs == 700 and (partial.min_offset, partial.max_offset) == (101, 800)


def test_a_batch_builds_each_segment_as_its_build_alone(spark, built, staging, tmp_path):
    """Several segments in one Spark job: each equals its build alone (same tar bytes); a bad
    item, an empty one and another schema do not change the others."""
    lines = list(LINES[:30])
    lines[4] = b"{broken json"
    bad_rows = tmp_path / "bad.parquet"
    write_staging(enumerate(lines, start=1), bad_rows)
    empty = tmp_path / "empty.parquet"
    write_staging([], empty)
    dup = tmp_path / "dup.parquet"
    write_staging([(1, LINES[0]), (1, LINES[1])], dup)
    other = copy.deepcopy(SCHEMA)
    other["schemaName"] = "githubEventsNarrow"
    other["dimensionFieldSpecs"] = other["dimensionFieldSpecs"][:1]
    config = copy.deepcopy(CONFIG)
    config["segmentsConfig"]["schemaName"] = "githubEventsNarrow"
    items = [
        (request(), staging),
        (request(1, 31, name="githubEvents__2__0__20210721T0600Z"), bad_rows),
        (request(5, 5, name="githubEvents__3__0__20210721T0600Z"), empty),
        (request(1, 3, name="githubEvents__4__0__20210721T0600Z"), dup),
        (request(schema=other, config=config, name="narrow__1__0__20210721T0600Z"), staging),
        (request(name="githubEvents__5__0__20210721T0600Z"), tmp_path / "missing.parquet"),
    ]
    batch = [
        builder.BatchItem(req, str(path), tmp_path / f"batch-{i}")
        for i, (req, path) in enumerate(items)
    ]
    told: list[tuple[int, object, bool]] = []  # (index, outcome, its tar there when told)

    def on_result(index: int, outcome: object) -> None:
        tar = getattr(outcome, "tar_path", None)
        told.append((index, outcome, tar is None or tar.exists()))

    outcomes = builder.build_batch(spark, batch, tmp_path / "scratch", on_result=on_result)
    # Each item's outcome was told once, as soon as it was known, its tar already written.
    assert sorted((i, o) for i, o, _ in told) == sorted(enumerate(outcomes), key=lambda p: p[0])
    assert all(ready for _, _, ready in told)
    assert isinstance(outcomes[3], BuildError) and "repeats offsets" in str(outcomes[3])
    assert isinstance(outcomes[5], BuildError) and "missing.parquet" in str(outcomes[5])
    assert outcomes[0].tar_path.read_bytes() == built.tar_path.read_bytes()
    assert outcomes[1].incomplete_by_column == {"(message)": 1}
    assert outcomes[1].problems == ["offset 5: column (message): not a JSON object '{broken json'"]
    assert outcomes[2].total_docs == 0 and outcomes[4].total_docs == 800
    assert all(
        o.phase_seconds["batch_size"] == len(items)
        for o in outcomes
        if not isinstance(o, Exception)
    )
    for index in (1, 2, 4):
        req, path = items[index]
        alone = build_from_staging(spark, req, str(path), tmp_path / f"alone-{index}")
        assert alone.crc == outcomes[index].crc
        assert alone.tar_path.read_bytes() == outcomes[index].tar_path.read_bytes()
        assert alone.problems == outcomes[index].problems


def test_a_batch_plans_each_table_once_and_still_checks_each_request(spark):
    known: dict = {}
    plan = builder._plan(spark, request(), known)
    assert builder._plan(spark, request(name="githubEvents__9__0__20210721T0600Z"), known) is plan
    with pytest.raises(BuildError, match="invalid offset range"):
        builder._plan(spark, request(5, 4), known)
    empty = {**copy.deepcopy(SCHEMA), "dimensionFieldSpecs": [], "metricFieldSpecs": []}
    empty["dateTimeFieldSpecs"] = []
    with pytest.raises(BuildError, match="is not a column of schema"):
        builder._plan(spark, request(schema=empty), known)
    assert len(known) == 1


def test_a_segment_too_large_to_collect_is_streamed_to_the_same_bytes(
    spark, built, staging, tmp_path, monkeypatch
):
    monkeypatch.setattr(builder, "COLLECT_MAX_BYTES", 1_000)  # 800 rows are "too large" now
    streamed = build_from_staging(spark, request(), str(staging), tmp_path)
    assert streamed.tar_path.read_bytes() == built.tar_path.read_bytes()
    assert "problems" not in streamed.phase_seconds
