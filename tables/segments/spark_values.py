"""Values of the Spark build's expressions and Pinot's conversions between their types.

A `Value` is a Spark column with its kind: RAW (a message field's raw text, as
`tables.segments.frames.decode` keeps it: strings unquoted, numbers as written, objects and
arrays as JSON text), STRING, LONG, DOUBLE, BOOLEAN or ARRAY (of text); whether a null result for
present inputs is legitimate (`may_be_null`); whether it is a non-null literal (`constant`).
The `as_*` functions convert a value to a parameter's type as Pinot's `PinotDataType` does (text
to a number by parsing; a multi-value input given to a single-value parameter is its first
element; a boolean from a number is "not 0", from text "true" in any case or "1").
`json_text` is what Pinot's JSON functions parse; `literal_value` is a literal of the AST.
Used by `tables.segments.transform_functions`; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tables.domain.transform_expr import Literal

__all__ = [
    "ARRAY",
    "BOOLEAN",
    "DOUBLE",
    "LONG",
    "RAW",
    "STRING",
    "Field",
    "Value",
    "as_array",
    "as_boolean",
    "as_double",
    "as_long",
    "as_string",
    "first_of_array",
    "json_text",
    "literal_value",
]

RAW, STRING, LONG, DOUBLE, BOOLEAN, ARRAY = "raw", "string", "long", "double", "boolean", "array"


@dataclass(frozen=True)
class Value:
    column: Column
    kind: str
    may_be_null: bool = False
    constant: bool = False  # a literal that is not null


Field = Callable[[str], Column]


# --- conversions (PinotDataType) ----------------------------------------------------------------


def first_of_array(text: Column) -> Column:
    parsed = F.from_json(text, T.ArrayType(T.StringType()))
    return F.when(
        text.startswith("[") & parsed.isNotNull(), F.try_element_at(parsed, F.lit(1))
    ).otherwise(text)


def as_string(value: Value) -> Column:
    if value.kind == RAW:
        return first_of_array(value.column)
    if value.kind == ARRAY:
        return F.try_element_at(value.column, F.lit(1))
    if value.kind == STRING:
        return value.column
    return value.column.cast("string")


def as_double(value: Value) -> Column:
    if value.kind in (DOUBLE, LONG):
        return value.column.cast("double")
    if value.kind == BOOLEAN:
        return F.when(value.column, F.lit(1.0)).when(~value.column, F.lit(0.0))
    return as_string(value).try_cast("double")


def as_long(value: Value) -> Column:
    if value.kind == LONG:
        return value.column
    if value.kind == DOUBLE:
        return value.column.try_cast("bigint")
    if value.kind == BOOLEAN:
        return F.when(value.column, F.lit(1)).when(~value.column, F.lit(0)).cast("bigint")
    text = as_string(value)
    return F.coalesce(text.try_cast("bigint"), text.try_cast("double").try_cast("bigint"))


def as_boolean(value: Value) -> Column:
    if value.kind == BOOLEAN:
        return value.column
    if value.kind in (LONG, DOUBLE):
        return value.column != 0
    text = F.lower(F.trim(as_string(value)))
    return F.when(text.isNotNull(), text.isin("true", "1"))


def as_array(value: Value) -> Column:
    """Multi-value text: a JSON array's elements, or the one value."""
    if value.kind == ARRAY:
        return value.column
    if value.kind == RAW:
        parsed = F.from_json(value.column, T.ArrayType(T.StringType()))
        return F.when(value.column.startswith("[") & parsed.isNotNull(), parsed).otherwise(
            F.when(value.column.isNotNull(), F.array(value.column))
        )
    return F.when(value.column.isNotNull(), F.array(as_string(value)))


def json_text(value: Value) -> Column:
    """What JsonFunctions parse: the raw JSON text of a field, or a value as text."""
    if value.kind == RAW:
        return value.column
    if value.kind == ARRAY:
        return F.to_json(value.column)
    return value.column.cast("string")


def literal_value(node: Literal) -> Value:
    v = node.value
    if v is None:
        return Value(F.lit(None).cast("string"), STRING, True)
    if isinstance(v, bool):
        return Value(F.lit(v), BOOLEAN, constant=True)
    if isinstance(v, int):
        return Value(F.lit(v).cast("bigint"), LONG, constant=True)
    if isinstance(v, float):
        return Value(F.lit(v).cast("double"), DOUBLE, constant=True)
    return Value(F.lit(v), STRING, constant=True)
