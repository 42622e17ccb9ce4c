"""`ingestionConfig.filterConfig` on the real Spark build: rows the filter function returns true
for are dropped (Pinot's FilterTransformer, after the transforms), counted, and declared by the
segment so the ledger excuses exactly those offsets.

Expected values: Pinot's `ComparisonFunctions` (doubles; equals / notEquals within 1e-7), its
polymorphic comparisons for text, and its evaluator's three-valued and / or / not; only a true
result drops a row (FilterTransformer: `Boolean.TRUE.equals(result)`).
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import Column
from pyspark.sql import functions as F

from tables.domain.ledger import FILTERED_OFFSETS_FILE, parse_offset_ranges
from tables.domain.schema import parse_schema
from tables.segments import builder, frames
from tables.segments.builder import BuildError, BuildRequest, build_from_staging, write_staging
from tables.segments.segment_format import read_segment, read_segment_files
from tables.segments.transform_functions import compile_filter
from tables.segments.transforms import parse_filter_config, parse_transforms, transform_sources

pytestmark = pytest.mark.spark

SCHEMA = {
    "schemaName": "orders",
    "dimensionFieldSpecs": [
        {"name": "country", "dataType": "STRING"},
        {"name": "price", "dataType": "DOUBLE"},
        {"name": "n", "dataType": "INT"},
        {"name": "day", "dataType": "LONG"},
    ],
    "dateTimeFieldSpecs": [
        {
            "name": "ts",
            "dataType": "LONG",
            "format": "1:MILLISECONDS:EPOCH",
            "granularity": "1:DAYS",
        }
    ],
}
DAY_MS = 86_400_000
STREAM = {"streamType": "redis", "stream.redis.topic.name": "orders"}


def config(filter_function: str | None) -> dict:
    ingestion: dict = {
        "transformConfigs": [{"columnName": "day", "transformFunction": "toEpochDays(ts)"}],
        "streamIngestionConfig": {"streamConfigMaps": [STREAM]},
    }
    if filter_function is not None:
        ingestion["filterConfig"] = {"filterFunction": filter_function}
    return {
        "tableName": "orders_REALTIME",
        "tableType": "REALTIME",
        "segmentsConfig": {"timeColumnName": "ts", "schemaName": "orders", "replication": "1"},
        "tenants": {},
        "tableIndexConfig": {},
        "metadata": {},
        "ingestionConfig": ingestion,
    }


MESSAGES = [
    {"country": "US", "price": 12.5, "n": 1, "ts": 3 * DAY_MS},
    {"country": "XX", "price": 99.0, "n": 2, "ts": 1 * DAY_MS},  # dropped: country
    {"country": "FR", "price": 3.0, "n": 3, "ts": 2 * DAY_MS},  # dropped: price
    {"country": "DE", "price": 40, "n": "bad", "ts": 5 * DAY_MS},  # kept, incomplete
    {"country": "XX", "price": 1, "n": "bad", "ts": 4 * DAY_MS},  # dropped (not incomplete)
    {"country": "IT", "price": 20, "n": 6, "ts": 9 * DAY_MS},  # dropped: day (a transform)
    {"country": "ES", "n": 7, "ts": 6 * DAY_MS},  # no price: lessThan is null, kept
]
FILTER = "or(equals(country, 'XX'), lessThan(price, 10), greaterThanOrEqual(day, 9))"


def request(filter_function: str | None, start: int = 10, name: str = "orders__0__0__x"):
    end = start + len(MESSAGES)
    return BuildRequest("orders", name, SCHEMA, config(filter_function), start, end, 1_000)


def staged(tmp_path, start: int = 10):
    path = tmp_path / "rows.parquet"
    pairs = [(start + i, json.dumps(m).encode()) for i, m in enumerate(MESSAGES)]
    write_staging(pairs, path)
    return path


def test_rows_the_filter_matches_are_dropped_counted_and_declared(spark, tmp_path):
    result = build_from_staging(spark, request(FILTER), str(staged(tmp_path)), tmp_path / "out")
    _, table = read_segment(result.tar_path)
    assert [r["__offset"] for r in table.to_pylist()] == [10, 13, 16]  # by ts
    assert result.total_docs == 3 and result.filtered_rows == 4
    assert result.metadata["segment.total.docs"] == "3"
    # Only the kept row's problem counts: offset 14 (dropped) had one too.
    assert result.incomplete_rows == 1 and result.incomplete_by_column == {"n": 1}
    declared = read_segment_files(result.tar_path)[FILTERED_OFFSETS_FILE].decode()
    assert parse_offset_ranges(declared) == [(11, 13), (14, 16)]


def test_the_streamed_path_drops_the_same_rows_to_the_same_bytes(spark, tmp_path, monkeypatch):
    rows = staged(tmp_path)
    collected = build_from_staging(spark, request(FILTER), str(rows), tmp_path / "a")
    monkeypatch.setattr(builder, "COLLECT_MAX_BYTES", 10)
    streamed = build_from_staging(spark, request(FILTER), str(rows), tmp_path / "b")
    assert streamed.tar_path.read_bytes() == collected.tar_path.read_bytes()
    assert streamed.filtered_rows == 4


def test_without_a_match_nothing_is_declared_and_the_bytes_equal_an_unfiltered_build(
    spark, tmp_path
):
    rows = str(staged(tmp_path))
    plain = build_from_staging(spark, request(None), rows, tmp_path / "a")
    never = build_from_staging(spark, request("equals(country, 'none')"), rows, tmp_path / "b")
    assert never.filtered_rows == 0 and never.total_docs == len(MESSAGES)
    assert FILTERED_OFFSETS_FILE not in read_segment_files(never.tar_path)
    assert never.tar_path.read_bytes() == plain.tar_path.read_bytes()


def test_every_row_dropped_makes_an_empty_segment_declaring_them_all(spark, tmp_path):
    result = build_from_staging(spark, request("true"), str(staged(tmp_path)), tmp_path / "o")
    assert result.total_docs == 0 and result.filtered_rows == len(MESSAGES)
    declared = read_segment_files(result.tar_path)[FILTERED_OFFSETS_FILE].decode()
    assert declared == "10-17"


def test_a_filter_the_build_cannot_run_fails_before_reading(spark, tmp_path):
    missing = str(tmp_path / "nothing.parquet")
    for function in ("Groovy({price > 1}, price)", "lower(country)", "strcmp(country, 'x')"):
        with pytest.raises(BuildError, match="unsupported filter function"):
            build_from_staging(spark, request(function), missing, tmp_path)


# (filter function, message, dropped?, where the answer comes from)
CASES: list[tuple[str, dict, bool, str]] = [
    ("equals(a, 1)", {"a": 1.00000001}, True, "ComparisonFunctions.equals: within 1e-7"),
    ("equals(a, 1)", {"a": 1.001}, False, "java"),
    ("equals(a, '1')", {"a": "1.0"}, True, "both read as numbers: doubles"),
    ("equals(a, 'abc')", {"a": "abc"}, True, "text"),
    ("equals(a, b)", {"a": "x", "b": "y"}, False, "text"),
    ("notEquals(a, 5)", {"a": 5}, False, "java"),
    ("not_equals(a, 'x')", {"a": "y"}, True, "text"),
    ("greaterThan(a, 10)", {"a": "11"}, True, "text parsed as a double"),
    ("greaterThan(a, 10)", {"a": 10}, False, "java"),
    ("greaterThanOrEqual(a, 10)", {"a": 10}, True, "java"),
    ("lessThan(a, b)", {"a": "apple", "b": "banana"}, True, "text order"),
    ("lessThanOrEqual(a, 2.5)", {"a": 2.5}, True, "java"),
    ("lessThan(a, 10)", {}, False, "a null comparison drops nothing"),
    ("between(a, 1, 3)", {"a": 3}, True, "ComparisonFunctions.between: inclusive"),
    ("between(a, 1, 3)", {"a": 3.5}, False, "java"),
    ("isNull(a)", {}, True, "ObjectFunctions.isNull"),
    ("isNull(a)", {"a": 0}, False, "java"),
    ("isNotNull(a)", {"a": "x"}, True, "java"),
    ("and(equals(a, 1), equals(b, 2))", {"a": 1, "b": 2}, True, "AndExecutionNode"),
    ("and(equals(a, 1), lessThan(c, 0))", {"a": 1}, False, "and(true, null) is null"),
    ("or(equals(a, 1), lessThan(c, 0))", {"a": 1}, True, "or(true, null) is true"),
    ("or(equals(a, 2), equals(b, 2), equals(c, 2))", {"c": 2}, True, "three operands"),
    ("not(equals(a, 1))", {"a": 2}, True, "NotExecutionNode"),
    ("not(lessThan(a, 1))", {}, False, "not(null) is null"),
    ("startsWith(a, 'tmp_')", {"a": "tmp_x"}, True, "StringFunctions.startsWith"),
    ("flag", {"flag": True}, True, "a boolean field: a JSON true"),
    ("flag", {"flag": "yes"}, False, "anything but true keeps the row"),
    ("greaterThan(toEpochDays(ts), 18000)", {"ts": 1585724400000}, True, "nested: 18353"),
    ("equals(lower(jsonPathString(j, '$.k')), 'v')", {"j": {"k": "V"}}, True, "JSON family"),
    ("equals(len, 3)", {"a": "abc"}, False, "no such field: null"),
]


def test_every_filter_function_decides_as_pinot(spark):
    """Case i is row i of one DataFrame, decided by column d<i> (one Spark job)."""
    schema = parse_schema(
        {"schemaName": "f", "dimensionFieldSpecs": [{"name": "out", "dataType": "STRING"}]}
    )
    filters = [parse_filter_config({"filterFunction": case[0]}) for case in CASES]
    sources = list(dict.fromkeys(s for f in filters if f is not None for s in f.sources))
    rows = [(i, json.dumps(case[1]).encode()) for i, case in enumerate(CASES)]
    decoded = frames.decode(
        spark.createDataFrame(rows, "offset long, value binary"), schema, sources
    )

    def field(name: str) -> Column:
        return F.col(frames.RAW_COLUMN).getField(name)

    decisions = [
        compile_filter(f.expr, field).alias(f"d{i}") for i, f in enumerate(filters) if f is not None
    ]
    found = decoded.select(frames.OFFSET_COLUMN, *decisions).orderBy(frames.OFFSET_COLUMN).collect()
    failures = [
        (function, message, expected, found[i][f"d{i}"], source)
        for i, (function, message, expected, source) in enumerate(CASES)
        if found[i][f"d{i}"] is not expected
    ]
    assert failures == [], "\n".join(map(str, failures))


def test_the_filter_sees_a_transforms_result_where_the_message_had_no_value(spark):
    schema = parse_schema(SCHEMA)
    transforms = parse_transforms(config(None)["ingestionConfig"]["transformConfigs"], schema)
    row_filter = parse_filter_config({"filterFunction": "equals(day, 3)"})
    assert row_filter is not None
    rows = [
        (1, json.dumps({"ts": 3 * DAY_MS}).encode()),  # day from the transform: 3
        (2, json.dumps({"ts": 3 * DAY_MS, "day": 7}).encode()),  # the message's own day wins
    ]
    df = spark.createDataFrame(rows, "offset long, value binary")
    sources = list(dict.fromkeys([*transform_sources(transforms), *row_filter.sources]))
    decoded = frames.apply_transforms(frames.decode(df, schema, sources), transforms, schema)
    out = frames.run_stages(decoded, [frames.filter_stage(row_filter, transforms, schema)])
    found = {r[0]: r[1] for r in out.select(frames.OFFSET_COLUMN, frames.FILTERED_COLUMN).collect()}
    assert found == {1: True, 2: False}
