"""The pure DataFrame functions of a segment build, on a real SparkSession."""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from tables.domain.schema import parse_schema
from tables.segments import arrow_stats, frames
from tables.segments.errors import BuildError
from tables.segments.transforms import (
    parse_time_format,
    parse_transforms,
    spark_datetime_pattern,
    transform_sources,
)

pytestmark = pytest.mark.spark

SCHEMA = parse_schema(
    {
        "schemaName": "allTypes",
        "dimensionFieldSpecs": [
            {"name": "i", "dataType": "INT"},
            {"name": "l", "dataType": "LONG"},
            {"name": "b", "dataType": "BOOLEAN"},
            {"name": "s", "dataType": "STRING"},
            {"name": "j", "dataType": "JSON"},
            {"name": "by", "dataType": "BYTES"},
            {"name": "tags", "dataType": "INT", "singleValueField": False},
        ],
        "metricFieldSpecs": [
            {"name": "f", "dataType": "FLOAT"},
            {"name": "d", "dataType": "DOUBLE"},
            {"name": "bd", "dataType": "BIG_DECIMAL"},
        ],
        "dateTimeFieldSpecs": [
            {
                "name": "ts",
                "dataType": "TIMESTAMP",
                "format": "TIMESTAMP",
                "granularity": "1:SECONDS",
            }
        ],
    }
)
UTC = dt.UTC


def frame(spark, messages):
    rows = [
        (offset, m if isinstance(m, bytes) else json.dumps(m).encode()) for offset, m in messages
    ]
    return spark.createDataFrame(rows, "offset bigint, value binary")


def by_offset(df):
    return {r[frames.OFFSET_COLUMN]: r.asDict() for r in df.collect()}


def test_spark_schema_maps_every_pinot_type(spark):
    schema = frames.spark_schema_for(SCHEMA)
    types = {f.name: f.dataType for f in schema.fields}
    assert types == {
        "i": T.IntegerType(),
        "l": T.LongType(),
        "b": T.BooleanType(),
        "s": T.StringType(),
        "j": T.StringType(),
        "by": T.BinaryType(),
        "tags": T.ArrayType(T.IntegerType()),
        "f": T.FloatType(),
        "d": T.DoubleType(),
        "bd": T.DecimalType(38, 18),
        "ts": T.TimestampType(),
        "__offset": T.LongType(),
    }


def test_decode_casts_good_values(spark):
    good = {
        "i": 7,
        "l": "12345678901",
        "b": True,
        "s": "hello",
        "j": {"a": [1, 2]},
        "by": "00ff",
        "tags": [1, "2", 3.0],
        "f": 1.5,
        "d": "2.25",
        "bd": "1.123456789",
        "ts": 1626847200000,
        "unknown": "dropped",
    }
    decoded = frames.decode(
        frame(spark, [(5, good), (6, {"ts": "2021-07-21T06:00:00Z", "tags": 4})]), SCHEMA
    )
    rows = by_offset(
        decoded.select(frames.OFFSET_COLUMN, *SCHEMA.column_names(), frames.PROBLEMS_COLUMN)
    )
    row = rows[5]
    assert row["i"] == 7 and row["l"] == 12345678901 and row["b"] is True
    assert row["s"] == "hello" and json.loads(row["j"]) == {"a": [1, 2]}
    assert bytes(row["by"]) == b"\x00\xff"
    assert row["tags"] == [1, 2, 3]
    assert row["f"] == 1.5 and row["d"] == 2.25 and row["bd"] == Decimal("1.123456789")
    assert row["__problems"] == []
    # Timestamps: compare as epoch millis (Python's local zone never enters).
    millis = decoded.selectExpr("__offset", "unix_millis(ts) AS ms").collect()
    assert {r["__offset"]: r["ms"] for r in millis} == {5: 1626847200000, 6: 1626847200000}
    assert rows[6]["tags"] == [4]  # a single value for a multi-value column: one element
    assert rows[6]["i"] is None and rows[6]["__problems"] == []  # missing is not a problem


