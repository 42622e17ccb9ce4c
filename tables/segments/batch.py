"""The Spark job of a build: the sorted rows of several segments of one schema in one job.

`run_group(spark, plan, inputs, scratch, collect)` takes `(index, path)` pairs (each a local staging
file, or a directory of Parquet files with `offset` and `value`) and runs ONE Spark job over all of
them:
- every input is placed under `<scratch>/input-*/`, so that a single Parquet scan reads them all: a
  large staging file (or a directory) is linked (symlink) as `__seg=<index>/__created=<ms>`, so
  Spark's partition discovery gives its rows their index and their segment's creation time (no
  per-input plan, no path strings to match); small staging files (at most `SMALL_INPUT_BYTES`)
  are copied with pyarrow into one file whose rows carry both (opening many small files costs
  Spark more than reading their rows). The creation times are data, not literals of the plan:
  a literal differs from segment to segment, so every build's generated code would differ and
  be compiled again (Janino, then the JVM's JIT), which cost a single build more JVM CPU than
  its rows;
- the rows are decoded and transformed (`tables.segments.frames`), filtered, then given Pinot's
  default null values (`tables.segments.null_values`, after the filter as Pinot's
  NullValueTransformer), each with its time key (the time column's epoch millis, Spark's
  parsing) and whether it has a problem; the job counts rows with problems as an observed metric
  (no pass of its own);
- with a row filter (`ingestionConfig.filterConfig`), each row also carries whether the filter
  drops it (`FILTERED`); dropped rows never reach a segment: their offsets, per index, are
  `GroupOutput.filtered` (ascending), for the segment to declare them (the ledger excuses
  exactly those offsets), and their problems are not counted;
- with `complexTypeConfig.fieldsToUnnest` (`GroupPlan.unnest`), a message gives one or more rows
  (`tables.segments.complex_types`), each with `frames.UNNEST_KEY`, the last sort key; an offset
  is in `GroupOutput.filtered` only when the filter dropped every row of it, and
  `GroupOutput.filtered_rows` counts the dropped rows;
- `collect=True`: the rows come back to the driver as Arrow (`DataFrame.toArrow`, no shuffle) and
  are sorted there by index, time key (nulls last) and offset (pyarrow), one table per index
  (`GroupOutput.tables`); `collect=False` (one input, too large to hold in the driver): Spark sorts
  them the same way (in one task without a shuffle when the input is small, at most
  `SHUFFLE_ABOVE_BYTES`, else hash-partitioned by index into `SORT_TASKS` tasks) and writes one
  intermediate Parquet file (`GroupOutput.files`) that the driver streams.
Either way the driver then writes the segment's data file with `tables.segments.data_file`, so the
bytes do not depend on the path taken. An index without rows gets an empty table.
The column expressions of a plan are built once per Spark application and reused (`_pipeline`):
building them costs one py4j round trip per expression node, more than a small job's rows.
Only when some row has a problem does a second job (`frames.incomplete_by_group`) count problems
per index and column and sample them. Any failure of the job raises: the caller decides whether
to retry the inputs one by one.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tables.domain.schema import FieldSpec, Schema
from tables.segments import frames, null_values
from tables.segments.errors import BuildError
from tables.segments.parquet_read import read_parquet
from tables.segments.transforms import (
    ComplexTypes,
    RowFilter,
    TimeFormat,
    Transform,
    transform_sources,
)

__all__ = [
    "FILTERED",
    "FLAGGED",
    "INDEX_COLUMN",
    "SMALL_INPUT_BYTES",
    "TIME_KEY",
    "GroupOutput",
    "GroupPlan",
    "run_group",
]

log = logging.getLogger(__name__)

INDEX_COLUMN = "__seg"
TIME_KEY = "__time"  # the row's time key (bigint epoch millis; null: no time)
FLAGGED = frames.FLAGGED_COLUMN
FILTERED = frames.FILTERED_COLUMN
_ROW_INDEX = "__row_seg"  # the index of a row of the merged small inputs
_ROW_CREATED = "__row_created"  # its segment's creation time (ms)
_CREATED_PART = "__created"  # the partition column of a linked input's creation time (ms)
_CREATED = "__seg_created"  # each row's segment creation time, carried to the null values
_MERGED = -1  # the partition value of the merged small inputs
_NO_VALUE = "__HIVE_DEFAULT_PARTITION__"  # Spark's partition value for null
#: Staging files up to this size are merged into one file for the scan.
SMALL_INPUT_BYTES = 4 << 20
#: Tasks that sort a large input's rows for its intermediate file (an input up to
#: SHUFFLE_ABOVE_BYTES is read, decoded and sorted in one task, without a shuffle).
SORT_TASKS = 2
SHUFFLE_ABOVE_BYTES = 16 << 20
_INPUT_SCHEMA = T.StructType(
    [
        T.StructField("offset", T.LongType(), True),
        T.StructField("value", T.BinaryType(), True),
        T.StructField(_ROW_INDEX, T.IntegerType(), True),
        T.StructField(_ROW_CREATED, T.LongType(), True),
        T.StructField(INDEX_COLUMN, T.IntegerType(), True),
        T.StructField(_CREATED_PART, T.LongType(), True),
    ]
)
_MERGED_SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("value", pa.binary()),
        (_ROW_INDEX, pa.int32()),
        (_ROW_CREATED, pa.int64()),
    ]
)


@dataclass(frozen=True)
class GroupPlan:
    """What the segments of one group share (see `tables.segments.builder._plan`)."""

    schema: Schema
    transforms: list[Transform]
    time_spec: FieldSpec | None
    time_format: TimeFormat | None
    row_filter: RowFilter | None = None
    complex_types: ComplexTypes | None = None
    unnest: tuple[str, ...] = ()  # complexTypeConfig.fieldsToUnnest, sorted (complex_types)
    nullable: frozenset[str] = frozenset()  # columns whose nulls are kept (null_values)


@dataclass
class GroupOutput:
    """Per index: its sorted rows (`tables`) or an intermediate file of them (`files`), with the
    columns of `frames.segment_columns` plus `TIME_KEY` and `FLAGGED`; problems per index when
    some row had one."""

    tables: dict[int, pa.Table] = field(default_factory=dict)
    files: dict[int, Path] = field(default_factory=dict)
    incomplete: dict[int, frames.Incomplete] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    filtered: dict[int, list[int]] = field(default_factory=dict)  # offsets the filter dropped
    filtered_rows: dict[int, int] = field(default_factory=dict)  # rows it dropped (unnesting)


def _place_inputs(
    inputs: Sequence[tuple[int, str]], input_dir: Path, created: Mapping[int, int]
) -> None:
    """Every input under `input_dir` for one scan (see the module docstring)."""
    small: list[tuple[int, Path]] = []
    for index, source in inputs:
        target = Path(source).resolve()
        if not target.exists():
            raise BuildError(f"the staged rows {source} do not exist")
        ms = created.get(index)
        link_dir = (
            input_dir
            / f"{INDEX_COLUMN}={index}"
            / f"{_CREATED_PART}={_NO_VALUE if ms is None else ms}"
        )
        if target.is_dir():
            link_dir.parent.mkdir(parents=True, exist_ok=True)
            link_dir.symlink_to(target, target_is_directory=True)
        elif target.stat().st_size <= SMALL_INPUT_BYTES and len(inputs) > 1:
            small.append((index, target))
        else:
            link_dir.mkdir(parents=True)
            (link_dir / "rows.parquet").symlink_to(target)
    if small:
        merged_dir = input_dir / f"{INDEX_COLUMN}={_MERGED}" / f"{_CREATED_PART}={_NO_VALUE}"
        merged_dir.mkdir(parents=True)
        with pq.ParquetWriter(merged_dir / "rows.parquet", _MERGED_SCHEMA) as writer:
            for index, path in small:
                rows = read_parquet(path, columns=["offset", "value"])
                seg = pa.array([index] * rows.num_rows, pa.int32())
                ms = pa.array([created.get(index)] * rows.num_rows, pa.int64())
                writer.write_table(
                    pa.table([rows["offset"], rows["value"], seg, ms], schema=_MERGED_SCHEMA)
                )


@dataclass(frozen=True)
class _Pipeline:
    """The column expressions of a group's job, built once per plan and session (building them
    costs a py4j round trip per expression node: more than a small job's rows)."""

    stages: list[frames.Stage]  # scan -> decoded and transformed rows
    output: frames.Stage  # -> index, segment columns, offset, time key, flagged
    keys: list[Column]  # the sort
    flagged: Column  # the observed count
    nulls: null_values.NullStage  # Pinot's default null values, after the transforms and filter


