"""Segment builds on Spark: staged rows or a re-read stream range -> one packed segment.

Entry points (plain arguments; no Django, so the job runs anywhere Spark and the stream's client
library run):
- `write_staging(pairs, path)` (from `tables.segments.staging`): the server side. Writes
  `(offset, message bytes)` pairs, in the order given, to one Parquet file (columns `offset` int64,
  `value` binary) with pyarrow, atomically (temporary file beside it, then rename).
- `build_batch(spark, items, scratch_dir)`: builds several segments, each from its own staging
  file (`BatchItem`: request, staging URI, work directory), in as few Spark jobs as it can: the
  items whose schema and transforms are the same share ONE Spark job (`tables.segments.batch`).
  It returns one outcome per item, in order: a `BuildResult`, or the exception that item failed
  with. Items fail on their own: a configuration problem, a missing input or bad offsets fail
  that item only, and when a shared job fails, its items are built again one by one so that only
  the item at fault fails.
- `build_from_staging(spark, request, staging_uri, work_dir)`: a batch of one (raises its error).
  `file://` URIs and plain paths are read by Spark directly; other schemes (`s3://`, ...) are
  first copied into `work_dir` through fsspec.
- `build_from_stream(spark, request, stream_config, partition, work_dir, default_redis_url)`:
  re-ingests `[start_offset, end_offset)` of one partition of the table's stream, for any plugin
  with an offset-range source (`tables.streams.base`: Redis, Kafka). The driver asks the plugin's
  provider for the earliest and latest offsets; Spark tasks read offset chunks with the plugin's
  `RangeSource` (pickled by value with the rest of `tables.streams`, so executors need the
  stream's client library, not this code base), each with its own client; the rows are written
  once to Parquet files in `work_dir` and then go through exactly the same steps as a staged file,
  so the segment equals the one built from staging of the same rows (same rows, same CRC, same
  tar bytes). A start offset the stream no longer holds raises `DataLoss` naming the first
  available offset and how many offsets were lost, and so do offsets lost while reading (a dense
  stream: fewer rows than offsets; a sparse one such as Kafka, whose transaction markers and
  compaction leave offsets without a message: ranges its source reports below the low
  watermark), unless `allow_data_loss=True`; offsets not produced yet raise `BuildError`.
- `read_segment(tar_path)`: metadata properties and rows of a packed segment.

Contract of a build:
- Every input row becomes exactly one row of the segment (see `tables.segments.frames` for bad
  values: nulled, counted in `incomplete_rows` / `incomplete_by_column`, sampled in `problems`),
  except the rows `ingestionConfig.filterConfig` drops: counted in `filtered_rows` (Pinot's
  realtimeRowsFiltered) and declared by the segment (`FILTERED_OFFSETS_FILE` of
  `tables.domain.ledger`), so that the ledger excuses exactly those offsets.
  `ingestionConfig.complexTypeConfig` is honoured while decoding (`tables.segments.complex_types`);
  with `fieldsToUnnest` an input row becomes one or more rows, all at its offset (`total_docs`
  counts rows, as Pinot), and the segment declares it (`UNNEST_FILE` of `tables.domain.ledger`)
  so that the ledger counts offsets, not rows, for it (the filter then declares an offset only
  when it dropped every row of it). Input offsets must be unique and inside
  `[start_offset, end_offset)`, else `BuildError` (unnested rows share theirs).
- A missing, null or bad value is then stored as its column's default null value, as Pinot's
  NullValueTransformer (`tables.segments.null_values`: the time column's "now" is the request's
  creation time; with null handling enabled, the Parquet null is kept as the null value vector).
- Configuration problems (schema, table config, unsupported transform or time format, a
  `defaultNullValue` that does not convert) raise `BuildError` before any data is read.
- Jobs: Spark decodes, transforms and sorts the rows, one job per group of items (same schema and
  transforms, estimated rows within `COLLECT_MAX_BYTES`: they come back to the driver as Arrow;
  a larger segment has a job of its own and is streamed from a file), and one more only when some
  row has a problem (count and sample them). The driver writes each segment's files
  (`tables.segments.finish`), statistics included (`tables.segments.arrow_stats`).
- Determinism: rows are sorted by the time column's millis then offset (then, when unnesting, by
  their element positions); `data.parquet` is written
  by pyarrow (`tables.segments.data_file`: fixed row groups and options), so the same rows give
  the same bytes whether the segment was built alone or in a batch, from staging or from the
  stream, by any process (for one pyarrow version); the CRC is `zlib.crc32` of `data.parquet`
  and `data_crc` is the same value. The tar is packed deterministically with the creation time as
  every entry's mtime, so one request builds the same tar bytes every time.
- `work_dir` gets `<segment>/` (the unpacked files) and `<segment>.tar.gz`; a re-run replaces them.
  On a cluster, the work and scratch directories must be on a file system the executors share
  with the driver (the inputs are linked there).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark import cloudpickle
from pyspark.accumulators import AddingAccumulatorParam
from pyspark.sql import Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import tables.streams
from tables.domain.null_values import default_value_problems, nullable_columns
from tables.domain.schema import Schema, SchemaError, parse_schema
from tables.domain.table_config import TableConfigError, parse_table_config
from tables.segments.batch import GroupOutput, GroupPlan, run_group
from tables.segments.complex_types import unnest_fields
from tables.segments.errors import BuildError, DataLoss
from tables.segments.finish import INDEX_VERSION, BuildRequest, BuildResult, finish
from tables.segments.segment_format import read_segment
from tables.segments.staging import local_path, spark_readable, write_staging
from tables.segments.transforms import (
    parse_complex_type_config,
    parse_filter_config,
    parse_time_format,
    parse_transforms,
)
from tables.streams.base import StreamError, provider_for, range_source_for

__all__ = [
    "COLLECT_MAX_BYTES",
    "INDEX_VERSION",
    "BatchItem",
    "BuildError",
    "BuildRequest",
    "BuildResult",
    "DataLoss",
    "build_batch",
    "build_from_staging",
    "build_from_stream",
    "chunk_ranges",
    "read_segment",
    "write_staging",
]

log = logging.getLogger(__name__)

_STREAM_CHUNK = 5_000
#: A job's rows come back to the driver (Arrow) while their estimated size fits this; a larger
#: segment is sorted into a file the driver streams (`tables.segments.batch`).
COLLECT_MAX_BYTES = 256 << 20
_FIXED_WIDTH = {"INT": 4, "LONG": 8, "FLOAT": 4, "DOUBLE": 8, "BOOLEAN": 1, "TIMESTAMP": 8}
_INPUT_SCHEMA = T.StructType(
    [T.StructField("offset", T.LongType(), True), T.StructField("value", T.BinaryType(), True)]
)

# Executors get the stream plugins' range sources by value: they need the stream's client library
# (redis-py, confluent-kafka), not this code base.
cloudpickle.register_pickle_by_value(tables.streams)


@dataclass(frozen=True)
class BatchItem:
    request: BuildRequest
    staging_uri: str  # a staging file (or a directory of Parquet files with offset and value)
    work_dir: Path  # gets <segment>/ and <segment>.tar.gz


_REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",  # patterns without an offset are read as UTC
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # not INT96
}
_valid_patterns: set[str] = set()  # date-time patterns this process's Spark accepted


def _check_pattern(spark: SparkSession, pattern: str) -> None:
    """Refuse a pattern Spark cannot use. A one-row local relation: evaluated in the driver by the
    optimizer, without a Spark job; each pattern is checked once per process."""
    if pattern in _valid_patterns:
        return
    try:
        probe = spark.createDataFrame([("0",)], "s string")
        probe.select(F.try_to_timestamp(F.col("s"), F.lit(pattern))).collect()
    except Exception as exc:
        raise BuildError(f"unsupported date-time pattern {pattern!r}: {exc}") from None
    _valid_patterns.add(pattern)


def _plan(
    spark: SparkSession,
    request: BuildRequest,
    known: dict[tuple[int, int], GroupPlan] | None = None,
) -> GroupPlan:
    """Everything that can be refused before reading data. `known`: the plans made so far in
    one batch, by the identity of their schema and table config objects (a batch's requests of
    one table share them, `tables.builds`): parsing, checks and py4j round trips once per
    table, not once per segment."""
    name = request.segment_name
    if not name or "/" in name or name.startswith("."):
        raise BuildError(f"invalid segment name {name!r}")
    if not 0 <= request.start_offset <= request.end_offset:
        raise BuildError(f"invalid offset range [{request.start_offset}, {request.end_offset})")
    key = (id(request.schema), id(request.table_config))
    if known is not None and key in known:
        return known[key]
    plan = _new_plan(spark, request, name)
    if known is not None:
        known[key] = plan
    return plan


def _new_plan(spark: SparkSession, request: BuildRequest, name: str) -> GroupPlan:
    for key, value in _REQUIRED_CONF.items():
        if (spark.conf.get(key, None) or "").upper() != value.upper():
            raise BuildError(f"the SparkSession must set {key}={value} (see tables.segments.spark)")
    try:
        schema = parse_schema(request.schema)
        config = parse_table_config(request.table_config, schema)
    except (SchemaError, TableConfigError) as exc:
        raise BuildError(f"cannot build {name}: {exc}") from None
    if not schema.fields:
        raise BuildError(f"cannot build {name}: schema {schema.name!r} has no columns")
    ingestion = config.rest.get("ingestionConfig") or {}
    transforms = parse_transforms(ingestion.get("transformConfigs"), schema)
    row_filter = parse_filter_config(ingestion.get("filterConfig"))
    complex_types = parse_complex_type_config(ingestion.get("complexTypeConfig"))
    time_spec = schema.field(config.time_column_name) if config.time_column_name else None
    time_format = parse_time_format(time_spec) if time_spec else None
    patterns = [p for t in transforms for p in t.patterns]
    if row_filter is not None:
        patterns += row_filter.patterns
    if time_format and time_format.pattern:
        patterns.append(time_format.pattern)
    for pattern in dict.fromkeys(patterns):
        _check_pattern(spark, pattern)
    unnest = unnest_fields(ingestion.get("complexTypeConfig")) if complex_types else ()
    if problems := default_value_problems(schema):
        raise BuildError(f"cannot build {name}: {'; '.join(problems)}")
    nullable = nullable_columns(schema, request.table_config)
    return GroupPlan(
        schema, transforms, time_spec, time_format, row_filter, complex_types, unnest, nullable
    )


def _group_key(plan: GroupPlan) -> str:
    """Items whose plans have the same key are decoded by the same Spark expressions."""
    return json.dumps(
        [
            plan.schema.raw,
            [t.__dict__ for t in plan.transforms],
            plan.time_spec.name if plan.time_spec else None,
            plan.row_filter.expression if plan.row_filter else None,
            plan.complex_types.__dict__ if plan.complex_types else None,
            plan.unnest,
            sorted(plan.nullable),
        ],
        sort_keys=True,
        default=str,
    )


def _row_bytes(schema: Schema) -> int:
    """A fixed estimate of one decoded row's size in Arrow (from the schema only, so that the same
    request always takes the same path)."""
    width = 8  # __offset
    for spec in schema.fields:
        one = _FIXED_WIDTH.get(spec.data_type, 48)
        width += one if spec.single_value else 4 * one + 8
    return width


def _jobs(
    items: Sequence[BatchItem], plans: dict[int, GroupPlan]
) -> list[tuple[GroupPlan, list[int], bool]]:
    """Spark jobs for the planned items: (plan, item indices, collect). Items of one schema share
    a job while their estimated rows fit `COLLECT_MAX_BYTES`; a larger item gets a job of its own
    whose rows the driver streams from a file."""
    groups: dict[str, list[int]] = {}
    for index, plan in plans.items():
        groups.setdefault(_group_key(plan), []).append(index)
    jobs: list[tuple[GroupPlan, list[int], bool]] = []
    for indices in groups.values():
        plan = plans[indices[0]]
        width = _row_bytes(plan.schema)
        current: list[int] = []
        size = 0
        for index in indices:
            request = items[index].request
            estimate = max(0, request.end_offset - request.start_offset) * width
            if estimate > COLLECT_MAX_BYTES:
                jobs.append((plan, [index], False))
                continue
            if current and size + estimate > COLLECT_MAX_BYTES:
                jobs.append((plan, current, True))
                current, size = [], 0
            current.append(index)
            size += estimate
        if current:
            jobs.append((plan, current, True))
    return jobs


def build_batch(
    spark: SparkSession,
    items: Sequence[BatchItem],
    scratch_dir: Path,
    on_result: Callable[[int, BuildResult | Exception], None] | None = None,
) -> list[BuildResult | Exception]:
    """Build every item (see the module docstring); one outcome per item, in order.
    `on_result(index, outcome)` is called with each item's outcome as soon as it is known (the
    segments of one Spark job are finished one after another), in no particular order; an
    exception it raises fails that item."""
    outcomes: list[BuildResult | Exception | None] = [None] * len(items)

    def settle(index: int, outcome: BuildResult | Exception) -> None:
        if on_result is not None:
            try:
                on_result(index, outcome)
            except Exception as exc:
                outcome = exc
        outcomes[index] = outcome

    plans: dict[int, GroupPlan] = {}
    inputs: dict[int, str] = {}
    known: dict[tuple[int, int], GroupPlan] = {}
    for index, item in enumerate(items):
        try:
            plan = _plan(spark, item.request, known)
            Path(item.work_dir).mkdir(parents=True, exist_ok=True)
            inputs[index] = _readable_input(item.staging_uri, Path(item.work_dir))
            plans[index] = plan
        except Exception as exc:  # this item only
            settle(index, exc)
    scratch_dir = Path(scratch_dir)
    for plan, indices, collect in _jobs(items, plans):
        pairs = [(i, inputs[i]) for i in indices]
        created = {i: items[i].request.creation_time_ms for i in indices}
        key = _group_key(plan)
        for index, output in _run(spark, plan, pairs, scratch_dir, collect, key, created):
            item = items[index]
            try:
                if isinstance(output, Exception):
                    raise output
                result = finish(item.request, plan, output, index, Path(item.work_dir), len(items))
            except Exception as exc:
                settle(index, exc)
            else:
                settle(index, result)
    for index, outcome in enumerate(outcomes):
        if outcome is None:
            settle(index, BuildError("not built"))
    return [o for o in outcomes if o is not None]  # every one settled above


def _readable_input(staging_uri: str, work_dir: Path) -> str:
    """A local path of the item's rows (copied first from a remote store); BuildError if none."""
    path = local_path(spark_readable(staging_uri, work_dir))
    if not path.exists():
        raise BuildError(f"the staged rows {staging_uri} do not exist")
    return str(path)


