"""Pure DataFrame functions of a segment build: decode, transform, account, sort, describe.

Nothing here reads or writes files, talks to a service or collects rows to the driver except the
small aggregates of `count_incomplete`, `column_stats` and `summarize` (one row, or at most one row
per column / sample). Every function runs in the JVM: no Python UDFs.

Input: a DataFrame with `offset` (bigint) and `value` (binary: one raw JSON message per row).

Decoding (`decode`): each message is read as a JSON object; for every schema column (and every
transform source) the field's raw text is taken (one `from_json` parse per message, every field
read as text: strings unquoted, numbers, objects and arrays as JSON text; duplicate keys: the last
wins) and cast to the column's Spark type (`spark_type`):
  INT/LONG -> int/bigint (an integral number written as `12.0` is accepted, `1.5` is not),
  FLOAT/DOUBLE -> float/double, BOOLEAN -> boolean (true/false, t/f, yes/no, 1/0),
  TIMESTAMP -> timestamp, UTC (epoch millis as a number, or an ISO-8601 / JDBC text),
  STRING/JSON (and MAP/LIST/STRUCT) -> string (nested values keep their JSON text),
  BYTES -> binary (hex text), BIG_DECIMAL -> decimal(38,18).
A multi-value field (singleValueField false) becomes an array of that type; a single JSON value for
it becomes a one-element array. A missing field or JSON null is simply null (not a problem).

Bad rows. No row is ever dropped: every input row is exactly one output row (with fieldsToUnnest
one or more, see below). A value that does not
fit its column becomes null and the row records a problem `(column, raw text)` in `__problems`
(and `__flagged` is true: the cheap form, when only rows with problems are counted); a
message that is not a JSON object records the problem under the column name `MESSAGE_COLUMN` and
has every column null. A multi-value field with any element that does not fit is null as a whole.

Complex types (`ingestionConfig.complexTypeConfig`, `decode_stages(..., complex_types=...)`), as
Pinot's ComplexTypeTransformer before any transform (`tables.segments.complex_types`): a column
`a<delimiter>b` reads field `b` of the object `a` (any depth; a top-level field `a<delimiter>b`
only when that is absent); collectionNotUnnestedToJson `NON_PRIMITIVE` (Pinot's default) gives a
multi-value column an array of objects or arrays as one JSON text, `ALL` gives it every array as
one JSON text, `NONE` gives a single-value column the only element of a one-element array. (A
single-value column always gets a collection as its JSON text.) fieldsToUnnest
(`decode_stages(..., unnest=...)`): one row per element (the cross product for several fields),
each with its message's `__offset` and its element positions in `UNNEST_KEY`.

Filter (`filter_stage`, `ingestionConfig.filterConfig`, applied after the transforms as in Pinot):
`FILTERED_COLUMN` (`__filtered`) is true for a row the filter function drops. Its columns read the
message's raw fields, a transform's destination its transformed value when the message had none.
The caller drops those rows and counts them (Pinot's realtimeRowsFiltered).
`decode_stages` and `transform_stages` give the same work as lists of column expressions (one per
`select`), which name columns only: a builder makes them once per schema and applies them to any
DataFrame with `run_stages` (building expressions costs a py4j round trip per node).

Output (`segment_columns`): the schema's columns in schema order, then `OFFSET_COLUMN` (`__offset`,
the stream offset of the row), which lets anyone prove which offsets a segment holds.
Ordering (`sort_for_segment`): by the time column's epoch millis (nulls last), ties by offset; the
order is total because offsets are unique, so the output is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tables.domain.schema import FieldSpec, Schema
from tables.segments import complex_types as ct
from tables.segments import transform_functions as tf
from tables.segments.transforms import (
    ComplexTypes,
    RowFilter,
    TimeFormat,
    Transform,
    parse_time_format,
)

__all__ = [
    "FILTERED_COLUMN",
    "FLAGGED_COLUMN",
    "MESSAGE_COLUMN",
    "OFFSET_COLUMN",
    "PROBLEMS_COLUMN",
    "RAW_COLUMN",
    "UNNEST_KEY",
    "ColumnStats",
    "Incomplete",
    "Summary",
    "apply_transforms",
    "column_of",
    "column_stats",
    "count_incomplete",
    "decode",
    "decode_stages",
    "filter_stage",
    "incomplete_by_group",
    "run_stages",
    "segment_columns",
    "sort_for_segment",
    "spark_schema_for",
    "spark_type",
    "summarize",
    "time_millis",
    "transform_stages",
]

OFFSET_COLUMN = "__offset"
RAW_COLUMN = "__raw"
PROBLEMS_COLUMN = "__problems"
FLAGGED_COLUMN = "__flagged"
FILTERED_COLUMN = "__filtered"
UNNEST_KEY = ct.UNNEST_KEY  # with fieldsToUnnest: a row's element positions (its order)
MESSAGE_COLUMN = "(message)"
MAX_SAMPLES = 10
_SAMPLE_CHARS = 200
_MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

_SCALAR_TYPES: dict[str, T.DataType] = {
    "INT": T.IntegerType(),
    "LONG": T.LongType(),
    "FLOAT": T.FloatType(),
    "DOUBLE": T.DoubleType(),
    "BOOLEAN": T.BooleanType(),
    "TIMESTAMP": T.TimestampType(),
    "BYTES": T.BinaryType(),
    "BIG_DECIMAL": T.DecimalType(38, 18),
}


def column_of(name: str) -> Column:
    """The column `name` of a DataFrame, taken literally: a schema column may have a dot in its
    name (`user.name`, as complexTypeConfig flattening makes them), which `F.col` would read as a
    field of a struct."""
    return F.col("`" + name.replace("`", "``") + "`")


def spark_type(spec: FieldSpec) -> T.DataType:
    """The Spark type of a schema column (see the module docstring)."""
    scalar = _SCALAR_TYPES.get(spec.data_type, T.StringType())
    return scalar if spec.single_value else T.ArrayType(scalar)


def spark_schema_for(schema: Schema) -> T.StructType:
    """The schema of a segment's rows: the schema's columns, then `__offset`."""
    fields = [T.StructField(spec.name, spark_type(spec), True) for spec in schema.fields]
    return T.StructType([*fields, T.StructField(OFFSET_COLUMN, T.LongType(), True)])


def _cast_scalar(raw: Column, data_type: str) -> Column:
    """`raw` (text) as `data_type`, or null when it does not fit."""
    if data_type in ("INT", "LONG"):
        target = "int" if data_type == "INT" else "bigint"
        decimal = raw.try_cast("decimal(38,6)")
        integral = F.when(decimal == F.floor(decimal), decimal.try_cast(target))
        return F.coalesce(raw.try_cast(target), integral)
    if data_type == "TIMESTAMP":
        millis = raw.try_cast("bigint")
        in_range = F.abs(millis) <= F.lit(_MAX_TIMESTAMP_MS)
        from_millis = F.when(in_range, F.timestamp_millis(F.when(in_range, millis)))
        return F.when(raw.rlike(r"^\s*-?\d+\s*$"), from_millis).otherwise(raw.try_cast("timestamp"))
    if data_type == "BYTES":
        return F.try_to_binary(raw, F.lit("hex"))
    spark = _SCALAR_TYPES.get(data_type)
    return raw if spark is None else raw.try_cast(spark)


def _cast(raw: Column, spec: FieldSpec) -> Column:
    if spec.single_value:
        return _cast_scalar(raw, spec.data_type)
    parsed = F.from_json(raw, T.ArrayType(T.StringType()))
    items = F.when(raw.isNull(), F.lit(None)).otherwise(F.coalesce(parsed, F.array(raw)))
    return _cast_items(items, spec)


def _cast_items(items: Column, spec: FieldSpec) -> Column:
    """Text elements as the multi-value column `spec`; null when one does not fit."""
    pairs = F.transform(
        items, lambda item: F.struct(item.alias("a"), _cast_scalar(item, spec.data_type).alias("b"))
    )
    failed = F.exists(pairs, lambda pair: pair["a"].isNotNull() & pair["b"].isNull())
    typed = F.transform(pairs, lambda pair: pair["b"])
    return F.when(~failed, typed)


def _problem(column: str, raw: Column, condition: Column) -> Column:
    return F.when(condition, F.struct(F.lit(column).alias("column"), raw.alias("raw")))


def _compact(problems: Sequence[Column]) -> Column:
    empty = F.array().cast("array<struct<column:string,raw:string>>")
    if not problems:
        return empty
    return F.filter(F.array(*problems), lambda p: p.isNotNull())


def _any(conditions: Sequence[Column]) -> Column:
    flag = conditions[0]
    for condition in conditions[1:]:
        flag = flag | condition
    return flag


# One JSON parse per message (`from_json`, every field read as text). These options make it accept
# exactly what `json_tuple` accepts (its earlier implementation): single quotes and raw control
# characters inside strings yes; NaN/Infinity, leading zeros, comments, unquoted names no.
_JSON_OPTIONS = {
    "mode": "PERMISSIVE",
    "allowNonNumericNumbers": "false",
    "allowUnquotedControlChars": "true",
    "allowSingleQuotes": "true",
}

Stage = list[Column]  # one `select`: its column expressions, in order


def _unused_name(base: str, taken: Iterable[str]) -> str:
    names = set(taken)
    candidate = base
    while candidate in names:
        candidate = "_" + candidate
    return candidate


def decode_stages(
    schema: Schema,
    extra_fields: Iterable[str] = (),
    carry: Sequence[str] = (),
    complex_types: ComplexTypes | None = None,
    unnest: Sequence[str] = (),
) -> list[Stage]:
    """The selects of `decode`, as column expressions: they name columns only, so one list serves
    any DataFrame of `(offset, value, *carry)` rows (build it once, apply it with `run_stages`).
    `unnest` (with `complex_types`): fieldsToUnnest, sorted; the output also has `UNNEST_KEY`."""
    names = list(dict.fromkeys([*schema.column_names(), *extra_fields]))
    if not names:
        raise ValueError(f"schema {schema.name!r} has no columns to decode")
    read = names
    unnest = tuple(unnest) if complex_types is not None else ()
    if complex_types is not None:
        heads = [n.split(complex_types.delimiter)[0] for n in [*names, *unnest]]
        read = list(dict.fromkeys([*names, *unnest, *(h for h in heads if h)]))
    corrupt = _unused_name("_corrupt_record", read)
    fields = [T.StructField(name, T.StringType(), True) for name in read]
    json_schema = T.StructType([*fields, T.StructField(corrupt, T.StringType(), True)])
    text = F.col("value").cast("string")
    options = {**_JSON_OPTIONS, "columnNameOfCorruptRecord": corrupt}
    kept = [F.col(c) for c in carry]
    parse = [
        F.col("offset").cast("bigint").alias(OFFSET_COLUMN),
        *kept,
        text.alias("_text"),
        F.from_json(text, json_schema, options).alias("_parsed"),
    ]
    # Not an object: not JSON at all, or a JSON scalar or array (from_json: the corrupt-record
    # field holds the text), or no text (from_json: null).
    is_object = F.col("_parsed").isNotNull() & F.col("_parsed").getField(corrupt).isNull()
    exploded: list[Stage] = []  # unnesting: one row per element (tables.segments.complex_types)
    if unnest and complex_types is not None:
        keep = [OFFSET_COLUMN, *carry, "_text"]
        exploded = ct.unnest_stages("_parsed", unnest, complex_types.delimiter, keep)
        kept = [*kept, F.col(UNNEST_KEY)]
    parsed = F.col("_parsed")
    if complex_types is None:
        raw = F.struct(*[parsed.getField(name).alias(name) for name in names])
    else:
        specs = {spec.name: spec for spec in schema.fields}
        values = []
        for name in names:
            value = ct.read_field(parsed, name, complex_types.delimiter, unnest)
            if name in specs:
                value = ct.collection_text(value, specs[name], complex_types.to_json)
            values.append(value.alias(name))
        raw = F.struct(*values)
    stage = [
        F.col(OFFSET_COLUMN),
        *kept,
        F.col("_text"),
        is_object.alias("_is_object"),
        raw.alias(RAW_COLUMN),
    ]
    typed: list[Column] = []
    conditions = [~F.col("_is_object")]
    problems = [_problem(MESSAGE_COLUMN, F.col("_text"), conditions[0])]
    for spec in schema.fields:
        source = F.col(RAW_COLUMN).getField(spec.name)
        value = _cast(source, spec)
        typed.append(value.alias(spec.name))
        conditions.append(source.isNotNull() & value.isNull())
        problems.append(_problem(spec.name, source, conditions[-1]))
    typing = [
        F.col(OFFSET_COLUMN),
        *kept,
        *typed,
        F.col(RAW_COLUMN),
        _compact(problems).alias(PROBLEMS_COLUMN),
        _any(conditions).alias(FLAGGED_COLUMN),
    ]
    return [parse, *exploded, stage, typing]


def run_stages(df: DataFrame, stages: Sequence[Stage]) -> DataFrame:
    for stage in stages:
        df = df.select(*stage)
    return df


def decode(
    df: DataFrame,
    schema: Schema,
    extra_fields: Iterable[str] = (),
    carry: Sequence[str] = (),
    complex_types: ComplexTypes | None = None,
    unnest: Sequence[str] = (),
) -> DataFrame:
    """`(offset, value)` rows -> `__offset`, the `carry` columns unchanged, the typed schema
    columns, `__raw` (the raw text of every field read, for transforms), `__problems` and
    `__flagged` (whether the row has a problem: cheaper than `__problems` when only counted). One
    output row per input row (`unnest`: one or more, with `UNNEST_KEY`); each message is parsed
    once."""
    return run_stages(df, decode_stages(schema, extra_fields, carry, complex_types, unnest))


def _typed_scalar(value: tf.Value, data_type: str) -> Column:
    """A transform's non-text result as a single value of `data_type` (PinotDataType's
    conversions: numbers truncate toward zero, TIMESTAMP from epoch millis)."""
    if data_type == "TIMESTAMP":
        millis = value.column.try_cast("bigint")
        in_range = F.abs(millis) <= F.lit(_MAX_TIMESTAMP_MS)
        return F.when(in_range, F.timestamp_millis(F.when(in_range, millis)))
    if data_type in ("STRING", "JSON"):
        return value.column.cast("string")
    spark = _SCALAR_TYPES.get(data_type)
    if spark is None or data_type == "BYTES":
        return _cast_scalar(value.column.cast("string"), data_type)
    return value.column.try_cast(spark)


def _transform_result(value: tf.Value, spec: FieldSpec) -> Column:
    """A transform's result as the column `spec`."""
    if value.kind == tf.RAW:
        return _cast(value.column, spec)
    if not spec.single_value:
        return _cast_items(tf.as_array(value), spec)
    if value.kind == tf.ARRAY:  # one value or none: a single-value column holds no list
        only = F.when(F.size(value.column) == 1, F.try_element_at(value.column, F.lit(1)))
        return _cast_scalar(only, spec.data_type)
    if value.kind == tf.STRING:
        return _cast_scalar(value.column, spec.data_type)
    return _typed_scalar(value, spec.data_type)