_pipelines: dict[tuple[str, str], _Pipeline] = {}  # by Spark application id and plan


def _time_key(plan: GroupPlan) -> Column:
    if plan.time_spec is None:
        return F.lit(None).cast("bigint")
    return frames.time_millis(plan.time_spec, plan.time_format).cast("bigint")


def _unnest_key(plan: GroupPlan) -> list[str]:
    """`[UNNEST_KEY]` when the plan unnests (its rows' order within an offset), else none."""
    return [frames.UNNEST_KEY] if plan.unnest and plan.complex_types is not None else []


def _pipeline(spark: SparkSession, plan: GroupPlan, key: str) -> _Pipeline:
    """The plan's expressions; cached under `key` (a text identifying the plan) unless empty."""
    app = spark.sparkContext.applicationId
    cached = _pipelines.get((app, key)) if key else None
    if cached is not None:
        return cached
    index = F.coalesce(F.col(_ROW_INDEX), F.col(INDEX_COLUMN)).alias(INDEX_COLUMN)
    created = F.coalesce(F.col(_ROW_CREATED), F.col(_CREATED_PART)).alias(_CREATED)
    sources = transform_sources(plan.transforms)
    if plan.row_filter is not None:
        sources = list(dict.fromkeys([*sources, *plan.row_filter.sources]))
    carry = [INDEX_COLUMN, _CREATED]
    decoding = frames.decode_stages(plan.schema, sources, carry, plan.complex_types, plan.unnest)
    carry += _unnest_key(plan)  # unnesting: each row's element positions, from decoding on
    stages = [
        [F.col("offset"), F.col("value"), index, created],
        *decoding,
        *frames.transform_stages(plan.transforms, plan.schema, carry),
    ]
    if plan.row_filter is not None:
        stages.append(frames.filter_stage(plan.row_filter, plan.transforms, plan.schema, carry))
        filtered = F.col(FILTERED)
    else:
        filtered = F.lit(False)
    output = [
        F.col(INDEX_COLUMN),
        *[frames.column_of(c) for c in plan.schema.column_names()],
        F.col(frames.OFFSET_COLUMN),
        _time_key(plan).alias(TIME_KEY),
        F.col(FLAGGED),
        filtered.alias(FILTERED),
        *[F.col(c) for c in _unnest_key(plan)],
    ]
    keys = [
        F.col(INDEX_COLUMN).asc(),
        F.col(TIME_KEY).asc_nulls_last(),
        F.col(frames.OFFSET_COLUMN).asc(),
        *[F.col(c).asc() for c in _unnest_key(plan)],
    ]
    flagged = F.count_if(F.col(FLAGGED) & ~filtered).alias("flagged")
    nulls = null_values.null_value_stage(
        plan.schema, plan.time_spec, plan.time_format, plan.nullable
    )
    built = _Pipeline(stages, output, keys, flagged, nulls)
    if key:
        _pipelines[(app, key)] = built
    return built