def _run(
    spark: SparkSession,
    plan: GroupPlan,
    inputs: list[tuple[int, str]],
    scratch_dir: Path,
    collect: bool,
    key: str,
    created: Mapping[int, int],
) -> list[tuple[int, GroupOutput | Exception]]:
    """The job's rows, per input; when a shared job fails, each input alone."""
    scratch = scratch_dir / f"job-{uuid.uuid4().hex}"
    try:
        output = run_group(spark, plan, inputs, scratch, collect, key, created)
        return [(index, output) for index, _ in inputs]
    except Exception as exc:
        if len(inputs) == 1:
            return [(inputs[0][0], _as_build_error(exc))]
        log.warning("a batch of %d builds failed (%s); building them one by one", len(inputs), exc)
    alone = [_run(spark, plan, [one], scratch_dir, collect, key, created) for one in inputs]
    return [pair for outcomes in alone for pair in outcomes]


def _as_build_error(exc: Exception) -> Exception:
    if isinstance(exc, BuildError):
        return exc
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    error = BuildError(f"the Spark job failed: {type(exc).__name__}: {first}")
    error.__cause__ = exc
    return error


def build_from_staging(
    spark: SparkSession, request: BuildRequest, staging_uri: str, work_dir: Path
) -> BuildResult:
    """Build `request`'s segment from a staging Parquet file (see the module docstring)."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=work_dir))
    try:
        (outcome,) = build_batch(spark, [BatchItem(request, staging_uri, work_dir)], scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def chunk_ranges(start: int, end: int, chunk_size: int) -> list[tuple[int, int]]:
    """`[start, end)` as consecutive `[a, b)` chunks of at most `chunk_size` offsets."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, not {chunk_size}")
    return [(a, min(a + chunk_size, end)) for a in range(start, end, chunk_size)]