def _transform_value(transform: Transform, spec: FieldSpec) -> tuple[Column, Column]:
    """The transform's value for `spec`, and whether a null value is a rejected row."""
    value = tf.compile_expression(transform.expr, lambda name: F.col(RAW_COLUMN).getField(name))
    result = _transform_result(value, spec)
    if value.may_be_null:
        return result, F.lit(False)
    rejected = result.isNull()
    for source in transform.sources:
        rejected = rejected & F.col(RAW_COLUMN).getField(source).isNotNull()
    return result, rejected


def transform_stages(
    transforms: Sequence[Transform], schema: Schema, carry: Sequence[str] = ()
) -> list[Stage]:
    """The selects of `apply_transforms` over `decode`'s output (one per transform, in order)."""
    stages: list[Stage] = []
    for transform in transforms:
        spec = schema.field(transform.column)
        if spec is None:  # parse_transforms refuses these; keep the function total anyway
            continue
        own = F.col(RAW_COLUMN).getField(transform.column)
        if transform.source is not None:
            source = F.col(RAW_COLUMN).getField(transform.source)
        else:
            source = F.lit(transform.expression)
        value, rejected = _transform_value(transform, spec)
        missing = own.isNull()
        condition = missing & rejected
        failed = _problem(spec.name, source, condition)
        columns = [
            F.when(missing, value).otherwise(column_of(name)).alias(name)
            if name == spec.name
            else column_of(name)
            for name in schema.column_names()
        ]
        stages.append(
            [
                F.col(OFFSET_COLUMN),
                *[F.col(c) for c in carry],
                *columns,
                F.col(RAW_COLUMN),
                F.concat(F.col(PROBLEMS_COLUMN), _compact([failed])).alias(PROBLEMS_COLUMN),
                (F.col(FLAGGED_COLUMN) | condition).alias(FLAGGED_COLUMN),
            ]
        )
    return stages