def _decoded(spark: SparkSession, pipeline: _Pipeline, input_dir: Path) -> DataFrame:
    scanned = spark.read.schema(_INPUT_SCHEMA).parquet(str(input_dir))
    return frames.run_stages(scanned, pipeline.stages)


def _sorted_rows(decoded: DataFrame, pipeline: _Pipeline, spread: bool) -> DataFrame:
    """Sorted rows, one task per index (`spread`: `SORT_TASKS` tasks, each with whole indices;
    else one task, without a shuffle)."""
    out = decoded.select(*pipeline.output)
    out = out.repartition(SORT_TASKS, INDEX_COLUMN) if spread else out.coalesce(1)
    return out.sortWithinPartitions(*pipeline.keys)


def _flagged(observation: Observation) -> int | None:
    """The observed number of rows with problems; None when Spark reported no metrics (it does
    not for some plans of an empty input)."""
    try:
        return int(observation.get.get("flagged") or 0)
    except Exception as exc:
        log.info("no observed metrics from the build job (%s): counting problems apart", exc)
        return None


def _sort(table: pa.Table) -> pa.Table:
    """Spark's order of the rows (index, time key with nulls last, offset, and the element
    positions when unnesting), in the driver: a total order, since (offset, positions) are unique
    within an index."""
    keys = [INDEX_COLUMN, TIME_KEY, frames.OFFSET_COLUMN]
    keys += [frames.UNNEST_KEY] if frames.UNNEST_KEY in table.column_names else []
    return table.sort_by([(key, "ascending", "at_end") for key in keys])