def _lost_offsets(ranges: Iterable[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """(how many offsets of `[start, end)` the reported `[first_missing, first_available)` ranges
    cover, where the stream resumed after the lowest run of them). Tasks report overlapping or
    adjacent ranges (each chunk its own part of one trim); they are merged first."""
    runs: list[list[int]] = []
    for low, high in sorted(ranges):
        if runs and low <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], high)
        else:
            runs.append([low, high])
    missing = sum(max(0, min(high, end) - max(low, start)) for low, high in runs)
    return missing, (runs[0][1] if runs else start)


def build_from_stream(
    spark: SparkSession,
    request: BuildRequest,
    stream_config: Mapping[str, str],
    partition: int,
    work_dir: Path,
    default_redis_url: str = "",
    allow_data_loss: bool = False,
) -> BuildResult:
    """Re-ingest `[request.start_offset, request.end_offset)` of one partition of the stream of
    `stream_config` (a table's stream config map; see the module docstring)."""
    _plan(spark, request)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    start, end = request.start_offset, request.end_offset
    try:
        with provider_for(stream_config, default_redis_url) as provider:
            topic = provider.topic
            earliest = provider.earliest_offset(partition)
            latest = provider.latest_offset(partition)
        source = range_source_for(stream_config, partition, default_redis_url)
    except (StreamError, ValueError) as exc:
        raise BuildError(f"cannot re-ingest {request.segment_name}: {exc}") from None
    where = f"topic {topic!r} partition {partition}"
    if end > latest:
        raise BuildError(
            f"{where} holds offsets up to {latest - 1}; [{start}, {end}) is not all produced yet"
        )
    if start < earliest and end > start and not allow_data_loss:
        lost = min(earliest, end) - start
        raise DataLoss(
            f"{where} no longer holds offset {start}: the first available offset is {earliest} "
            f"({lost} offsets of [{start}, {end}) were trimmed)",
            earliest,
            lost,
        )
    losses = spark.sparkContext.accumulator((), AddingAccumulatorParam(()))

    def read(chunks: Iterable[tuple[int, int]]) -> Iterator[tuple[int, bytes]]:
        def lost(first_missing: int, first_available: int) -> None:
            losses.add(((first_missing, first_available),))

        for low, high in chunks:
            yield from source.read(low, high, lost)

    chunks = chunk_ranges(start, end, _STREAM_CHUNK)
    rdd = spark.sparkContext.parallelize(chunks, max(1, len(chunks))).mapPartitions(read)
    staged = work_dir / f".stream-{uuid.uuid4().hex}"
    try:
        found = Observation(f"stream-read-{uuid.uuid4().hex}")
        spark.createDataFrame(rdd, _INPUT_SCHEMA).observe(
            found, F.count(F.lit(1)).alias("n"), F.min("offset").alias("lo")
        ).write.mode("overwrite").parquet(str(staged))
        counted = found.get
        if source.dense:
            missing = (end - start) - int(counted["n"])
            first = int(counted["lo"] if counted["lo"] is not None else latest)
            how = "trimmed or deleted while reading"
        else:
            missing, first = _lost_offsets(losses.value, start, end)
            how = "below the low watermark when read"
        if missing and not allow_data_loss:
            raise DataLoss(
                f"{where}: {missing} offsets of [{start}, {end}) are missing ({how}); "
                f"the first available offset is {first}",
                first,
                missing,
            )
        if missing:
            log.warning("re-ingesting %s: %d offsets of [%d, %d) lost", where, missing, start, end)
        return build_from_staging(spark, request, str(staged), work_dir)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