def apply_transforms(
    df: DataFrame, transforms: Sequence[Transform], schema: Schema, carry: Sequence[str] = ()
) -> DataFrame:
    """Fill each transform's column from its source fields where the message had no value."""
    return run_stages(df, transform_stages(transforms, schema, carry))


def _as_text(spec: FieldSpec) -> Column:
    """A typed column as the raw text a transform or filter reads."""
    column = column_of(spec.name)
    if not spec.single_value:
        return F.to_json(column)
    if spec.data_type == "TIMESTAMP":
        return F.unix_millis(column).cast("string")
    if spec.data_type == "BYTES":
        return F.hex(column)
    return column.cast("string")


def filter_stage(
    row_filter: RowFilter,
    transforms: Sequence[Transform],
    schema: Schema,
    carry: Sequence[str] = (),
) -> Stage:
    """The select that adds `FILTERED_COLUMN` to `transform_stages`' output (module docstring)."""
    destinations = {t.column for t in transforms}

    def field(name: str) -> Column:
        raw = F.col(RAW_COLUMN).getField(name)
        spec = schema.field(name)
        if name in destinations and spec is not None:
            return F.coalesce(raw, _as_text(spec))
        return raw

    dropped = tf.compile_filter(row_filter.expr, field)
    return [
        F.col(OFFSET_COLUMN),
        *[F.col(c) for c in carry],
        *[column_of(name) for name in schema.column_names()],
        F.col(RAW_COLUMN),
        F.col(PROBLEMS_COLUMN),
        F.col(FLAGGED_COLUMN),
        dropped.alias(FILTERED_COLUMN),
    ]