def _split(table: pa.Table, indices: Sequence[int]) -> dict[int, pa.Table]:
    """The collected rows of each index (each index's rows are contiguous, in order)."""
    found: dict[int, pa.Table] = {}
    if table.num_rows:
        runs = pc.run_end_encode(table.column(INDEX_COLUMN).combine_chunks())
        start = 0
        for end, value in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
            found[int(value)] = table.slice(start, end - start)
            start = end
    empty = table.schema.empty_table()
    return {index: found.get(index, empty) for index in indices}


def _pairs(table: pa.Table) -> list[tuple[int, int]]:
    columns = [
        table.column(INDEX_COLUMN).to_pylist(),
        table.column(frames.OFFSET_COLUMN).to_pylist(),
    ]
    return [(int(index), int(offset)) for index, offset in zip(*columns, strict=True)]


def _drop_filtered(table: pa.Table) -> tuple[pa.Table, dict[int, list[int]], dict[int, int]]:
    """The rows the filter keeps, the offsets it dropped per index (ascending: those without a
    row left, as an unnested message can lose some of its rows only), and the rows it dropped."""
    dropped_mask = table.column(FILTERED)
    if not pc.any(dropped_mask).as_py():
        return table, {}, {}
    kept = table.filter(pc.invert(dropped_mask))
    unnested = frames.UNNEST_KEY in table.column_names
    left = set(_pairs(kept)) if unnested else set()
    offsets: dict[int, list[int]] = {}
    rows: dict[int, int] = {}
    for index, offset in _pairs(table.filter(dropped_mask)):
        rows[index] = rows.get(index, 0) + 1
        if (index, offset) not in left:
            offsets.setdefault(index, []).append(offset)
    return kept, {i: _ascending(found, unnested) for i, found in offsets.items()}, rows


def _ascending(offsets: list[int], unnested: bool) -> list[int]:
    """Dropped offsets, ascending; distinct when unnesting (else a repeat stays, for the checks
    of `tables.segments.finish`)."""
    return sorted(set(offsets) if unnested else offsets)


