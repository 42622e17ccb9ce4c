"""Segment builds on Spark: staged rows or a re-read stream range -> one packed segment.

Entry points (plain arguments; no Django, so the job runs anywhere Spark and redis-py run):
- `write_staging(pairs, path)` (from `tables.segments.staging`): the server side. Writes
  `(offset, message bytes)` pairs, in the order given, to one Parquet file (columns `offset` int64,
  `value` binary) with pyarrow, atomically (temporary file beside it, then rename).
- `build_from_staging(spark, request, staging_uri, work_dir)`: builds from such a file. `file://`
  URIs and plain paths are read by Spark directly; other schemes (`s3://`, ...) are first copied
  into `work_dir` through fsspec.
- `build_from_stream(spark, request, redis_url, topic, partition, work_dir, key_prefix)`: re-ingests
  `[start_offset, end_offset)` of a Redis stream partition. Spark tasks read offset chunks, each
  with its own client; the rows are written once to a Parquet file in `work_dir` and then go through
  exactly the same steps as a staged file, so the segment equals the one built from staging of the
  same rows (same rows, same CRC, same tar bytes). A start offset the stream no longer holds, or
  offsets missing inside the range, raise `DataLoss` naming the first available offset, unless
  `allow_data_loss=True`; offsets not produced yet raise `BuildError`.
- `read_segment(tar_path)`: metadata properties and rows of a packed segment.

Contract of a build:
- Every input row becomes exactly one row of the segment (see `tables.segments.frames` for bad
  values: nulled, counted in `incomplete_rows` / `incomplete_by_column`, sampled in `problems`).
  Offsets must be unique and inside `[start_offset, end_offset)`, else `BuildError`.
- Configuration problems (schema, table config, unsupported transform or time format) raise
  `BuildError` before any data is read.
- Determinism: rows are sorted by the time column's millis then offset; `data.parquet` is one file
  written by Spark (snappy, TIMESTAMP_MICROS) with `coalesce(1)`. Spark's Parquet writer puts no
  time stamp, UUID or path inside the file (only its version and the row schema), and the one
  per-JVM difference, the order of each column chunk's encodings list in the footer, is sorted
  (`parquet_footer.sort_column_encodings`), so the same rows give the same bytes in any process;
  the CRC is `zlib.crc32` of `data.parquet` and `data_crc` is the same value.
  (This holds for one Spark/parquet-mr version: another version may write other bytes.) The tar is
  packed deterministically with the creation time as every entry's mtime, so one request builds the
  same tar bytes every time.
- `work_dir` gets `<segment>/` (the unpacked files) and `<segment>.tar.gz`; a re-run replaces them.
  On a cluster, `work_dir` must be on a file system the executors share with the driver.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
import zlib
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tables.domain.schema import FieldSpec, Schema, SchemaError, parse_schema
from tables.domain.table_config import TableConfigError, parse_table_config
from tables.segments import frames, parquet_footer, stream_source
from tables.segments.errors import BuildError, DataLoss
from tables.segments.segment_format import (
    CREATION_META,
    DATA_FILE,
    METADATA_FILE,
    format_properties,
    format_value,
    pack_creation_meta,
    pack_segment,
    read_segment,
)
from tables.segments.staging import spark_readable, write_staging
from tables.segments.transforms import (
    FROM_DATE_TIME,
    TimeFormat,
    Transform,
    parse_time_format,
    parse_transforms,
    transform_sources,
)
from tables.streams.base import StreamError
from tables.streams.redis_streams import DEFAULT_KEY_PREFIX, RedisStreamProvider

__all__ = [
    "DEFAULT_KEY_PREFIX",
    "INDEX_VERSION",
    "BuildError",
    "BuildRequest",
    "BuildResult",
    "DataLoss",
    "build_from_staging",
    "build_from_stream",
    "read_segment",
    "write_staging",
]

log = logging.getLogger(__name__)

#: `segment.index.version`: this project's segment format (one Parquet file), not Pinot's v1/v3.
INDEX_VERSION = "parquet-v1"
_STREAM_CHUNK = 5_000
_INPUT_SCHEMA = T.StructType(
    [T.StructField("offset", T.LongType(), True), T.StructField("value", T.BinaryType(), True)]
)

# Executors get the Redis reader by value: they need redis-py, not this code base.
cloudpickle.register_pickle_by_value(stream_source)


@dataclass(frozen=True)
class BuildRequest:
    table_name: str  # raw, without _REALTIME
    segment_name: str
    schema: dict[str, Any]  # Pinot schema JSON
    table_config: dict[str, Any]  # REST form
    start_offset: int
    end_offset: int  # exclusive
    creation_time_ms: int


@dataclass(frozen=True)
class BuildResult:
    segment_name: str
    tar_path: Path
    total_docs: int
    incomplete_rows: int
    incomplete_by_column: dict[str, int]
    problems: list[str]
    size_bytes: int
    crc: int
    data_crc: int  # the same value as crc: both are crc32 of data.parquet
    start_time_ms: int
    end_time_ms: int
    metadata: dict[str, str] = field(repr=False)
    min_offset: int | None
    max_offset: int | None
    # Wall seconds per phase: decode (parse, transform, count incomplete rows), write (sort and
    # write the single Parquet file), stats (read back, summary, per-column statistics), pack.
    phase_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Plan:
    schema: Schema
    transforms: list[Transform]
    time_spec: FieldSpec | None
    time_format: TimeFormat | None


def _raw_table(name: str) -> str:
    for suffix in ("_REALTIME", "_OFFLINE"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


_REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",  # patterns without an offset are read as UTC
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # not INT96
}


def _plan(spark: SparkSession, request: BuildRequest) -> _Plan:
    """Everything that can be refused before reading data."""
    for key, value in _REQUIRED_CONF.items():
        if (spark.conf.get(key, None) or "").upper() != value.upper():
            raise BuildError(f"the SparkSession must set {key}={value} (see tables.segments.spark)")
    name = request.segment_name
    if not name or "/" in name or name.startswith("."):
        raise BuildError(f"invalid segment name {name!r}")
    if not 0 <= request.start_offset <= request.end_offset:
        raise BuildError(f"invalid offset range [{request.start_offset}, {request.end_offset})")
    try:
        schema = parse_schema(request.schema)
        config = parse_table_config(request.table_config, schema)
    except (SchemaError, TableConfigError) as exc:
        raise BuildError(f"cannot build {name}: {exc}") from None
    if not schema.fields:
        raise BuildError(f"cannot build {name}: schema {schema.name!r} has no columns")
    ingestion = config.rest.get("ingestionConfig") or {}
    transforms = parse_transforms(ingestion.get("transformConfigs"), schema)
    time_spec = schema.field(config.time_column_name) if config.time_column_name else None
    time_format = parse_time_format(time_spec) if time_spec else None
    patterns = [t.pattern for t in transforms if t.function == FROM_DATE_TIME and t.pattern]
    if time_format and time_format.pattern:
        patterns.append(time_format.pattern)
    for pattern in dict.fromkeys(patterns):
        try:
            spark.range(1).select(F.try_to_timestamp(F.lit("0"), F.lit(pattern))).collect()
        except Exception as exc:
            raise BuildError(f"unsupported date-time pattern {pattern!r}: {exc}") from None
    return _Plan(schema, transforms, time_spec, time_format)


def build_from_staging(
    spark: SparkSession, request: BuildRequest, staging_uri: str, work_dir: Path
) -> BuildResult:
    """Build `request`'s segment from a staging Parquet file (see the module docstring)."""
    plan = _plan(spark, request)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    rows = spark.read.parquet(spark_readable(staging_uri, work_dir)).select("offset", "value")
    return _build(spark, request, plan, rows, work_dir)