def segment_columns(df: DataFrame, schema: Schema) -> DataFrame:
    """Only what a segment stores: the schema's columns in order, then `__offset`."""
    return df.select(*[column_of(name) for name in schema.column_names()], F.col(OFFSET_COLUMN))


def time_millis(spec: FieldSpec, fmt: TimeFormat | None = None) -> Column:
    """Epoch millis of the time column `spec` (null when it has no value or does not parse)."""
    fmt = fmt or parse_time_format(spec)
    column = column_of(spec.name)
    if spec.data_type == "TIMESTAMP" or fmt.kind == "TIMESTAMP":
        if spec.data_type == "TIMESTAMP":
            return F.unix_millis(column)
        return column.try_cast("bigint")
    if fmt.kind == "EPOCH":
        value = column.try_cast("bigint") * F.lit(fmt.multiply)
        return value if fmt.divide == 1 else F.floor(value / F.lit(fmt.divide)).cast("bigint")
    return F.unix_millis(F.try_to_timestamp(column.cast("string"), F.lit(fmt.pattern)))


def sort_for_segment(df: DataFrame, time_key: Column | str | None) -> DataFrame:
    """Rows in segment order: `time_key` ascending (nulls last), then `__offset`."""
    keys: list[Column] = []
    if time_key is not None:
        keys.append((F.col(time_key) if isinstance(time_key, str) else time_key).asc_nulls_last())
    return df.orderBy(*keys, F.col(OFFSET_COLUMN).asc())


