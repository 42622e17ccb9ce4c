"""Pinot's NullValueTransformer on Spark: a row without a value gets its column's default.

`null_value_stage(schema, time_spec, time_format, nullable)` builds, once per plan, the column
expressions (no Python per row) that `apply_null_values(df, stage, created)` applies to the
decoded, transformed and filtered rows of a build (`tables.segments.batch`: the one place, shared
by single and batched builds, after the transforms and the filter and before the sort, the
statistics and the data file). The defaults are Pinot's (`tables.domain.null_values`):
- a single-value column's null becomes its default null value (the schema's `defaultNullValue`
  converted to the column's type, else the type default of its field kind);
- a multi-value column's null or empty list becomes a one-element list of the default;
- MAP / LIST / STRUCT columns (no Pinot default) stay as they are;
- the time column (`GroupPlan.time_spec`, the table's `timeColumnName`) gets its default only
  when that, read in the column's format, lies in Pinot's valid time range (1971..2071); else it
  gets "now", which here is the segment's creation time (`BuildRequest.creation_time_ms`, given
  per row as the `created` column: one job may build several segments), not the wall clock, so
  that the same request always builds the same bytes. The segment's time range (start/end time)
  thus never comes from an out-of-range default such as Long.MIN_VALUE.
Rows whose value did not convert (`__problems`) are still counted as incomplete; the default only
fills the stored value, as Pinot's DataTypeTransformer then NullValueTransformer do.

Null handling (`nullable`: `tables.domain.null_values.nullable_columns`, from
`tableIndexConfig.nullHandlingEnabled` or the schema's column-based null handling). Pinot stores
the default in the forward index AND a null value vector of the documents that were null. Our
segment is one Parquet file, whose columns already carry a null bitmap: for a nullable column we
keep the real Parquet null (a multi-value column's empty list becomes null too) and store no
default, since a reader knows the default from the schema (`tables.domain.null_values.
default_null_value`). This records exactly Pinot's null value vector, needs no extra column or
format change, and keeps the statistics honest (`hasNullValue`). The time column is the
exception: it always gets its default (segments are managed by their time range), so its nulls
are not recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tables.domain.null_values import (
    VALID_MAX_TIME_MS,
    VALID_MIN_TIME_MS,
    NullValueError,
    default_null_value,
    time_in_valid_range,
)
from tables.domain.schema import FieldSpec, Schema
from tables.segments.errors import BuildError
from tables.segments.frames import column_of, spark_type
from tables.segments.transforms import TimeFormat

__all__ = ["CREATED_COLUMN", "NullStage", "apply_null_values", "null_value_stage"]

#: The segment's creation time (epoch millis) while the stage runs; dropped after it.
CREATED_COLUMN = "__created_ms"


@dataclass(frozen=True)
class NullStage:
    """The expressions of one plan: a new value per schema column (`DataFrame.withColumns`) and
    whether they read `CREATED_COLUMN`."""

    columns: dict[str, Column] = field(default_factory=dict)
    needs_created: bool = False


def _literal(value: Any, spec: FieldSpec) -> Column:
    """A default value as a literal of the column's scalar Spark type."""
    scalar = spark_type(FieldSpec(spec.name, spec.data_type, spec.kind))
    if spec.data_type == "TIMESTAMP":
        return F.timestamp_millis(F.lit(int(value)))
    if spec.data_type == "BYTES":
        return F.unhex(F.lit(bytes(value).hex()))
    if spec.data_type == "BIG_DECIMAL":
        return F.lit(str(value)).cast(scalar)
    if isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
        return F.lit(text).cast(scalar)
    return F.lit(value).cast(scalar)


def _filled(spec: FieldSpec, value: Any, nullable: bool) -> Column | None:
    """The column with its nulls filled (None: nothing to do)."""
    column = column_of(spec.name)
    if spec.single_value:
        if nullable or value is None:
            return None
        return F.coalesce(column, _literal(value, spec))
    empty = column.isNull() | (F.size(column) == 0)
    if nullable:  # Pinot: an empty multi-value is a null
        return F.when(~empty, column)
    if value is None:
        return None
    return F.when(empty, F.array(_literal(value, spec)).cast(spark_type(spec))).otherwise(column)


