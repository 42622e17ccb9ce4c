"""Statistics of a segment's rows, with pyarrow in the driver.

The builder computes the per-column statistics of `metadata.properties` here, from the rows it
writes into `data.parquet` (in memory, or read back from the file one column at a time so that the
driver holds one column of a large segment at once), instead of in extra Spark jobs.

Contract: the values equal what Spark's aggregates give on the same rows
(`tables.segments.frames.column_stats` and `summarize`, which the tests use as the reference):
- cardinality: exact number of distinct non-null values (for a multi-value column: of its
  elements); FLOAT/DOUBLE count every NaN as one value and -0.0 as 0.0, as Spark does;
- min/max: Spark's ordering (strings and bytes by unsigned bytes, false < true, NaN above every
  number: the max is NaN when a NaN is present, the min only when every value is NaN); a zero
  extreme keeps the sign of the column's first zero in file order; TIMESTAMP as epoch millis
  (floor of the stored microseconds), other types as Python values of the column;
- has_null: a null value, or for a multi-value column a null or empty list or a null element.
- `offsets_summary`: distinct offsets and their range.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tables.domain.schema import FieldSpec, Schema
from tables.segments.frames import OFFSET_COLUMN, ColumnStats

__all__ = [
    "FileStats",
    "column_stats",
    "file_stats",
    "offsets_summary",
    "stats_of",
    "values_stats",
]


class FileStats:
    """Everything the builder needs of a segment's rows."""

    def __init__(
        self,
        total_docs: int,
        distinct_offsets: int,
        min_offset: int | None,
        max_offset: int | None,
        columns: dict[str, ColumnStats],
    ) -> None:
        self.total_docs = total_docs
        self.distinct_offsets = distinct_offsets
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.columns = columns


def _combine(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values


def _timestamp_millis(values: pa.Array) -> pa.Array:
    micros = pc.cast(values, pa.int64())
    per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[values.type.unit]
    if per_ms is None:
        return pc.multiply(micros, 1000)
    if per_ms == 1:
        return micros
    # Floor division (Spark's unix_millis floors): Arrow's integer division truncates.
    quotient = pc.divide(micros, per_ms)
    remainder = pc.subtract(micros, pc.multiply(quotient, per_ms))
    return pc.if_else(pc.less(remainder, 0), pc.subtract(quotient, 1), quotient)


def _first_zero(values: pa.Array) -> float:
    """The first zero of a float array in order (-0.0 or 0.0)."""
    index = pc.index(values, pa.scalar(0.0, values.type)).as_py()
    return values[index].as_py()


def _float_stats(values: pa.Array) -> tuple[int, Any, Any]:
    nan = pc.is_nan(values).fill_null(False)
    has_nan = bool(pc.any(nan).as_py())
    numbers = pc.filter(values, pc.invert(nan)) if has_nan else values
    numbers = pc.drop_null(numbers)
    normalized = pc.add(numbers, pa.scalar(0.0, numbers.type))  # -0.0 + 0.0 == 0.0
    distinct = pc.count_distinct(normalized, mode="only_valid").as_py() + (1 if has_nan else 0)
    if len(numbers) == 0:
        extreme = float("nan") if has_nan else None
        return distinct, extreme, extreme
    bounds = pc.min_max(numbers)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low == 0.0:
        low = _first_zero(numbers)
    if high == 0.0:
        high = _first_zero(numbers)
    return distinct, low, (float("nan") if has_nan else high)


def values_stats(values: pa.Array, spec: FieldSpec) -> tuple[int, Any, Any, bool]:
    """(cardinality, min, max, has a null) of single values of `spec`'s type."""
    values = _combine(values)
    has_null = values.null_count > 0
    if spec.data_type == "TIMESTAMP" and pa.types.is_timestamp(values.type):
        values = _timestamp_millis(values)
    if pa.types.is_floating(values.type):
        distinct, low, high = _float_stats(values)
        return distinct, low, high, has_null
    distinct = pc.count_distinct(values, mode="only_valid").as_py()
    if values.null_count == len(values):
        return distinct, None, None, has_null
    bounds = pc.min_max(values)
    return distinct, bounds["min"].as_py(), bounds["max"].as_py(), has_null


def column_stats(values: pa.ChunkedArray | pa.Array, spec: FieldSpec) -> ColumnStats:
    """The statistics of one column (see the module docstring)."""
    values = _combine(values)
    total = len(values)
    if spec.single_value:
        distinct, low, high, has_null = values_stats(values, spec)
        return ColumnStats(distinct, low, high, total, True, has_null)
    lengths = pc.list_value_length(values)
    empty_or_null = values.null_count > 0 or bool(pc.any(pc.equal(lengths, 0)).as_py() or False)
    elements = pc.list_flatten(values)
    distinct, low, high, element_null = values_stats(elements, spec)
    return ColumnStats(distinct, low, high, total, False, empty_or_null or element_null)


def offsets_summary(offsets: pa.ChunkedArray | pa.Array) -> tuple[int, int | None, int | None]:
    """(distinct offsets, min, max) of the `__offset` column."""
    offsets = _combine(offsets)
    if len(offsets) == 0:
        return 0, None, None
    bounds = pc.min_max(offsets)
    distinct = pc.count_distinct(offsets, mode="all").as_py()
    return distinct, bounds["min"].as_py(), bounds["max"].as_py()


def stats_of(
    column: Callable[[str], pa.ChunkedArray | pa.Array],
    total: int,
    schema: Schema,
    threads: int = 1,
) -> FileStats:
    """The statistics of a segment's rows; `column(name)` gives one column (of a table in memory,
    or read from the written file one at a time). `threads` > 1: columns in parallel (pyarrow's
    kernels release the GIL), for a `column` that is safe to call from threads."""
    distinct, low, high = offsets_summary(column(OFFSET_COLUMN))

    def one(spec: FieldSpec) -> ColumnStats:
        return column_stats(column(spec.name), spec)

    if threads > 1 and len(schema.fields) > 1:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            found = list(pool.map(one, schema.fields))
    else:
        found = [one(spec) for spec in schema.fields]
    columns = {spec.name: stats for spec, stats in zip(schema.fields, found, strict=True)}
    return FileStats(total, distinct, low, high, columns)


def file_stats(path: Path, schema: Schema) -> FileStats:
    """`stats_of` the data file at `path`, read one column at a time."""
    handle = pq.ParquetFile(path)
    return stats_of(
        lambda name: handle.read(columns=[name]).column(0), handle.metadata.num_rows, schema
    )
