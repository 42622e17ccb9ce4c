"""Pinot's default null values in real Spark builds (tables.segments.null_values).

Expected values come from Apache Pinot: `pinot-spi/src/main/java/org/apache/pinot/spi/data/
FieldSpec.java` (type defaults, `DataType.convert`) and `pinot-segment-local/src/main/java/org/
apache/pinot/segment/local/recordtransformer/NullValueTransformer.java` (a null single value takes
the default; a null multi-value `new Object[]{default}`; the time column takes its default only in
the valid range, else "now"), and `DataTypeTransformer.standardize` (an empty list is a null).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path

import pytest

from tables.segments.builder import (
    BatchItem,
    BuildError,
    BuildRequest,
    build_batch,
    build_from_staging,
    read_segment,
    write_staging,
)
from tests.envdefaults import PINOT_FIXTURES

pytestmark = pytest.mark.spark

CREATED_MS = 1_626_847_260_123  # 2021-07-21T06:01:00.123Z: after every row's time
T0 = 1_626_840_000_000
CONFIG = json.loads((PINOT_FIXTURES / "githubEvents_realtime_table_config.json").read_text())
CONFIG["tableName"] = "nulls"
CONFIG["segmentsConfig"]["timeColumnName"] = "ts"
del CONFIG["ingestionConfig"]["transformConfigs"]

DIMENSIONS = {
    "INT": -(2**31),
    "LONG": -(2**63),
    "FLOAT": -math.inf,
    "DOUBLE": -math.inf,
    "BIG_DECIMAL": Decimal(0),
    "BOOLEAN": False,
    "TIMESTAMP": 0,  # epoch millis
    "STRING": "null",
    "JSON": "null",
    "BYTES": b"",
}
METRICS = {"INT": 0, "LONG": 0, "FLOAT": 0.0, "DOUBLE": 0.0, "BIG_DECIMAL": Decimal(0)}
SCHEMA = {
    "schemaName": "nulls",
    "dimensionFieldSpecs": [
        *[{"name": f"d_{t.lower()}", "dataType": t} for t in DIMENSIONS],
        {"name": "mv_int", "dataType": "INT", "singleValueField": False},
        {"name": "mv_string", "dataType": "STRING", "singleValueField": False},
        {"name": "given", "dataType": "STRING", "defaultNullValue": "n/a"},
        {"name": "given_mv", "dataType": "LONG", "singleValueField": False, "defaultNullValue": 3},
        {"name": "given_flag", "dataType": "BOOLEAN", "defaultNullValue": "true"},
    ],
    "metricFieldSpecs": [{"name": f"m_{t.lower()}", "dataType": t} for t in METRICS],
    "dateTimeFieldSpecs": [
        {
            "name": "ts",
            "dataType": "LONG",
            "format": "1:MILLISECONDS:EPOCH",
            "granularity": "1:SECONDS",
        }
    ],
}
FULL = {"d_int": 1, "d_string": "x", "mv_int": [1, 2], "given": "g", "m_long": 9, "ts": T0}
ROWS = [
    FULL,  # offset 0
    {"ts": T0 + 1000},  # every other field missing
    {"mv_int": [], "mv_string": None, "given_mv": [], "ts": T0 + 2000},  # empty and null lists
    {"d_int": "abc", "d_double": None, "ts": T0 + 3000},  # a bad value, a JSON null
    {"d_string": "no time"},  # no time: the creation time
]


def stage(rows: list[dict], path: Path) -> str:
    write_staging([(i, json.dumps(r).encode()) for i, r in enumerate(rows)], path)
    return str(path)


def request(schema=SCHEMA, config=CONFIG, created=CREATED_MS, name="nulls__0__0__20210721T0600Z"):
    return BuildRequest("nulls", name, schema, config, 0, len(ROWS), created)


def millis(value: dt.datetime) -> int:
    return round(value.timestamp() * 1000)


def by_offset(tar_path: Path) -> dict[int, dict]:
    _, table = read_segment(tar_path)
    return {row["__offset"]: row for row in table.to_pylist()}


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> str:
    return stage(ROWS, tmp_path_factory.mktemp("nulls") / "rows.parquet")


@pytest.fixture(scope="module")
def built(spark, staged, tmp_path_factory):
    return build_from_staging(spark, request(), staged, tmp_path_factory.mktemp("built"))


def same(got: object, expected: object) -> bool:
    if isinstance(expected, float) and math.isinf(expected):
        return got == expected
    if isinstance(got, dt.datetime):
        return millis(got) == expected
    return got == expected and (got is not None)


def test_missing_fields_of_every_type_get_pinots_default(built):
    row = by_offset(built.tar_path)[1]
    for data_type, expected in DIMENSIONS.items():
        assert same(row[f"d_{data_type.lower()}"], expected), data_type
    for data_type, expected in METRICS.items():
        assert same(row[f"m_{data_type.lower()}"], expected), data_type
    assert row["mv_int"] == [-(2**31)] and row["mv_string"] == ["null"]
    # the configured defaultNullValue wins, converted to the column's type
    assert row["given"] == "n/a" and row["given_mv"] == [3] and row["given_flag"] is True
    assert built.metadata["column.d_int.hasNullValue"] == "false"
    assert built.metadata["column.d_int.minValue"] == str(-(2**31))


def test_values_that_are_present_are_kept(built):
    row = by_offset(built.tar_path)[0]
    assert (row["d_int"], row["d_string"], row["mv_int"], row["given"]) == (1, "x", [1, 2], "g")
    assert (row["m_long"], row["ts"]) == (9, T0)


def test_an_empty_or_null_multi_value_gets_a_list_of_the_default(built):
    row = by_offset(built.tar_path)[2]
    assert row["mv_int"] == [-(2**31)] and row["mv_string"] == ["null"] and row["given_mv"] == [3]


def test_a_bad_value_is_counted_and_stored_as_the_default(built):
    row = by_offset(built.tar_path)[3]
    assert row["d_int"] == -(2**31) and row["d_double"] == -math.inf
    assert built.incomplete_rows == 1 and built.incomplete_by_column == {"d_int": 1}
    assert built.problems == ["offset 3: column d_int: cannot convert 'abc'"]


def test_the_time_column_takes_the_creation_time_not_long_min_value(built):
    # LONG's default (Long.MIN_VALUE) is outside 1971..2071: Pinot uses "now", here the
    # segment's creation time, and the segment's time range includes it.
    rows = by_offset(built.tar_path)
    assert rows[4]["ts"] == CREATED_MS and rows[4]["d_string"] == "no time"
    assert (built.start_time_ms, built.end_time_ms) == (T0, CREATED_MS)
    assert built.metadata["segment.start.time"] == str(T0)
    assert built.metadata["column.ts.minValue"] == str(T0)


def test_a_time_default_in_the_valid_range_is_used(spark, staged, tmp_path):
    schema = copy.deepcopy(SCHEMA)
    schema["dateTimeFieldSpecs"][0]["defaultNullValue"] = T0 - 5000
    result = build_from_staging(spark, request(schema=schema), staged, tmp_path)
    assert by_offset(result.tar_path)[4]["ts"] == T0 - 5000
    assert (result.start_time_ms, result.end_time_ms) == (T0 - 5000, T0 + 3000)


def test_null_handling_keeps_the_nulls_and_a_batch_uses_each_creation_time(
    spark, staged, built, tmp_path
):
    config = copy.deepcopy(CONFIG)
    config["tableIndexConfig"]["nullHandlingEnabled"] = True
    later = CREATED_MS + 60_000
    items = [
        BatchItem(request(), staged, tmp_path / "a"),
        BatchItem(request(config=config, created=later), staged, tmp_path / "b"),
        BatchItem(
            request(created=later, name="nulls__0__1__20210721T0601Z"), staged, tmp_path / "c"
        ),
    ]
    plain, nullable, other = build_batch(spark, items, tmp_path / "scratch")
    # the same request in a batch gives the same bytes as built alone
    assert plain.crc == built.crc and plain.tar_path.read_bytes() == built.tar_path.read_bytes()
    # another segment of the batch gets its own creation time as the time column's "now"
    assert by_offset(other.tar_path)[4]["ts"] == later and other.end_time_ms == later
    # null handling: the Parquet null is the null value vector (the default is the schema's)
    rows = by_offset(nullable.tar_path)
    assert rows[1]["d_int"] is None and rows[1]["given"] is None and rows[1]["mv_int"] is None
    assert rows[2]["mv_int"] is None and rows[2]["given_mv"] is None  # empty list: null
    assert rows[3]["d_int"] is None and nullable.incomplete_by_column == {"d_int": 1}
    assert nullable.metadata["column.d_int.hasNullValue"] == "true"
    assert rows[0]["d_int"] == 1 and rows[0]["mv_int"] == [1, 2]
    assert rows[4]["ts"] == later  # the time column always gets its default (module docstring)


def test_column_based_null_handling_follows_not_null(spark, staged, tmp_path):
    schema = copy.deepcopy(SCHEMA)
    schema["enableColumnBasedNullHandling"] = True
    for spec in schema["dimensionFieldSpecs"]:
        spec["notNull"] = spec["name"] != "d_int"
    result = build_from_staging(spark, request(schema=schema), staged, tmp_path)
    row = by_offset(result.tar_path)[1]
    assert row["d_int"] is None and row["d_string"] == "null" and row["m_long"] is None


def test_a_default_that_does_not_convert_fails_the_build_naming_the_column(spark, tmp_path):
    schema = copy.deepcopy(SCHEMA)
    schema["dimensionFieldSpecs"][0]["defaultNullValue"] = "1.5"
    missing = str(tmp_path / "does-not-exist.parquet")
    with pytest.raises(BuildError, match=r"field 'd_int': defaultNullValue '1\.5'"):
        build_from_staging(spark, request(schema=schema), missing, tmp_path)


def _id_and_times(*times: tuple[str, str, str]) -> dict:
    """A schema of an `id` and the dateTime columns `(name, dataType, unit:format)`."""
    return {
        "schemaName": "nulls",
        "dimensionFieldSpecs": [{"name": "id", "dataType": "STRING"}],
        "dateTimeFieldSpecs": [
            {"name": name, "dataType": kind, "format": f"1:{fmt}", "granularity": f"1:{unit}"}
            for name, kind, fmt in times
            for unit in [fmt.split(":")[0]]
        ],
    }


def test_the_creation_time_is_written_in_the_time_columns_format(spark, tmp_path):
    schema = _id_and_times(
        ("day", "STRING", "DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd"), ("sec", "LONG", "SECONDS:EPOCH")
    )
    rows = [{"id": "a", "day": "20210720", "sec": 1_626_800_000}, {"id": "b"}]
    staged = stage(rows, tmp_path / "rows.parquet")
    by_day, by_sec = copy.deepcopy(CONFIG), copy.deepcopy(CONFIG)
    by_day["segmentsConfig"]["timeColumnName"] = "day"
    by_sec["segmentsConfig"]["timeColumnName"] = "sec"
    items = [
        BatchItem(
            BuildRequest("nulls", "nulls__0__0__day", schema, by_day, 0, 2, CREATED_MS),
            staged,
            tmp_path / "d",
        ),
        BatchItem(
            BuildRequest("nulls", "nulls__0__0__sec", schema, by_sec, 0, 2, CREATED_MS),
            staged,
            tmp_path / "s",
        ),
    ]
    day, sec = build_batch(spark, items, tmp_path / "scratch")
    # The time column's default ("null" / Long.MIN_VALUE) is not a valid time: the creation time,
    # in the column's format; another dateTime column takes its plain default.
    assert by_offset(day.tar_path)[1]["day"] == "20210721"
    assert by_offset(day.tar_path)[1]["sec"] == -(2**63)
    assert (day.start_time_ms, day.end_time_ms) == (1_626_739_200_000, 1_626_825_600_000)
    assert by_offset(sec.tar_path)[1]["sec"] == CREATED_MS // 1000
    assert by_offset(sec.tar_path)[1]["day"] == "null"
    assert sec.end_time_ms == CREATED_MS // 1000 * 1000


def test_builds_of_other_creation_times_reuse_the_generated_code(spark, tmp_path):
    """The creation time reaches the job as data, not as a literal of its plan: a literal would
    make every build's generated code new, compiled again by Janino and then by the JIT."""
    schema = _id_and_times(("ts", "LONG", "MILLISECONDS:EPOCH"))
    staged = stage([{"id": "a", "ts": T0}, {"id": "b"}], tmp_path / "rows.parquet")
    compilations = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    counts, times = [], []
    for index, created in enumerate([CREATED_MS, CREATED_MS + 1000, CREATED_MS + 2000]):
        request = BuildRequest("nulls", f"nulls__0__{index}__c", schema, CONFIG, 0, 2, created)
        before = compilations.METRIC_COMPILATION_TIME().getCount()
        built = build_from_staging(spark, request, staged, tmp_path / str(index))
        counts.append(compilations.METRIC_COMPILATION_TIME().getCount() - before)
        times.append(by_offset(built.tar_path)[1]["ts"])
    assert times == [CREATED_MS, CREATED_MS + 1000, CREATED_MS + 2000]  # each its own "now"
    assert counts[1:] == [0, 0]  # nothing compiled after the first build