@dataclass(frozen=True)
class Incomplete:
    rows: int
    by_column: dict[str, int]
    problems: list[str]


def count_incomplete(
    df: DataFrame, max_samples: int = MAX_SAMPLES, columns: Sequence[str] | None = None
) -> Incomplete:
    """Rows with at least one problem, problems per column, and the first `max_samples` problems
    in offset order as `offset N: column C: cannot convert 'raw'` sentences. `columns`: the
    columns that can have problems (default: every column of `df` but the internal ones)."""
    if columns is None:
        internal = {OFFSET_COLUMN, RAW_COLUMN, PROBLEMS_COLUMN, FLAGGED_COLUMN}
        columns = [c for c in df.columns if c not in internal]
    found = incomplete_by_group(df.withColumn("_group", F.lit(0)), "_group", columns, max_samples)
    return found.get(0, Incomplete(0, {}, []))


def incomplete_by_group(
    df: DataFrame, group: str, columns: Sequence[str], max_samples: int = MAX_SAMPLES
) -> dict[Any, Incomplete]:
    """`count_incomplete` for every value of the column `group` (groups without a problem are
    absent), in one Spark job: rows with problems are ranked by offset within their group, the
    first `max_samples` of them are collected (they hold at least that many problems)."""
    flagged = df.where(F.col(FLAGGED_COLUMN)) if FLAGGED_COLUMN in df.columns else df
    flagged = flagged.where(F.size(PROBLEMS_COLUMN) > 0)
    window = Window.partitionBy(group).orderBy(OFFSET_COLUMN)
    ranked = flagged.select(
        group, OFFSET_COLUMN, PROBLEMS_COLUMN, F.row_number().over(window).alias("_rank")
    )
    names = list(dict.fromkeys([MESSAGE_COLUMN, *columns]))
    counts = [_problems_of(name).alias(f"_c{i}") for i, name in enumerate(names)]
    sample = F.when(F.col("_rank") <= max_samples, F.struct(OFFSET_COLUMN, PROBLEMS_COLUMN))
    rows = (
        ranked.groupBy(group)
        .agg(F.count(F.lit(1)).alias("_rows"), *counts, F.collect_list(sample).alias("_samples"))
        .collect()
    )
    found: dict[Any, Incomplete] = {}
    for row in rows:
        by_column = {n: int(row[f"_c{i}"]) for i, n in enumerate(names) if row[f"_c{i}"]}
        samples = _sentences(row["_samples"], max_samples)
        found[row[group]] = Incomplete(int(row["_rows"]), dict(sorted(by_column.items())), samples)
    return found


