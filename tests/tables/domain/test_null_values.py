"""tables.domain.null_values: Pinot's default null values, conversions and null handling.

Every expected value comes from Apache Pinot's source: `pinot-spi/src/main/java/org/apache/pinot/
spi/data/FieldSpec.java` (DEFAULT_DIMENSION_NULL_VALUE_OF_* / DEFAULT_METRIC_NULL_VALUE_OF_*,
`getDefaultNullValue`, `DataType.convert`), `pinot-spi/.../utils/BooleanUtils.java` (`toInt`),
`pinot-spi/.../utils/TimeUtils.java` (VALID_MIN/MAX_TIME_MILLIS, `timeValueInValidRange`).
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pytest

from tables.domain.null_values import (
    VALID_MAX_TIME_MS,
    VALID_MIN_TIME_MS,
    NullValueError,
    convert_default,
    default_null_value,
    default_value_problems,
    java_text,
    nullable_columns,
    time_in_valid_range,
    type_default,
)
from tables.domain.schema import FieldKind, FieldSpec, SchemaError, parse_schema

DIMENSION_LIKE = (FieldKind.DIMENSION, FieldKind.DATE_TIME, FieldKind.TIME)

# (data type, dimension/time/dateTime default, metric default); None: Pinot has none
# (FieldSpec.getDefaultNullValue throws IllegalStateException for it).
TYPE_DEFAULTS = [
    ("INT", -(2**31), 0),  # Integer.MIN_VALUE / 0
    ("LONG", -(2**63), 0),  # Long.MIN_VALUE / 0L
    ("FLOAT", -math.inf, 0.0),  # Float.NEGATIVE_INFINITY / 0.0F
    ("DOUBLE", -math.inf, 0.0),  # Double.NEGATIVE_INFINITY / 0.0D
    ("BIG_DECIMAL", Decimal(0), Decimal(0)),  # BigDecimal.ZERO
    ("BOOLEAN", False, None),  # 0 (false); no metric default
    ("TIMESTAMP", 0, None),  # 0L (the epoch); no metric default
    ("STRING", "null", "null"),
    ("JSON", "null", None),  # "null"; no metric default
    ("BYTES", b"", b""),  # new byte[0]
    ("MAP", None, None),
    ("LIST", None, None),
    ("STRUCT", None, None),
]


@pytest.mark.parametrize("data_type,dimension,metric", TYPE_DEFAULTS)
@pytest.mark.parametrize("kind", list(FieldKind))
def test_type_defaults_per_field_kind(kind, data_type, dimension, metric):
    expected = metric if kind is FieldKind.METRIC else dimension
    got = type_default(data_type, kind)
    assert got == expected and type(got) is type(expected)
    spec = FieldSpec("c", data_type, kind, single_value=kind is not FieldKind.METRIC)
    assert default_null_value(spec) == expected


CONVERSIONS = [
    # INT / LONG: Integer.valueOf / Long.valueOf
    ("INT", "42", 42),
    ("INT", "-7", -7),
    ("INT", "+7", 7),
    ("INT", "2147483647", 2**31 - 1),
    ("LONG", "-9223372036854775808", -(2**63)),
    ("LONG", "0", 0),
    # FLOAT / DOUBLE: Float.valueOf / Double.valueOf (blanks trimmed, NaN, Infinity, suffixes)
    ("DOUBLE", "1.5", 1.5),
    ("DOUBLE", " 2e3 ", 2000.0),
    ("DOUBLE", "-Infinity", -math.inf),
    ("DOUBLE", "1e400", math.inf),
    ("FLOAT", "0.1", 0.10000000149011612),  # rounded to a float
    ("FLOAT", "3.5f", 3.5),
    ("FLOAT", "1e40", math.inf),
    # BIG_DECIMAL: new BigDecimal (stored as decimal(38, 18))
    ("BIG_DECIMAL", "12.5", Decimal("12.5")),
    ("BIG_DECIMAL", "-1E+3", Decimal(-1000)),
    # BOOLEAN: BooleanUtils.toInt: "true" (any case) or "1" is true, anything else false
    ("BOOLEAN", "true", True),
    ("BOOLEAN", "TRUE", True),
    ("BOOLEAN", "1", True),
    ("BOOLEAN", "false", False),
    ("BOOLEAN", "yes", False),
    ("BOOLEAN", "0", False),
    # TIMESTAMP: TimestampUtils.toMillisSinceEpoch (a time without an offset is UTC here)
    ("TIMESTAMP", "1626847200000", 1_626_847_200_000),
    ("TIMESTAMP", "2021-07-21 06:00:00", 1_626_847_200_000),
    ("TIMESTAMP", "2021-07-21 06:00:00.5", 1_626_847_200_500),
    ("TIMESTAMP", "2021-07-21T08:00:00+02:00", 1_626_847_200_000),
    # STRING / JSON: the text itself; BYTES: hex
    ("STRING", "", ""),
    ("STRING", "n/a", "n/a"),
    ("JSON", '{"a":1}', '{"a":1}'),
    ("BYTES", "", b""),
    ("BYTES", "00ff", b"\x00\xff"),
    ("BYTES", "DEADbeef", b"\xde\xad\xbe\xef"),
]


@pytest.mark.parametrize("data_type,text,expected", CONVERSIONS)
def test_conversions_follow_datatype_convert(data_type, text, expected):
    got = convert_default(text, data_type)
    assert got == expected and type(got) is type(expected)


REFUSED = [
    ("INT", "1.5"),
    ("INT", "2147483648"),  # out of range
    ("INT", " 1"),  # Integer.valueOf does not trim
    ("INT", "abc"),
    ("LONG", "9223372036854775808"),
    ("LONG", "1e3"),
    ("DOUBLE", "abc"),
    ("DOUBLE", "1,5"),
    ("FLOAT", ""),
    ("BIG_DECIMAL", "abc"),
    ("BIG_DECIMAL", " 1"),
    ("BIG_DECIMAL", "1e30"),  # does not fit the segment's decimal(38, 18)
    ("TIMESTAMP", "yesterday"),
    ("BYTES", "abc"),  # odd length
    ("BYTES", "zz"),
    ("MAP", "x"),
]


@pytest.mark.parametrize("data_type,text", REFUSED)
def test_texts_that_do_not_convert_are_refused(data_type, text):
    with pytest.raises(NullValueError):
        convert_default(text, data_type)


@pytest.mark.parametrize(
    "value,text",
    [
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-5, "-5"),
        (1.5, "1.5"),
        (100.0, "100.0"),
        (1e20, "1.0E20"),
        (1.5e-5, "1.5E-5"),
        ("x", "x"),
    ],
)
def test_a_json_value_is_converted_from_javas_text_of_it(value, text):
    assert java_text(value) == text


def test_a_configured_default_wins_over_the_type_default():
    def spec(data_type, value, kind=FieldKind.DIMENSION):
        return FieldSpec("c", data_type, kind, default_null_value=value)

    assert default_null_value(spec("INT", 0)) == 0
    assert default_null_value(spec("INT", "-1")) == -1
    assert default_null_value(spec("DOUBLE", 0)) == 0.0  # JSON 0 -> "0" -> Double.valueOf
    assert default_null_value(spec("BOOLEAN", True)) is True  # JSON true -> "true"
    assert default_null_value(spec("STRING", 1.5)) == "1.5"
    assert default_null_value(spec("LONG", 7, FieldKind.METRIC)) == 7
    assert default_null_value(spec("BYTES", "0a")) == b"\n"
    with pytest.raises(NullValueError):
        default_null_value(spec("INT", 1.5))  # "1.5" is not an Integer
    with pytest.raises(NullValueError):
        default_null_value(spec("STRING", ["a"]))


def test_the_valid_time_range_is_1971_to_2071_inclusive():
    def epoch_ms(year: int) -> int:
        return round(dt.datetime(year, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)

    assert (epoch_ms(1971), epoch_ms(2071)) == (VALID_MIN_TIME_MS, VALID_MAX_TIME_MS)
    assert time_in_valid_range(VALID_MIN_TIME_MS) and time_in_valid_range(VALID_MAX_TIME_MS)
    assert not time_in_valid_range(VALID_MIN_TIME_MS - 1)
    assert not time_in_valid_range(VALID_MAX_TIME_MS + 1)
    assert not time_in_valid_range(0) and not time_in_valid_range(-(2**63))


def schema_with(**dimension):
    return {
        "schemaName": "events",
        "dimensionFieldSpecs": [{"name": "id", "dataType": "STRING"}, dimension],
        "metricFieldSpecs": [{"name": "count", "dataType": "LONG", "defaultNullValue": "zero"}],
    }


def test_a_schema_write_refuses_a_default_that_does_not_convert_naming_the_column():
    data = schema_with(name="n", dataType="INT", defaultNullValue="1.5")
    with pytest.raises(SchemaError) as info:
        parse_schema(data, for_write=True)
    problems = info.value.problems
    assert len(problems) == 2
    assert "field 'n'" in problems[0] and "INT" in problems[0]
    assert "field 'count'" in problems[1] and "LONG" in problems[1]
    # a schema read back (already stored) is not refused for it; the build is
    assert default_value_problems(parse_schema(data)) == problems


def test_a_schema_write_accepts_convertible_defaults():
    data = schema_with(name="flag", dataType="BOOLEAN", defaultNullValue="anything")
    data["metricFieldSpecs"][0]["defaultNullValue"] = 0
    assert parse_schema(data, for_write=True).field("flag") is not None


def test_null_handling_table_level_and_column_based():
    data = {
        "schemaName": "events",
        "dimensionFieldSpecs": [
            {"name": "a", "dataType": "STRING"},
            {"name": "b", "dataType": "STRING", "notNull": True},
        ],
        "metricFieldSpecs": [{"name": "m", "dataType": "LONG"}],
    }
    schema = parse_schema(data)
    enabled = {"tableIndexConfig": {"nullHandlingEnabled": True}}
    assert nullable_columns(schema, {}) == frozenset()
    assert nullable_columns(schema, {"tableIndexConfig": {}}) == frozenset()
    assert nullable_columns(schema, enabled) == {"a", "b", "m"}
    # Pinot 1.1+: with column-based null handling the schema decides, the table flag is ignored
    column_based = parse_schema({**data, "enableColumnBasedNullHandling": True})
    assert nullable_columns(column_based, {}) == {"a", "m"}
    assert nullable_columns(column_based, enabled) == {"a", "m"}
