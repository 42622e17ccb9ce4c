"""tables.domain.schema: Pinot's real example schemas, validation problems, ZNRecord round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tables.domain.schema import (
    FieldKind,
    FieldSpec,
    Schema,
    SchemaError,
    parse_schema,
    schema_from_znrecord,
    schema_to_znrecord,
)
from tables.domain.znrecord import ZNRecord
from tests import envdefaults

FIXTURES = envdefaults.PINOT_FIXTURES
SCHEMA_FILES = sorted(FIXTURES.glob("*_schema.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def problems_of(data: object) -> list[str]:
    with pytest.raises(SchemaError) as info:
        parse_schema(data)
    return info.value.problems


def minimal(**extra: object) -> dict:
    data = {
        "schemaName": "events",
        "dimensionFieldSpecs": [{"name": "id", "dataType": "STRING"}],
        "metricFieldSpecs": [{"name": "count", "dataType": "LONG"}],
        "dateTimeFieldSpecs": [
            {
                "name": "ts",
                "dataType": "TIMESTAMP",
                "format": "1:MILLISECONDS:TIMESTAMP",
                "granularity": "1:SECONDS",
            }
        ],
    }
    data.update(extra)
    return data


def test_fixture_schemas_are_present() -> None:
    names = {path.name for path in SCHEMA_FILES}
    assert len(names) >= 5
    assert "upsertMeetupRsvp_schema.json" in names


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: p.stem)
def test_fixture_schema_parses_and_round_trips(path: Path) -> None:
    data = load(path)
    schema = parse_schema(data)
    assert schema.name == data["schemaName"]
    assert schema.raw == data
    expected_count = sum(
        len(data.get(key, []))
        for key in ("dimensionFieldSpecs", "metricFieldSpecs", "dateTimeFieldSpecs")
    )
    assert len(schema.fields) == expected_count

    record = schema_to_znrecord(schema)
    assert record.id == data["schemaName"]
    assert list(record.simple_fields) == ["schemaJSON"]
    assert record.simple_fields["schemaJSON"] == json.dumps(data, separators=(",", ":"))
    assert record.map_fields == {} and record.list_fields == {}

    back = schema_from_znrecord(record)
    assert back == schema
    assert back.raw == data
    via_text = schema_from_znrecord(ZNRecord.from_json(record.to_json()))
    assert via_text.raw == data
    assert via_text == schema


def test_field_order_kinds_and_attributes() -> None:
    schema = parse_schema(load(FIXTURES / "airlineStats_schema.json"))
    kinds = [spec.kind for spec in schema.fields]
    # dimensions first, then dateTimes (airlineStats has no metrics)
    assert kinds == sorted(kinds, key=[FieldKind.DIMENSION, FieldKind.DATE_TIME].index)
    assert schema.field("DivAirports") == FieldSpec(
        name="DivAirports", data_type="STRING", kind=FieldKind.DIMENSION, single_value=False
    )
    days = schema.field("DaysSinceEpoch")
    assert days is not None
    assert days.kind is FieldKind.DATE_TIME
    assert (days.format, days.granularity) == ("1:DAYS:EPOCH", "1:DAYS")
    assert schema.field("missing") is None
    assert schema.column_names()[0] == "ActualElapsedTime"
    assert schema.column_names()[-1] == "tsRaw"


def test_metrics_and_primary_keys() -> None:
    schema = parse_schema(load(FIXTURES / "upsertMeetupRsvp_schema.json"))
    assert schema.primary_key_columns == ("event_id",)
    rsvp = schema.field("rsvp_count")
    assert rsvp is not None and rsvp.kind is FieldKind.METRIC
    names = schema.column_names()
    assert names.index("location") < names.index("rsvp_count") < names.index("mtime")


def test_default_null_value_kept() -> None:
    data = minimal()
    data["dimensionFieldSpecs"][0]["defaultNullValue"] = "none"
    assert parse_schema(data).field("id") == FieldSpec(
        "id", "STRING", FieldKind.DIMENSION, True, None, None, "none"
    )


def test_deprecated_time_field_spec() -> None:
    data = minimal(
        dateTimeFieldSpecs=[],
        timeFieldSpec={
            "incomingGranularitySpec": {"name": "t", "dataType": "LONG", "timeType": "SECONDS"},
            "outgoingGranularitySpec": {"name": "days", "dataType": "INT", "timeType": "DAYS"},
        },
    )
    schema = parse_schema(data)
    days = schema.fields[-1]
    assert (days.name, days.kind, days.data_type) == ("days", FieldKind.TIME, "INT")
    assert days.granularity == "1:DAYS"


def test_raw_is_a_copy() -> None:
    data = minimal()
    schema = parse_schema(data)
    data["schemaName"] = "changed"
    assert schema.raw["schemaName"] == "events"


@pytest.mark.parametrize("data", [None, [], "schema", 3])
def test_not_an_object(data: object) -> None:
    assert problems_of(data) == ["The schema must be a JSON object"]


@pytest.mark.parametrize("name", [None, "", "  ", 7])
def test_schema_name_required(name: object) -> None:
    data = minimal(schemaName=name)
    assert problems_of(data) == ["schemaName is required and must be a non-empty string"]


def test_field_without_name() -> None:
    data = minimal()
    data["dimensionFieldSpecs"].append({"dataType": "INT"})
    assert "dimensionFieldSpecs entry #2 must have a non-empty string 'name'" in problems_of(data)


def test_field_without_data_type() -> None:
    data = minimal()
    data["metricFieldSpecs"].append({"name": "total"})
    assert problems_of(data) == ["field 'total' has no dataType"]


def test_unknown_data_type() -> None:
    data = minimal()
    data["dimensionFieldSpecs"].append({"name": "x", "dataType": "VARCHAR"})
    (problem,) = problems_of(data)
    assert problem.startswith("field 'x' has unknown dataType 'VARCHAR' (expected one of ")


def test_duplicate_names_across_lists() -> None:
    data = minimal()
    data["metricFieldSpecs"].append({"name": "id", "dataType": "INT"})
    assert problems_of(data) == ["Column 'id' is defined more than once"]


def test_primary_key_must_exist() -> None:
    data = minimal(primaryKeyColumns=["id", "nope"])
    assert problems_of(data) == ["Primary key column 'nope' is not a column of the schema"]


def test_date_time_needs_format_and_granularity() -> None:
    data = minimal()
    data["dateTimeFieldSpecs"].append({"name": "day", "dataType": "INT"})
    assert problems_of(data) == [
        "dateTime field 'day' must have a non-empty 'format'",
        "dateTime field 'day' must have a non-empty 'granularity'",
    ]


def test_spec_list_must_be_list_of_objects() -> None:
    assert problems_of(minimal(metricFieldSpecs={"a": 1})) == [
        "metricFieldSpecs must be a list of field specs"
    ]
    assert problems_of(minimal(metricFieldSpecs=["a"])) == [
        "metricFieldSpecs entry #1 must be a JSON object"
    ]


def test_every_problem_is_reported() -> None:
    data = minimal(schemaName="", primaryKeyColumns=["ghost"])
    data["dimensionFieldSpecs"].append({"name": "id", "dataType": "NUMBER"})
    data["dateTimeFieldSpecs"][0].pop("format")
    with pytest.raises(SchemaError) as info:
        parse_schema(data)
    problems = info.value.problems
    assert "schemaName is required and must be a non-empty string" in problems
    assert any(p.startswith("field 'id' has unknown dataType 'NUMBER'") for p in problems)
    assert "dateTime field 'ts' must have a non-empty 'format'" in problems
    assert "Column 'id' is defined more than once" in problems
    assert "Primary key column 'ghost' is not a column of the schema" in problems
    assert len(problems) == 5
    assert str(info.value) == "; ".join(problems)
    assert isinstance(info.value, ValueError)


def test_znrecord_without_schema_json() -> None:
    with pytest.raises(SchemaError, match="has no 'schemaJSON' simple field"):
        schema_from_znrecord(ZNRecord(id="events"))
    with pytest.raises(SchemaError, match="does not parse"):
        schema_from_znrecord(ZNRecord(id="events", simple_fields={"schemaJSON": "{"}))


def test_znrecord_with_invalid_schema() -> None:
    record = ZNRecord(id="x", simple_fields={"schemaJSON": '{"schemaName":""}'})
    with pytest.raises(SchemaError, match="schemaName is required"):
        schema_from_znrecord(record)


def test_schema_is_frozen() -> None:
    schema: Schema = parse_schema(minimal())
    with pytest.raises(AttributeError):
        schema.name = "other"  # type: ignore[misc]