def _problems_of(column: str) -> Column:
    """The number of problems of `column` in the aggregated rows."""
    return F.sum(F.size(F.filter(PROBLEMS_COLUMN, lambda p: p["column"] == F.lit(column))))


def _sentences(samples: Sequence[Any], max_samples: int = MAX_SAMPLES) -> list[str]:
    """The first `max_samples` problems of the sampled rows, by offset then column."""
    problems = sorted(
        (
            (sample[OFFSET_COLUMN], problem["column"], problem["raw"])
            for sample in samples
            for problem in sample[PROBLEMS_COLUMN]
        ),
        key=lambda item: item[:2],
    )
    sentences = []
    for offset, column, raw in problems[:max_samples]:
        shown = raw if raw is None or len(raw) <= _SAMPLE_CHARS else raw[:_SAMPLE_CHARS] + "..."
        what = "not a JSON object" if column == MESSAGE_COLUMN else "cannot convert"
        sentences.append(f"offset {offset}: column {column}: {what} {shown!r}")
    return sentences


@dataclass(frozen=True)
class Summary:
    total_docs: int
    distinct_offsets: int
    min_offset: int | None
    max_offset: int | None
    start_time_ms: int | None
    end_time_ms: int | None


def summarize(df: DataFrame, time_key: Column | None) -> Summary:
    """Row count, offset range and distinctness, and the time range, in one aggregation."""
    millis = time_key if time_key is not None else F.lit(None).cast("bigint")
    row = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.count_distinct(OFFSET_COLUMN).alias("d"),
        F.min(OFFSET_COLUMN).alias("lo"),
        F.max(OFFSET_COLUMN).alias("hi"),
        F.min(millis).alias("start"),
        F.max(millis).alias("end"),
    ).first()
    assert row is not None  # a global aggregation always yields one row
    return Summary(int(row["n"]), int(row["d"]), row["lo"], row["hi"], row["start"], row["end"])