def test_decode_nulls_values_that_do_not_fit_and_keeps_every_row(spark):
    bad = {
        "i": "abc",
        "l": 1.5,
        "b": "maybe",
        "by": "zz",
        "tags": [1, "x"],
        "f": "fast",
        "ts": "not a time",
        "s": "fine",
    }
    df = frame(spark, [(1, bad), (2, b"not json at all"), (3, b"[1, 2]"), (4, {"i": 2**40})])
    decoded = frames.decode(df, SCHEMA)
    assert decoded.count() == 4
    rows = by_offset(decoded)
    assert rows[1]["s"] == "fine"
    for column in ("i", "l", "b", "by", "tags", "f", "ts"):
        assert rows[1][column] is None, column
    assert sorted(p["column"] for p in rows[1]["__problems"]) == sorted(
        ["i", "l", "b", "by", "tags", "f", "ts"]
    )
    assert {p["column"]: p["raw"] for p in rows[1]["__problems"]}["i"] == "abc"
    assert [p["column"] for p in rows[2]["__problems"]] == [frames.MESSAGE_COLUMN]
    assert [p["column"] for p in rows[3]["__problems"]] == [frames.MESSAGE_COLUMN]
    assert rows[4]["i"] is None and [p["column"] for p in rows[4]["__problems"]] == ["i"]

    incomplete = frames.count_incomplete(decoded)
    assert incomplete.rows == 4
    assert incomplete.by_column["i"] == 2 and incomplete.by_column[frames.MESSAGE_COLUMN] == 2
    assert len(incomplete.problems) == 10  # 7 + 1 + 1 + 1 problems, capped at 10
    assert incomplete.problems[0] == "offset 1: column b: cannot convert 'maybe'"
    assert "offset 2: column (message): not a JSON object 'not json at all'" in incomplete.problems


GITHUB = parse_schema(
    {
        "schemaName": "gh",
        "dimensionFieldSpecs": [{"name": "id", "dataType": "STRING"}],
        "dateTimeFieldSpecs": [
            {
                "name": "created_at",
                "dataType": "STRING",
                "format": "1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd'T'HH:mm:ssZ",
                "granularity": "1:HOURS",
            },
            {
                "name": "ts",
                "dataType": "TIMESTAMP",
                "format": "1:MILLISECONDS:TIMESTAMP",
                "granularity": "1:SECONDS",
            },
            {
                "name": "ms",
                "dataType": "LONG",
                "format": "1:MILLISECONDS:EPOCH",
                "granularity": "1:SECONDS",
            },
        ],
    }
)
TRANSFORMS = [
    {
        "columnName": "ts",
        "transformFunction": "fromDateTime(created_at, 'yyyy-MM-dd''T''HH:mm:ssZ')",
    },
    {"columnName": "ms", "transformFunction": "FROM_DATE_TIME(raw_time, 'yyyyMMddHHmmss')"},
]


def test_transforms_are_parsed_before_any_work():
    parsed = parse_transforms(TRANSFORMS[:1], GITHUB)
    assert parsed[0].source == "created_at" and parsed[0].pattern == "yyyy-MM-dd'T'HH:mm:ssXX"
    assert transform_sources(
        parse_transforms([{"columnName": "id", "transformFunction": "`x`"}], GITHUB)
    ) == ["x"]
    for function in (
        "Groovy({a+b}, a, b)",
        "stDistance(stPoint(lon, lat), p)",
        "upper(id, 2)",
        "fromDateTime(created_at)",
        "fromDateTime(trim(created_at), pattern)",
    ):
        with pytest.raises(BuildError, match="unsupported transform function"):
            parse_transforms([{"columnName": "ts", "transformFunction": function}], GITHUB)
    with pytest.raises(BuildError, match="not a column of the schema"):
        parse_transforms([{"columnName": "nope", "transformFunction": "id"}], GITHUB)


def test_java_patterns_become_spark_patterns():
    assert spark_datetime_pattern("yyyy-MM-dd'T'HH:mm:ssZ") == "yyyy-MM-dd'T'HH:mm:ssXX"
    assert spark_datetime_pattern("YYYY-MM-dd HH:mm:ss.SSSZZ") == "yyyy-MM-dd HH:mm:ss.SSSXXX"
    assert spark_datetime_pattern("yyyy 'o''clock Z' Z") == "yyyy 'o''clock Z' XX"
    with pytest.raises(BuildError, match="week-based"):
        spark_datetime_pattern("xxxx-ww")


def test_from_date_time_fills_missing_values_only(spark):
    messages = [
        (1, {"id": "a", "created_at": "2021-07-21T06:00:00Z", "raw_time": "20210721060001"}),
        (2, {"id": "b", "created_at": "2021-07-21T08:00:00+0200"}),
        (3, {"id": "c", "created_at": "not a date", "raw_time": "soon"}),
        (4, {"id": "d", "created_at": "2021-07-21T06:00:00Z", "ts": 5}),  # has its own value
    ]
    transforms = parse_transforms(TRANSFORMS, GITHUB)
    decoded = frames.decode(frame(spark, messages), GITHUB, transform_sources(transforms))
    out = frames.apply_transforms(decoded, transforms, GITHUB)
    rows = {
        r["__offset"]: r
        for r in out.selectExpr(
            "__offset", "unix_millis(ts) AS ts", "ms", "created_at", "__problems"
        ).collect()
    }
    assert rows[1]["ts"] == 1626847200000 and rows[1]["ms"] == 1626847201000
    assert rows[2]["ts"] == 1626847200000 and rows[2]["ms"] is None  # no raw_time: no problem
    assert rows[2]["__problems"] == []
    assert rows[3]["ts"] is None and rows[3]["created_at"] == "not a date"
    assert sorted((p["column"], p["raw"]) for p in rows[3]["__problems"]) == [
        ("ms", "soon"),
        ("ts", "not a date"),
    ]
    assert rows[4]["ts"] == 5