def _drop_filtered_file(part: Path, target: Path) -> tuple[Path, list[int], int]:
    """`part` without the rows the filter dropped (a new file beside it when some were), the
    offsets it dropped (ascending; without a row left, see `_drop_filtered`), and the rows."""
    handle = pq.ParquetFile(part)
    offsets: list[int] = []
    left: set[int] = set()
    unnested = False
    writer: pq.ParquetWriter | None = None
    try:
        for batch in handle.iter_batches(batch_size=64_000):
            table = pa.Table.from_batches([batch])
            mask = table.column(FILTERED)
            offsets += table.filter(mask).column(frames.OFFSET_COLUMN).to_pylist()
            kept = table.filter(pc.invert(mask))
            unnested = frames.UNNEST_KEY in table.column_names
            if unnested:
                left.update(kept.column(frames.OFFSET_COLUMN).to_pylist())
            if writer is None:
                writer = pq.ParquetWriter(target, table.schema)
            writer.write_table(kept)
    finally:
        if writer is not None:
            writer.close()
    rows, offsets = len(offsets), _ascending([o for o in offsets if o not in left], unnested)
    if not rows or writer is None:
        target.unlink(missing_ok=True)
        return part, offsets, rows
    return target, offsets, rows


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return path.stat().st_size


def run_group(
    spark: SparkSession,
    plan: GroupPlan,
    inputs: Sequence[tuple[int, str]],
    scratch: Path,
    collect: bool = True,
    plan_key: str = "",
    created: Mapping[int, int] | None = None,
) -> GroupOutput:
    """Decode, transform and sort the rows of every input in one job (module docstring).
    `plan_key`: a text that identifies `plan` (its expressions are cached under it); `created`:
    each index's segment creation time (the time column's "now", `tables.segments.null_values`)."""
    if not collect and len(inputs) != 1:
        raise ValueError("only a group of one input is written to an intermediate file")
    started = time.monotonic()
    pipeline = _pipeline(spark, plan, plan_key)
    scratch.mkdir(parents=True, exist_ok=True)
    input_dir = scratch / f"input-{uuid.uuid4().hex}"
    _place_inputs(inputs, input_dir, created or {})
    observation = Observation(f"segment-build-{uuid.uuid4().hex}")
    decoded = null_values.apply_null_values(
        _decoded(spark, pipeline, input_dir), pipeline.nulls, F.col(_CREATED)
    ).observe(observation, pipeline.flagged)
    indices = [index for index, _ in inputs]
    output = GroupOutput()
    if collect:
        collected = decoded.select(*pipeline.output).toArrow()
        rows, output.filtered, output.filtered_rows = _drop_filtered(collected)
        output.tables = _split(_sort(rows), indices)
    else:
        spread = sum(_size(Path(source)) for _, source in inputs) > SHUFFLE_ABOVE_BYTES
        target = scratch / f"sorted-{uuid.uuid4().hex}"
        sorted_rows = _sorted_rows(decoded, pipeline, spread).drop(INDEX_COLUMN)
        sorted_rows.coalesce(1).write.parquet(str(target))
        parts = sorted(target.glob("part-*.parquet"))
        if len(parts) > 1:
            raise BuildError(f"Spark wrote {len(parts)} files instead of one in {target}")
        if parts and plan.row_filter is not None:
            kept, dropped, count = _drop_filtered_file(
                parts[0], scratch / f"kept-{uuid.uuid4().hex}"
            )
            parts = [kept]
            if dropped:
                output.filtered = {indices[0]: dropped}
            if count:
                output.filtered_rows = {indices[0]: count}
        if parts:  # none: no rows
            output.files = {indices[0]: parts[0]}
    output.seconds["spark"] = round(time.monotonic() - started, 3)
    if _flagged(observation) != 0:  # None (not observed): count them to know
        mark = time.monotonic()
        columns = plan.schema.column_names()
        again = _decoded(spark, pipeline, input_dir)
        if plan.row_filter is not None:  # a dropped row's problems are not the segment's
            again = again.where(~F.col(FILTERED))
        found = frames.incomplete_by_group(again, INDEX_COLUMN, columns)
        output.incomplete = {int(k): v for k, v in found.items()}
        output.seconds["problems"] = round(time.monotonic() - mark, 3)
    return output