@dataclass(frozen=True)
class ColumnStats:
    """Per-column statistics; min/max are Python values of the column's Spark type (elements for
    multi-value columns; epoch millis for TIMESTAMP), None when the column holds no value."""

    cardinality: int
    min_value: Any
    max_value: Any
    total_docs: int
    single_value: bool
    has_null: bool


def _stat_value(column: Column, spec: FieldSpec) -> Column:
    return F.unix_millis(column) if spec.data_type == "TIMESTAMP" else column


def column_stats(df: DataFrame, schema: Schema) -> dict[str, ColumnStats]:
    """Exact distinct count, min, max and null presence of every schema column (Spark aggregates;
    nulls are not counted as a distinct value; multi-value columns are counted over elements)."""
    single = [s for s in schema.fields if s.single_value]
    aggs: list[Column] = [F.count(F.lit(1)).alias("_n")]
    for i, spec in enumerate(single):
        col = _stat_value(column_of(spec.name), spec)
        aggs += [
            F.count_distinct(col).alias(f"c{i}"),
            F.min(col).alias(f"lo{i}"),
            F.max(col).alias(f"hi{i}"),
            F.max(col.isNull()).alias(f"null{i}"),
        ]
    row = df.agg(*aggs).first()
    assert row is not None
    total = int(row["_n"])
    stats: dict[str, ColumnStats] = {}
    for i, spec in enumerate(single):
        stats[spec.name] = ColumnStats(
            int(row[f"c{i}"]), row[f"lo{i}"], row[f"hi{i}"], total, True, bool(row[f"null{i}"])
        )
    for spec in schema.fields:
        if spec.single_value:
            continue
        col = column_of(spec.name)
        exploded = df.select(F.explode_outer(col).alias("e"), col.isNull().alias("n"))
        elements = exploded.select(_stat_value(F.col("e"), spec).alias("e"), "n")
        mv = elements.agg(
            F.count_distinct("e").alias("c"),
            F.min("e").alias("lo"),
            F.max("e").alias("hi"),
            F.max(F.col("n") | F.col("e").isNull()).alias("null"),
        ).first()
        assert mv is not None
        stats[spec.name] = ColumnStats(
            int(mv["c"]), mv["lo"], mv["hi"], total, False, bool(mv["null"])
        )
    return {spec.name: stats[spec.name] for spec in schema.fields}