EPOCH_SCHEMA = parse_schema(
    {
        "schemaName": "epochs",
        "dimensionFieldSpecs": [{"name": name, "dataType": "LONG"} for name in ("m", "d")]
        + [{"name": name, "dataType": "LONG"} for name in ("sec", "minr", "hb", "dr")]
        + [{"name": "back", "dataType": "LONG"}, {"name": "bucket", "dataType": "LONG"}]
        + [{"name": "text", "dataType": "STRING"}],
    }
)


def test_epoch_transforms_compute_as_pinot(spark):
    # Pinot's documented examples (ToEpoch*Rounded of 1613472303000) and its Java arithmetic:
    # TimeUnit conversions truncate toward zero, Bucket divides, Rounded truncates to a multiple.
    transforms = parse_transforms(
        [
            {"columnName": "sec", "transformFunction": "toEpochSeconds(m)"},
            {"columnName": "minr", "transformFunction": "toEpochMinutesRounded(m, 10)"},
            {"columnName": "hb", "transformFunction": "to_epoch_hours_bucket(m, 5)"},
            {"columnName": "dr", "transformFunction": "ToEpochDaysRounded(m, 10)"},
            {"columnName": "back", "transformFunction": "fromEpochDays(d)"},
            {"columnName": "bucket", "transformFunction": "fromEpochMinutesBucket(d, 15)"},
            {"columnName": "text", "transformFunction": "toEpochDays(m)"},
        ],
        EPOCH_SCHEMA,
    )
    messages = [(1, {"m": 1613472303000, "d": 16071}), (2, {"m": -1500, "d": -1}), (3, {})]
    decoded = frames.decode(frame(spark, messages), EPOCH_SCHEMA, transform_sources(transforms))
    out = frames.apply_transforms(decoded, transforms, EPOCH_SCHEMA)
    rows = {r["__offset"]: r.asDict() for r in out.collect()}
    first = rows[1]
    assert (first["sec"], first["minr"], first["hb"], first["dr"]) == (
        1613472303,
        26891200,
        448186 // 5,
        18670,
    )
    assert (first["back"], first["bucket"], first["text"]) == (
        16071 * 86_400_000,
        16071 * 15 * 60_000,
        "18674",
    )
    assert (rows[2]["sec"], rows[2]["back"]) == (-1, -86_400_000)  # toward zero, as Java
    assert rows[3]["sec"] is None and rows[3]["back"] is None and rows[3]["__problems"] == []
    for function, reason in (
        ("fromEpochDaysRounded(d, 2)", "not supported"),
        ("toEpochDaysBucket(m)", "takes 2 argument"),
        ("toEpochDays(m, 3)", "takes 1 argument"),
    ):
        with pytest.raises(BuildError, match=reason):
            parse_transforms([{"columnName": "sec", "transformFunction": function}], EPOCH_SCHEMA)


def test_sort_for_segment_orders_by_time_then_offset_nulls_last(spark):
    df = spark.createDataFrame(
        [(10, 3), (None, 1), (5, 9), (10, 2), (5, 4)], "t bigint, __offset bigint"
    )
    ordered = frames.sort_for_segment(df, "t").collect()
    assert [(r["t"], r["__offset"]) for r in ordered] == [
        (5, 4),
        (5, 9),
        (10, 2),
        (10, 3),
        (None, 1),
    ]


def test_column_stats_and_summary(spark):
    messages = [
        (1, {"i": 3, "s": "b", "tags": [5, 1], "ts": 2000, "by": "ff"}),
        (2, {"i": 1, "s": "a", "tags": [1], "ts": 1000}),
        (3, {"i": 3, "s": None, "ts": 3000, "b": False}),
    ]
    df = frames.segment_columns(frames.decode(frame(spark, messages), SCHEMA), SCHEMA)
    stats = frames.column_stats(df, SCHEMA)
    assert stats["i"] == frames.ColumnStats(2, 1, 3, 3, True, False)
    assert stats["s"] == frames.ColumnStats(2, "a", "b", 3, True, True)
    assert stats["ts"] == frames.ColumnStats(3, 1000, 3000, 3, True, False)  # epoch millis
    assert stats["tags"] == frames.ColumnStats(2, 1, 5, 3, False, True)
    assert stats["b"].cardinality == 1 and stats["b"].min_value is False
    assert stats["d"] == frames.ColumnStats(0, None, None, 3, True, True)
    assert bytes(stats["by"].max_value) == b"\xff"

    summary = frames.summarize(df, frames.time_millis(SCHEMA.field("ts")))
    assert summary == frames.Summary(3, 3, 1, 3, 1000, 3000)


