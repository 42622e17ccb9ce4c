"""A schema field's own `transformFunction` (Pinot's older form of an ingestion transform): kept
by the schema, checked by the one transform parser when a schema or a table is written, never
when a stored schema is read, and gathered by the build after the table's transformConfigs (the
table's entry for the same column wins)."""

from __future__ import annotations

import copy
import random

import pytest

from tables.domain.schema import (
    SchemaError,
    parse_schema,
    schema_from_znrecord,
    schema_to_znrecord,
    schema_transform_problems,
)
from tables.domain.table_config import TableConfigError, parse_table_config
from tables.domain.transform_expr import parse_transform
from tables.segments.errors import BuildError
from tables.segments.transforms import parse_transforms
from tables.streams.producer import synthetic_rows
from tests.cluster_fixtures import load

GEO = "toSphericalGeography(stPoint(group_lon,group_lat))"


def _with_location(function: object) -> dict:
    schema = load("meetupRsvp_schema.json")
    for spec in schema["dimensionFieldSpecs"]:
        if spec["name"] == "location":
            spec["transformFunction"] = function
    return schema


def _meetup_table() -> dict:
    return load("meetupRsvp_realtime_table_config.json")


@pytest.mark.parametrize("name", ["meetupRsvp", "upsertMeetupRsvp"])
def test_pinots_example_schemas_are_accepted_for_write_with_their_function(name):
    schema = parse_schema(load(f"{name}_schema.json"), for_write=True)
    location = schema.field("location")
    assert location is not None
    assert location.transform_function == GEO
    assert schema_transform_problems(schema) == []


@pytest.mark.parametrize(
    "text", ["stPoint(x, y)", "ST_Point(x, y, true)", "st_point(x, y)", "toGeometry(g)"]
)
def test_the_geospatial_functions_are_in_the_registry(text):
    parse_transform(text)


@pytest.mark.parametrize(
    ("function", "reasons"),
    [
        ("ST_Distance(stPoint(group_lon, group_lat), g)", ["ST_Distance", "not supported"]),
        ("Groovy({a}, a)", ["Groovy", "controller.disable.ingestion.groovy"]),
        ("stPoint(group_lon)", ["stPoint", "takes 2 or 3 argument(s), not 1"]),
        ("toSphericalGeography(location)", ["must not read its own column 'location'"]),
    ],
)
def test_a_function_the_build_cannot_run_is_refused_on_write_naming_column_and_function(
    function, reasons
):
    data = _with_location(function)
    with pytest.raises(SchemaError) as caught:
        parse_schema(data, for_write=True)
    (problem,) = caught.value.problems
    assert "field 'location'" in problem
    for reason in reasons:
        assert reason in problem
    # A schema read back (from ZooKeeper, written by anyone) is never refused for it.
    stored = schema_from_znrecord(schema_to_znrecord(parse_schema(data)))
    assert stored.field("location").transform_function == function


def test_a_transform_function_that_is_not_a_text_is_refused():
    with pytest.raises(SchemaError, match="field 'location' has a transformFunction that is not"):
        parse_schema(_with_location(["stPoint"]))


def test_a_table_write_checks_the_schemas_functions_unless_the_table_sets_the_column():
    schema = parse_schema(_with_location("ST_Distance(g, g)"))
    with pytest.raises(TableConfigError) as caught:
        parse_table_config(_meetup_table(), schema, for_write=True)
    assert any("field 'location'" in p and "ST_Distance" in p for p in caught.value.problems)
    parse_table_config(_meetup_table(), schema)  # a stored config is read whatever it says
    table = copy.deepcopy(_meetup_table())
    table["ingestionConfig"]["transformConfigs"] = [
        {"columnName": "location", "transformFunction": "stPoint(group_lon, group_lat)"}
    ]
    parse_table_config(table, schema, for_write=True)  # the table's transform wins


def test_the_build_gathers_the_schemas_functions_after_the_tables():
    schema = parse_schema(load("meetupRsvp_schema.json"))
    (location,) = parse_transforms(None, schema)
    assert (location.column, location.expression, location.sources) == (
        "location",
        GEO,
        ("group_lon", "group_lat"),
    )
    table = [{"columnName": "location", "transformFunction": "stPoint(group_lat, group_lon)"}]
    (only,) = parse_transforms(table, schema)
    assert (only.column, only.sources) == ("location", ("group_lat", "group_lon"))
    with pytest.raises(BuildError, match=r"unsupported transform function.*'location'"):
        parse_transforms(None, parse_schema(_with_location("ST_Distance(g, g)")))


def test_generated_rows_leave_the_derived_columns_to_the_ingestion():
    rows = synthetic_rows(load("meetupRsvp_schema.json"), lambda: 0, random.Random(3))
    fields = next(rows).fields
    assert "location" not in fields
    assert {"group_lon", "group_lat", "mtime"} <= set(fields)