def build_from_stream(
    spark: SparkSession,
    request: BuildRequest,
    redis_url: str,
    topic: str,
    partition: int,
    work_dir: Path,
    key_prefix: str = DEFAULT_KEY_PREFIX,
    allow_data_loss: bool = False,
) -> BuildResult:
    """Re-ingest `[request.start_offset, request.end_offset)` of one Redis stream partition."""
    import redis

    plan = _plan(spark, request)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    start, end = request.start_offset, request.end_offset
    client = redis.Redis.from_url(redis_url, socket_timeout=30, socket_connect_timeout=30)
    try:
        provider = RedisStreamProvider(client, topic, key_prefix)
        earliest = provider.earliest_offset(partition)
        latest = provider.latest_offset(partition)
    except (StreamError, ValueError) as exc:
        raise BuildError(f"cannot re-ingest {request.segment_name}: {exc}") from None
    finally:
        client.close()
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
    # Layout of tables.streams.redis_streams: one stream per partition at <prefix><topic>:<p>.
    stream_key = f"{key_prefix}{topic}:{partition}"
    chunks = stream_source.chunk_ranges(start, end, _STREAM_CHUNK)
    reader = partial(stream_source.read_chunks, redis_url=redis_url, stream_key=stream_key)
    rdd = spark.sparkContext.parallelize(chunks, max(1, len(chunks))).mapPartitions(reader)
    staged = str(work_dir / f".stream-{uuid.uuid4().hex}.parquet")
    try:
        spark.createDataFrame(rdd, _INPUT_SCHEMA).write.mode("overwrite").parquet(staged)
        rows = spark.read.parquet(staged)
        found = rows.agg(F.count(F.lit(1)).alias("n"), F.min("offset").alias("lo")).first()
        assert found is not None  # a global aggregation always yields one row
        missing = (end - start) - int(found["n"])
        if missing and not allow_data_loss:
            first = int(found["lo"] if found["lo"] is not None else latest)
            raise DataLoss(
                f"{where}: {missing} offsets of [{start}, {end}) are missing (trimmed or deleted "
                f"while reading); the first available offset is {first}",
                first,
                missing,
            )
        if missing:
            log.warning("re-ingesting %s: %d offsets of [%d, %d) lost", where, missing, start, end)
        return _build(spark, request, plan, rows, work_dir)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _write_single_parquet(df: DataFrame, target: Path) -> None:
    out_dir = target.parent.parent / f".{target.parent.name}.spark-{uuid.uuid4().hex}"
    try:
        df.coalesce(1).write.mode("overwrite").option("compression", "snappy").parquet(str(out_dir))
        parts = sorted(out_dir.glob("part-*.parquet"))
        if len(parts) != 1:
            raise BuildError(f"Spark wrote {len(parts)} data files instead of one")
        shutil.move(str(parts[0]), target)
        parquet_footer.sort_column_encodings(target)  # the same bytes in any JVM
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _crc32(path: Path) -> int:
    crc = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _metadata(
    request: BuildRequest,
    plan: _Plan,
    summary: frames.Summary,
    stats: dict[str, frames.ColumnStats],
    start_ms: int,
    end_ms: int,
) -> dict[str, str]:
    props = {
        "segment.name": request.segment_name,
        "segment.table.name": _raw_table(request.table_name),
        "segment.total.docs": str(summary.total_docs),
        "segment.start.time": str(start_ms),
        "segment.end.time": str(end_ms),
        "segment.time.unit": "MILLISECONDS",
        "segment.realtime.startOffset": str(request.start_offset),
        "segment.realtime.endOffset": str(request.end_offset),
        "segment.creation.time": str(request.creation_time_ms),
        "segment.index.version": INDEX_VERSION,
    }
    if plan.time_spec is not None:
        props["segment.time.column.name"] = plan.time_spec.name
    for spec in plan.schema.fields:
        column = stats[spec.name]
        prefix = f"column.{spec.name}."
        props[prefix + "dataType"] = spec.data_type
        props[prefix + "columnType"] = spec.kind.value
        props[prefix + "cardinality"] = str(column.cardinality)
        props[prefix + "totalDocs"] = str(column.total_docs)
        props[prefix + "isSingleValues"] = "true" if column.single_value else "false"
        props[prefix + "hasNullValue"] = "true" if column.has_null else "false"
        if column.min_value is not None:
            props[prefix + "minValue"] = format_value(column.min_value)
        if column.max_value is not None:
            props[prefix + "maxValue"] = format_value(column.max_value)
    return props