def test_time_millis_reads_epoch_and_simple_date_formats(spark):
    schema = parse_schema(
        {
            "schemaName": "t",
            "dateTimeFieldSpecs": [
                {
                    "name": "sec",
                    "dataType": "LONG",
                    "format": "EPOCH|SECONDS",
                    "granularity": "1:SECONDS",
                },
                {
                    "name": "day",
                    "dataType": "STRING",
                    "format": "1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd",
                    "granularity": "1:DAYS",
                },
            ],
        }
    )
    df = spark.createDataFrame([(1626847200, "20210721")], "sec bigint, day string")
    row = df.select(
        frames.time_millis(schema.field("sec")).alias("a"),
        frames.time_millis(schema.field("day")).alias("b"),
    ).first()
    assert (row.a, row.b) == (1626847200000, 1626825600000)
    assert parse_time_format(schema.field("sec")).multiply == 1000


def _same(left, right) -> bool:
    def norm(value):
        if isinstance(value, float) and math.isnan(value):
            return "NaN"
        if isinstance(value, bytes | bytearray):
            return bytes(value)
        if isinstance(value, float) and value == 0.0:
            return (0.0, math.copysign(1.0, value))  # the sign of a zero counts
        return value

    return [norm(v) for v in left.__dict__.values()] == [norm(v) for v in right.__dict__.values()]


def test_arrow_statistics_of_the_written_file_equal_spark_aggregates(spark, tmp_path):
    messages = [
        (1, {"i": 3, "s": "b", "tags": [5, 1], "ts": 2000, "by": "ff", "f": "NaN", "d": -0.0}),
        (2, {"i": 1, "s": "a", "tags": [], "ts": "1969-12-31T23:59:59.9995Z", "d": 0.0}),
        (3, {"i": 3, "s": None, "ts": 3000, "b": False, "tags": [2, None], "f": 1.5}),
        (4, {"s": "é", "bd": "-1.5", "j": {"x": [1]}, "d": "NaN", "f": "-Infinity"}),
        (5, {"bd": "12.000000000000000001", "b": True, "by": "00", "l": -7, "tags": [7]}),
        (6, {"d": 2.5, "f": -0.0, "l": 2**40}),
    ]
    df = frames.segment_columns(frames.decode(frame(spark, messages), SCHEMA), SCHEMA)
    out = tmp_path / "written"
    df.coalesce(1).write.parquet(str(out))
    (path,) = out.glob("part-*.parquet")
    written = spark.read.parquet(str(path))
    expected = frames.column_stats(written, SCHEMA)
    found = arrow_stats.file_stats(path, SCHEMA)
    for spec in SCHEMA.fields:
        assert _same(found.columns[spec.name], expected[spec.name]), spec.name
    summary = frames.summarize(written, frames.time_millis(SCHEMA.field("ts")))
    assert (found.total_docs, found.distinct_offsets) == (
        summary.total_docs,
        summary.distinct_offsets,
    )
    assert (found.min_offset, found.max_offset) == (summary.min_offset, summary.max_offset)
    assert found.columns["d"].max_value != found.columns["d"].max_value  # NaN: Spark's greatest
    assert found.columns["tags"].has_null and found.columns["tags"].cardinality == 4
    assert found.columns["ts"].min_value == -1  # epoch millis, floored


def test_decode_reads_json_as_strictly_as_before(spark):
    """One parse per message (from_json) accepts what json_tuple accepted, no more."""
    cases = [
        (1, b'{"s": NaN}'),  # not JSON: NaN, leading zeros, comments, unquoted names
        (2, b'{"i": 007}'),
        (3, b'{"i": 1 /* c */}'),
        (4, b"{s: 1}"),
        (5, b"{'s': 'single'}"),  # accepted: single quotes, raw control characters
        (6, b'{"s": "a\tb", "i": 2, "i": 3}'),  # duplicate keys: the last wins
        (7, b'  {"s": "x"} trailing'),
        (8, b""),
        (9, b'"just a string"'),
        (10, b'{"j": {"a": 1.50, "b": [1, 2.0e3]}}'),
    ]
    rows = by_offset(frames.decode(frame(spark, cases), SCHEMA))
    for offset in (1, 2, 3, 4, 8, 9):
        assert [p["column"] for p in rows[offset]["__problems"]] == [frames.MESSAGE_COLUMN], offset
        assert rows[offset]["__flagged"] is True
    assert rows[5]["s"] == "single" and rows[6]["s"] == "a\tb" and rows[6]["i"] == 3
    assert rows[7]["s"] == "x" and rows[7]["__flagged"] is False
    assert rows[10]["j"] == '{"a":1.5,"b":[1,2000.0]}'
