"""`ingestionConfig.complexTypeConfig` on the real Spark build: nested objects read through
`parent<delimiter>child` columns, collectionNotUnnestedToJson, and `prefixesToRename` refused before
any data is read (fieldsToUnnest: tests/tables/segments/test_unnest.py).

Expected values: Pinot's ComplexTypeTransformer (flattening a map into `a.b` keys, the default
delimiter "." and collectionNotUnnestedToJson NON_PRIMITIVE: an array of maps or arrays becomes one
JSON string, an array of primitives stays a multi-value).
"""

from __future__ import annotations

import json

import pytest

from tables.domain.schema import parse_schema
from tables.segments import frames
from tables.segments.builder import BuildError, BuildRequest, build_from_staging, write_staging
from tables.segments.segment_format import read_segment
from tables.segments.transforms import ComplexTypes, parse_complex_type_config, parse_transforms

pytestmark = pytest.mark.spark

EVENT = {
    "id": 7,
    "user": {"name": "ann", "address": {"city": "Oslo"}, "tags": ["a", "b"]},
    "items": [{"sku": "x", "qty": 1}, {"sku": "y", "qty": 2}],
    "scores": [1, 2, 3],
    "user.name": None,
}


STREAM = {"streamType": "redis", "stream.redis.topic.name": "events"}


def ingestion(**extra: object) -> dict:
    return {"streamIngestionConfig": {"streamConfigMaps": [STREAM]}, **extra}


def schema(delimiter: str = ".") -> dict:
    d = delimiter
    return {
        "schemaName": "events",
        "dimensionFieldSpecs": [
            {"name": "id", "dataType": "LONG"},
            {"name": f"user{d}name", "dataType": "STRING"},
            {"name": f"user{d}address{d}city", "dataType": "STRING"},
            {"name": f"user{d}tags", "dataType": "STRING", "singleValueField": False},
            {"name": "items", "dataType": "STRING", "singleValueField": False},
            {"name": "scores", "dataType": "INT", "singleValueField": False},
            {"name": "single", "dataType": "STRING"},
        ],
    }


def decoded(spark, spec: dict, complex_types: ComplexTypes | None, message: dict) -> dict:
    parsed = parse_schema(spec)
    df = spark.createDataFrame([(1, json.dumps(message).encode())], "offset long, value binary")
    out = frames.decode(df, parsed, complex_types=complex_types)
    (row,) = frames.segment_columns(out, parsed).collect()
    return row.asDict()


def test_nested_objects_are_read_through_dotted_columns(spark):
    row = decoded(spark, schema(), ComplexTypes(), EVENT)
    assert row["user.name"] == "ann"
    assert row["user.address.city"] == "Oslo"
    assert row["user.tags"] == ["a", "b"]  # primitives: a multi-value
    # NON_PRIMITIVE: an array of objects is one JSON text, as Pinot's Jackson prints it.
    assert [json.loads(v) for v in row["items"]] == [EVENT["items"]]
    assert row["scores"] == [1, 2, 3]


def test_without_complex_type_config_nothing_is_flattened(spark):
    row = decoded(spark, schema(), None, EVENT)
    assert row["user.name"] is None and row["user.address.city"] is None
    assert [json.loads(v) for v in row["items"]] == EVENT["items"]  # one value per element


def test_the_nested_value_overwrites_a_top_level_field_of_the_dotted_name(spark):
    message = {**EVENT, "user.name": "top"}
    assert decoded(spark, schema(), ComplexTypes(), message)["user.name"] == "ann"
    message = {**message, "user": {"tags": []}}
    assert decoded(spark, schema(), ComplexTypes(), message)["user.name"] == "top"


def test_another_delimiter(spark):
    row = decoded(spark, schema("_"), ComplexTypes(delimiter="_"), EVENT)
    assert row["user_name"] == "ann" and row["user_address_city"] == "Oslo"


def test_collection_not_unnested_to_json_modes(spark):
    every = decoded(spark, schema(), ComplexTypes(to_json="ALL"), {**EVENT, "single": ["z"]})
    assert every["scores"] is None  # one JSON text "[1,2,3]" is no INT
    assert every["user.tags"] == ['["a","b"]']
    assert every["single"] == '["z"]'
    none = decoded(spark, schema(), ComplexTypes(to_json="NONE"), {**EVENT, "single": ["z"]})
    assert [json.loads(v) for v in none["items"]] == EVENT["items"]
    assert none["single"] == "z"  # the only element of a one-element array


def test_prefixes_to_rename_are_refused_before_any_data_is_read(spark, tmp_path):
    with pytest.raises(BuildError, match="prefixesToRename"):
        parse_complex_type_config({"prefixesToRename": {"user.": ""}})
    config = {
        "tableName": "events_REALTIME",
        "tableType": "REALTIME",
        "segmentsConfig": {"schemaName": "events", "replication": "1"},
        "tenants": {},
        "tableIndexConfig": {},
        "metadata": {},
        "ingestionConfig": ingestion(complexTypeConfig={"prefixesToRename": {"user.": ""}}),
    }
    request = BuildRequest("events", "events__0__0__x", schema(), config, 0, 1, 1_000)
    with pytest.raises(BuildError, match=r"prefixesToRename is not supported"):
        build_from_staging(spark, request, str(tmp_path / "nothing.parquet"), tmp_path)


def test_a_build_with_flattening_and_a_transform_of_a_flattened_field(spark, tmp_path):
    spec = schema()
    spec["dimensionFieldSpecs"].append({"name": "city", "dataType": "STRING"})
    config = {
        "tableName": "events_REALTIME",
        "tableType": "REALTIME",
        "segmentsConfig": {"schemaName": "events", "replication": "1"},
        "tenants": {},
        "tableIndexConfig": {},
        "metadata": {},
        "ingestionConfig": ingestion(
            complexTypeConfig={"delimiter": "."},
            transformConfigs=[
                {"columnName": "city", "transformFunction": "upper(user.address.city)"}
            ],
        ),
    }
    parse_transforms(config["ingestionConfig"]["transformConfigs"], parse_schema(spec))
    staged = tmp_path / "rows.parquet"
    write_staging([(0, json.dumps(EVENT).encode())], staged)
    request = BuildRequest("events", "events__0__0__x", spec, config, 0, 1, 1_000)
    result = build_from_staging(spark, request, str(staged), tmp_path / "out")
    _, table = read_segment(result.tar_path)
    (row,) = table.to_pylist()
    assert row["city"] == "OSLO" and row["user.address.city"] == "Oslo"
    assert result.incomplete_rows == 0