def _build(
    spark: SparkSession, request: BuildRequest, plan: _Plan, rows: DataFrame, work_dir: Path
) -> BuildResult:
    started = time.monotonic()
    name = request.segment_name
    segment_dir = work_dir / name
    shutil.rmtree(segment_dir, ignore_errors=True)
    segment_dir.mkdir(parents=True)
    data_path = segment_dir / DATA_FILE

    phases: dict[str, float] = {}
    mark = time.monotonic()

    def lap(phase: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[phase] = round(now - mark, 3)
        mark = now

    sources = transform_sources(plan.transforms)
    decoded = frames.apply_transforms(
        frames.decode(rows, plan.schema, sources), plan.transforms, plan.schema
    ).cache()
    try:
        incomplete = frames.count_incomplete(decoded)
        lap("decode")
        time_key = frames.time_millis(plan.time_spec, plan.time_format) if plan.time_spec else None
        ordered = frames.sort_for_segment(frames.segment_columns(decoded, plan.schema), time_key)
        _write_single_parquet(ordered, data_path)
        lap("write")
    finally:
        decoded.unpersist()

    written = spark.read.parquet(str(data_path))
    summary = frames.summarize(written, time_key)
    stats = frames.column_stats(written, plan.schema)
    lap("stats")
    if summary.distinct_offsets != summary.total_docs:
        raise BuildError(f"{name}: the input repeats offsets (every offset must appear once)")
    if summary.total_docs and not (
        request.start_offset <= summary.min_offset and summary.max_offset < request.end_offset
    ):
        raise BuildError(
            f"{name}: input offsets {summary.min_offset}..{summary.max_offset} are outside "
            f"[{request.start_offset}, {request.end_offset})"
        )
    # Pinot: a segment without any time value spans its creation instant.
    start_ms, end_ms = (
        request.creation_time_ms if value is None else int(value)
        for value in (summary.start_time_ms, summary.end_time_ms)
    )

    crc = _crc32(data_path)
    metadata = _metadata(request, plan, summary, stats, start_ms, end_ms)
    (segment_dir / METADATA_FILE).write_text(format_properties(metadata), encoding="ascii")
    (segment_dir / CREATION_META).write_bytes(pack_creation_meta(crc, request.creation_time_ms))
    tar_path = work_dir / f"{name}.tar.gz"
    size = pack_segment(segment_dir, tar_path, mtime=request.creation_time_ms // 1000)
    lap("pack")
    log.info(
        "built %s: %d docs (%d incomplete), %d bytes, crc %d, in %.2f s",
        name,
        summary.total_docs,
        incomplete.rows,
        size,
        crc,
        time.monotonic() - started,
    )
    return BuildResult(
        segment_name=name,
        tar_path=tar_path,
        total_docs=summary.total_docs,
        incomplete_rows=incomplete.rows,
        incomplete_by_column=incomplete.by_column,
        problems=incomplete.problems,
        size_bytes=size,
        crc=crc,
        data_crc=crc,
        start_time_ms=start_ms,
        end_time_ms=end_ms,
        metadata=metadata,
        min_offset=summary.min_offset,
        max_offset=summary.max_offset,
        phase_seconds=phases,
    )