def _epoch_value(value: Any) -> int | None:
    """The number an EPOCH column's value stands for, as Spark's `try_cast('bigint')` reads it."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    text = str(value).strip()
    return int(text) if text.lstrip("+-").isdigit() else None


def _default_valid(spec: FieldSpec, fmt: TimeFormat, value: Any) -> bool | Column:
    """Whether the time default, read in the column's format, is a valid time (Pinot:
    `fromFormatToMillis` then `timeValueInValidRange`); a Column for date patterns."""
    if spec.data_type == "TIMESTAMP":
        return time_in_valid_range(int(value))
    if fmt.kind in ("TIMESTAMP", "EPOCH"):
        number = _epoch_value(value)
        if number is None:
            return False
        millis = number if fmt.kind == "TIMESTAMP" else number * fmt.multiply // fmt.divide
        return time_in_valid_range(millis)
    parsed = F.unix_millis(F.try_to_timestamp(F.lit(str(value)), F.lit(fmt.pattern)))
    return parsed.between(VALID_MIN_TIME_MS, VALID_MAX_TIME_MS)


def _created_in_format(spec: FieldSpec, fmt: TimeFormat) -> Column:
    """The creation time written in the time column's format and type (Pinot:
    `fromMillisToFormat(now)` then `DataType.convert`)."""
    created = F.col(CREATED_COLUMN).cast("bigint")
    if spec.data_type == "TIMESTAMP":
        return F.timestamp_millis(created)
    if fmt.kind == "TIMESTAMP":
        value = created
    elif fmt.kind == "EPOCH":
        scaled = created * F.lit(fmt.divide)
        value = scaled if fmt.multiply == 1 else F.floor(scaled / F.lit(fmt.multiply))
    else:
        value = F.date_format(F.timestamp_millis(created), fmt.pattern)
    return value.cast(spark_type(spec))


def _time_filled(spec: FieldSpec, fmt: TimeFormat, value: Any) -> tuple[Column, bool]:
    """The time column with its nulls filled, and whether that reads `CREATED_COLUMN`."""
    valid = _default_valid(spec, fmt, value) if value is not None else False
    if valid is True:
        return F.coalesce(column_of(spec.name), _literal(value, spec)), False
    now = _created_in_format(spec, fmt)
    fill = now if valid is False else F.when(valid, _literal(value, spec)).otherwise(now)
    return F.coalesce(column_of(spec.name), fill), True


def null_value_stage(
    schema: Schema,
    time_spec: FieldSpec | None,
    time_format: TimeFormat | None,
    nullable: frozenset[str] = frozenset(),
) -> NullStage:
    """The plan's expressions (module docstring); BuildError when a default does not convert."""
    columns: dict[str, Column] = {}
    needs_created = False
    for spec in schema.fields:
        try:
            value = default_null_value(spec)
        except NullValueError as exc:
            raise BuildError(
                f"column {spec.name!r}: defaultNullValue {spec.default_null_value!r} cannot be "
                f"converted to {spec.data_type}: {exc}"
            ) from None
        is_time = time_spec is not None and spec.name == time_spec.name
        if is_time and time_format is not None and spec.single_value:
            columns[spec.name], needs_created = _time_filled(spec, time_format, value)
            continue
        filled = _filled(spec, value, spec.name in nullable)
        if filled is not None:
            columns[spec.name] = filled
    return NullStage(columns, needs_created)


def apply_null_values(df: DataFrame, stage: NullStage, created: Column | None = None) -> DataFrame:
    """`df` with the stage's columns replaced (every other column unchanged, in place)."""
    if not stage.columns:
        return df
    if not stage.needs_created:
        return df.withColumns(stage.columns)
    with_created = df.withColumn(CREATED_COLUMN, created if created is not None else F.lit(None))
    return with_created.withColumns(stage.columns).drop(CREATED_COLUMN)
