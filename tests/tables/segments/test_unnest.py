"""`ingestionConfig.complexTypeConfig.fieldsToUnnest` on the real Spark build.

Expected rows: Pinot's ComplexTypeTransformer (pinot-segment-local, recordtransformer): the listed
fields are sorted (a parent before its child) and each array is unnested into one row per element
(several fields: the cross product), an element's keys becoming `field<delimiter>key` columns
(its nested objects flattened the same way); an empty or missing array keeps the record once,
those columns null ("use the record itself"), which the NullValueTransformer (after it) stores as
the column's default null value (`NULL_STRING`, `NULL_INT`). The first case is the example of
Pinot's docs page "Complex Type Examples (Unnest)", "Unnest Root Level Collection". Every row
keeps its message's `__offset`; the rows of one offset are in element order, and the segment
declares that it unnests (`UNNEST_FILE`), so that the ledger counts its offsets, not its rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from tables.domain.ledger import FILTERED_OFFSETS_FILE, UNNEST_FILE
from tables.segments import batch, builder, frames
from tables.segments.builder import BuildError, BuildRequest, build_from_staging, write_staging
from tables.segments.segment_format import read_segment, read_segment_files

pytestmark = pytest.mark.spark

STREAM = {"streamType": "redis", "stream.redis.topic.name": "events"}
# Pinot's dimension defaults (pinot-spi FieldSpec.java DEFAULT_DIMENSION_NULL_VALUE_OF_STRING /
# _OF_INT), stored for a null by NullValueTransformer.java (tables.segments.null_values).
NULL_STRING, NULL_INT = "null", -(2**31)
STUDENTS = {
    "students": [
        {"firstName": "Jane", "id": "100", "scores": {"physics": 91, "chemistry": 93, "maths": 99}},
        {"firstName": "John", "id": "101", "scores": {"physics": 97, "chemistry": 98, "maths": 99}},
        {"firstName": "Jen", "id": "102", "scores": {"physics": 96, "chemistry": 95, "maths": 100}},
    ]
}


def col(name: str, data_type: str = "STRING", single: bool = True) -> dict:
    return {"name": name, "dataType": data_type, "singleValueField": single}


def table_config(complex_types: dict, **ingestion: Any) -> dict:
    return {
        "tableName": "events_REALTIME",
        "tableType": "REALTIME",
        "segmentsConfig": {"schemaName": "events", "replication": "1"},
        "tenants": {},
        "tableIndexConfig": {},
        "metadata": {},
        "ingestionConfig": {
            "streamIngestionConfig": {"streamConfigMaps": [STREAM]},
            "complexTypeConfig": complex_types,
            **ingestion,
        },
    }


def build(spark, tmp_path, columns: list[dict], config: dict, messages: list[Any], name="s"):
    schema = {"schemaName": "events", "dimensionFieldSpecs": columns}
    staged = tmp_path / f"{name}.parquet"
    write_staging([(i, json.dumps(m).encode()) for i, m in enumerate(messages)], staged)
    request = BuildRequest("events", f"events__0__0__{name}", schema, config, 0, len(messages), 1)
    return build_from_staging(spark, request, str(staged), tmp_path / f"out-{name}")


@dataclass(frozen=True)
class Case:
    id: str
    complex_types: dict
    columns: list[dict]
    messages: list[Any]
    rows: list[tuple]  # (offset, *columns in order), in segment order


CASES = [
    Case(
        "pinot docs: unnest a root level collection",
        {"fieldsToUnnest": ["students"]},
        [col("students.firstName"), col("students.id"), col("students.scores", "JSON")],
        [STUDENTS],
        [
            (0, s["firstName"], s["id"], json.dumps(s["scores"], separators=(",", ":")))
            for s in STUDENTS["students"]
        ],
    ),
    Case(
        "two arrays: the cross product, fields sorted as Pinot does",
        {"fieldsToUnnest": ["b", "a"]},
        [col("id", "INT"), col("a", "INT"), col("b")],
        [{"id": 1, "a": [1, 2], "b": ["x", "y", "z"]}, {"id": 2, "a": [3], "b": []}],
        [(0, 1, a, b) for a in (1, 2) for b in "xyz"] + [(1, 2, 3, NULL_STRING)],
    ),
    Case(
        "an empty, missing, null or non-array field keeps the message once",
        {"fieldsToUnnest": ["items"]},
        [col("id", "INT"), col("items.sku"), col("items")],
        [
            {"id": 1, "items": []},
            {"id": 2},
            {"id": 3, "items": None},
            {"id": 4, "items": [{"sku": "p"}, {"sku": "q"}]},
            {"id": 5, "items": "text"},
            {"id": 6, "items": ["plain"]},
        ],
        [
            (0, 1, NULL_STRING, NULL_STRING),
            (1, 2, NULL_STRING, NULL_STRING),
            (2, 3, NULL_STRING, NULL_STRING),
            (3, 4, "p", '{"sku":"p"}'),
            (3, 4, "q", '{"sku":"q"}'),
            (4, 5, NULL_STRING, NULL_STRING),
            (5, 6, NULL_STRING, "plain"),  # a primitive element is the column itself
        ],
    ),
    Case(
        "nested objects of an element, a nested path, a child of an unnested parent",
        {"fieldsToUnnest": ["order.lines", "groups", "groups.members"]},
        [
            col("order.id"),
            col("order.lines.n", "INT"),
            col("order.lines.price.currency"),
            col("groups.g"),
            col("groups.members.m", "INT"),
        ],
        [
            {
                "order": {"id": "o1", "lines": [{"n": 1, "price": {"currency": "EUR"}}, {"n": 2}]},
                "groups": [{"g": "a", "members": [{"m": 1}, {"m": 2}]}, {"g": "b", "members": []}],
            }
        ],
        [
            (0, "o1", n, cur, g, m)
            for g, m in (("a", 1), ("a", 2), ("b", NULL_INT))
            for n, cur in ((1, "EUR"), (2, NULL_STRING))
        ],
    ),
    Case(
        "collectionNotUnnestedToJson NON_PRIMITIVE: only the arrays not unnested",
        {"fieldsToUnnest": ["items"]},
        [col("items.sku"), col("items.tags", single=False), col("others", single=False)],
        [{"items": [{"sku": "x", "tags": ["a", "b"]}], "others": [{"k": 1}]}],
        [(0, "x", ["a", "b"], ['[{"k":1}]'])],
    ),
    Case(
        "collectionNotUnnestedToJson ALL and another delimiter",
        {"fieldsToUnnest": ["items"], "delimiter": "_", "collectionNotUnnestedToJson": "ALL"},
        [col("items_sku"), col("items_tags", single=False)],
        [{"items": [{"sku": "x", "tags": ["a", "b"]}, {"sku": "y"}]}],
        [(0, "x", ['["a","b"]']), (0, "y", [NULL_STRING])],  # Pinot: [default]
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_unnested_rows_are_pinots(spark, tmp_path, case: Case):
    result = build(spark, tmp_path, case.columns, table_config(case.complex_types), case.messages)
    metadata, table = read_segment(result.tar_path)
    names = [c["name"] for c in case.columns]
    got = [(row["__offset"], *(row[n] for n in names)) for row in table.to_pylist()]
    assert got == case.rows
    assert result.total_docs == len(case.rows) == int(metadata["segment.total.docs"])
    fields = sorted(set(case.complex_types["fieldsToUnnest"]))
    files = read_segment_files(result.tar_path)
    assert files[UNNEST_FILE].decode() == "".join(f + "\n" for f in fields)
    assert result.incomplete_rows == 0


def test_without_fields_to_unnest_the_segment_declares_nothing(spark, tmp_path):
    config = table_config({"delimiter": "."})
    result = build(spark, tmp_path, [col("students")], config, [STUDENTS])
    assert result.total_docs == 1
    assert UNNEST_FILE not in read_segment_files(result.tar_path)


MESSAGES = [
    {"id": 1, "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}, {"sku": "c", "qty": 3}]},
    {"id": 2, "items": [{"sku": "d", "qty": 4}]},
    {"id": 3, "items": []},
    {"id": 4, "items": [{"sku": "drop", "qty": 5}, {"sku": "e", "qty": 6}]},
    {"id": 5, "items": [{"sku": "drop", "qty": 7}]},
] * 3
COLUMNS = [col("id", "INT"), col("items.sku"), col("items.qty", "INT"), col("sku")]


def filtered_config() -> dict:
    return table_config(
        {"fieldsToUnnest": ["items"]},
        transformConfigs=[{"columnName": "sku", "transformFunction": "upper(items.sku)"}],
        filterConfig={"filterFunction": "equals(items.sku, 'drop')"},
    )


def test_transforms_and_the_filter_see_unnested_rows(spark, tmp_path):
    result = build(spark, tmp_path, COLUMNS, filtered_config(), MESSAGES)
    _, table = read_segment(result.tar_path)
    rows = table.to_pylist()
    assert [r["sku"] for r in rows[:7]] == ["A", "B", "C", "D", NULL_STRING, "E", "A"]
    assert result.filtered_rows == 2 * 3 and result.total_docs == 6 * 3
    # Only an offset the filter left without a row is declared (the ledger excuses it).
    files = read_segment_files(result.tar_path)
    assert files[FILTERED_OFFSETS_FILE].decode() == "4-5,9-10,14-15"
    assert sorted({r["__offset"] for r in rows}) == [o for o in range(15) if o % 5 != 4]


def test_the_same_rows_give_the_same_bytes_whichever_way_they_are_built(
    spark, tmp_path, monkeypatch
):
    first = build(spark, tmp_path, COLUMNS, filtered_config(), MESSAGES, name="a")
    again = build(spark, tmp_path, COLUMNS, filtered_config(), MESSAGES, name="a")
    assert again.crc == first.crc
    assert again.tar_path.read_bytes() == first.tar_path.read_bytes()
    monkeypatch.setattr(builder, "COLLECT_MAX_BYTES", 10)  # streamed from a file, sorted by Spark
    streamed = build(spark, tmp_path, COLUMNS, filtered_config(), MESSAGES, name="a")
    assert streamed.tar_path.read_bytes() == first.tar_path.read_bytes()
    assert streamed.filtered_rows == first.filtered_rows


def test_the_rows_of_one_offset_are_ordered_by_their_element_positions():
    keys = ["0000000002.0000000001", "0000000001.0000000002", "0000000001.0000000001"]
    rows = pa.table(
        {
            batch.INDEX_COLUMN: pa.array([0, 0, 0], pa.int32()),
            batch.TIME_KEY: pa.array([None, None, None], pa.int64()),
            frames.OFFSET_COLUMN: pa.array([7, 7, 7], pa.int64()),
            frames.UNNEST_KEY: keys,
        }
    )
    assert batch._sort(rows).column(frames.UNNEST_KEY).to_pylist() == sorted(keys)


@pytest.mark.parametrize("collect_max_bytes", [None, 10], ids=["collected", "streamed"])
def test_a_repeated_input_offset_is_still_refused(spark, tmp_path, monkeypatch, collect_max_bytes):
    if collect_max_bytes is not None:
        monkeypatch.setattr(builder, "COLLECT_MAX_BYTES", collect_max_bytes)
    config = table_config({"fieldsToUnnest": ["items"]})
    schema = {"schemaName": "events", "dimensionFieldSpecs": COLUMNS[:3]}
    staged = tmp_path / "dup.parquet"
    one = json.dumps(MESSAGES[0]).encode()
    write_staging([(0, one), (1, one), (1, one)], staged)
    request = BuildRequest("events", "events__0__0__dup", schema, config, 0, 3, 1)
    with pytest.raises(BuildError, match="repeats offsets"):
        build_from_staging(spark, request, str(staged), tmp_path / "out")
