"""Segment builds and re-ingestion as jobs: the service behind the Spark Celery tasks.

Contract:
- Arguments are names, offsets and deep-store keys; the table's config and schema are read from
  ZooKeeper at run time, so a task can be retried or redelivered without stale payloads.
- Idempotent: the build is deterministic (same rows, same bytes) and publishing replaces the object
  at the final key atomically, so running the same job twice leaves the same segment.
- Every attempt is a `Job` row. An attempt whose process died (still RUNNING) is marked ABANDONED
  by the next attempt of the same work. A failure marks the row FAILED with the error and counts in
  a durable counter under Pinot's server meter names, then re-raises: a build in
  `segmentBuildFailure`, keyed as Pinot keys it by the consumer's client id
  `<table>_REALTIME-<topic>-<partition>` (by the raw table name when the table config cannot be
  read), a re-ingestion in `segmentReingestionFailure`, keyed by the raw table name
  (`monitoring.controller_metrics` exposes both as `pinot_server_..._Count`).
- Nothing here writes ZooKeeper: committing the segment's metadata is the completion protocol's job.
- Fault injection (tests only, `tables.faults`): a committer's build (`build_segment`, not a
  re-ingestion) of `segment` fails before Spark is asked when `spark.<segment>.build_fails` or
  `spark.build_fails` trips in the process that runs it (the spark worker's
  FAULT_INJECTION_DIR): a `BuildError`, recorded and counted as any failed build.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from tables import faults
from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.cluster.reads import ClusterReader
from tables.domain.names import LLCSegmentName, raw_table_name, table_name_with_type
from tables.domain.table_config import TableConfig
from tables.models import DurableCounter, Job
from tables.segments.builder import (
    BuildRequest,
    BuildResult,
    build_from_staging,
    build_from_stream,
)
from tables.segments.deepstore import DeepStore
from tables.segments.errors import BuildError
from tables.segments.spark import get_session
from tables.streams.redis_streams import DEFAULT_KEY_PREFIX

__all__ = [
    "BUILD_FAILURES",
    "REINGEST_FAILURES",
    "BuildOutcome",
    "build_segment",
    "failure_key",
    "reingest_segment",
]

BUILD_FAILURES = "segmentBuildFailure"  # Pinot's ServerMeter.SEGMENT_BUILD_FAILURE
REINGEST_FAILURES = "segmentReingestionFailure"  # Pinot's ServerMeter.SEGMENT_REINGESTION_FAILURE


@dataclass(frozen=True)
class BuildOutcome:
    segment: str
    download_uri: str
    rows: int
    incomplete_rows: int
    size_bytes: int
    crc: int
    start_time_ms: int
    end_time_ms: int
    job_id: int

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def deep_store() -> DeepStore:
    """The deep store of DEEP_STORE_URI (and DEEP_STORE_ENDPOINT_URL for S3-compatible stores)."""
    options = {}
    if settings.DEEP_STORE_ENDPOINT_URL:
        options["endpoint_url"] = settings.DEEP_STORE_ENDPOINT_URL
    return DeepStore.from_uri(settings.DEEP_STORE_URI, **options)


def _creation_time_ms(manager: ClusterReader, table: str, segment: str, now_ms: int) -> int:
    """Pinot's `segment.creation.time` of a realtime segment: when its consuming segment was
    created (its ZK metadata), else the time in its LLC name. Stable, so a rebuild is identical."""
    try:
        created = manager.segment_metadata(table, segment).creation_time
    except NotFound:
        created = None
    if created is None:
        name = LLCSegmentName.parse(segment)
        created = name.creation_time_ms if name is not None else now_ms
    return created


def _request(
    ctx: ClusterContext, table: str, segment: str, start: int, end: int
) -> tuple[BuildRequest, TableConfig]:
    """The build request for `segment`, and the table config it was made from."""
    manager = ClusterReader(ctx)
    config = manager.get_table_config(table)
    schema = manager.get_schema(config.schema_name)
    request = BuildRequest(
        table_name=config.raw_table_name,
        segment_name=segment,
        schema=schema.raw,
        table_config=config.rest,
        start_offset=start,
        end_offset=end,
        creation_time_ms=_creation_time_ms(manager, table, segment, ctx.now_ms()),
    )
    return request, config


def _start_job(kind: str, table: str, segment: str, task_id: str) -> Job:
    Job.objects.filter(kind=kind, table=table, segment=segment, status=Job.Status.RUNNING).update(
        status=Job.Status.ABANDONED,
        error="superseded by a later attempt (its process died or was killed)",
        finished_at=timezone.now(),
    )
    return Job.objects.create(
        kind=kind,
        table=table,
        segment=segment,
        task_id=task_id,
        worker=f"{socket.gethostname()}:{os.getpid()}",
        started_at=timezone.now(),
    )


def failure_key(ctx: ClusterContext, counter: str, table: str, segment: str) -> str:
    """Where a failed build or re-ingestion of `segment` counts (see the module docstring)."""
    raw = raw_table_name(table)
    name = LLCSegmentName.parse(segment)
    if counter != BUILD_FAILURES or name is None:
        return raw
    try:
        topic = ClusterReader(ctx).get_table_config(table).topic_name
    except Exception:  # the failure may be that very read: count per table
        topic = None
    if not topic:
        return raw
    return f"{table_name_with_type(raw)}-{topic}-{name.partition_group_id}"


def _run(
    ctx: ClusterContext,
    kind: str,
    counter: str,
    table: str,
    segment: str,
    task_id: str,
    build,
    output_key: str | None = None,
) -> BuildOutcome:
    raw = raw_table_name(table)
    job = _start_job(kind, raw, segment, task_id)
    started = time.monotonic()
    try:
        store = deep_store()
        with tempfile.TemporaryDirectory(prefix="segment-build-") as work:
            result: BuildResult = build(Path(work))
            key = output_key or store.segment_key(raw, segment)
            uri = store.publish(result.tar_path, key)
    except Exception as exc:
        job.status = Job.Status.FAILED
        job.error = f"{type(exc).__name__}: {exc}"[:4000]
        job.duration_ms = int((time.monotonic() - started) * 1000)
        job.finished_at = timezone.now()
        job.save()
        DurableCounter.increment(counter, failure_key(ctx, counter, table, segment))
        raise
    job.status = Job.Status.SUCCEEDED
    job.rows = result.total_docs
    job.incomplete_rows = result.incomplete_rows
    job.bytes = result.size_bytes
    job.duration_ms = int((time.monotonic() - started) * 1000)
    job.finished_at = timezone.now()
    job.details = {
        "crc": result.crc,
        "incomplete_by_column": result.incomplete_by_column,
        "problems": result.problems[:10],
        "phase_seconds": result.phase_seconds,
        "download_uri": uri,
    }
    job.save()
    return BuildOutcome(
        segment=segment,
        download_uri=uri,
        rows=result.total_docs,
        incomplete_rows=result.incomplete_rows,
        size_bytes=result.size_bytes,
        crc=result.crc,
        start_time_ms=result.start_time_ms,
        end_time_ms=result.end_time_ms,
        job_id=job.pk,
    )


def _injected_failure(segment: str) -> None:
    """Raise BuildError when a build fault point trips (see the module docstring)."""
    for point in (f"spark.{segment}.build_fails", "spark.build_fails"):
        if faults.trip(point):
            raise BuildError(f"fault injection: {point}")


def build_segment(
    ctx: ClusterContext,
    table: str,
    segment: str,
    staging_key: str,
    start_offset: int,
    end_offset: int,
    task_id: str = "",
    output_key: str | None = None,
) -> BuildOutcome:
    """Build `segment` from the rows a server staged at `staging_key`, and publish it at
    `output_key`, by default the segment's final key. A committing server passes a temporary key
    (`<raw>/<segment>.tmp.<id>`): only the controller's commit end makes it the segment."""

    def build(work: Path) -> BuildResult:
        _injected_failure(segment)
        request, _ = _request(ctx, table, segment, start_offset, end_offset)
        spark = get_session(settings.SPARK_MASTER, settings.SPARK_DRIVER_MEMORY)
        return build_from_staging(spark, request, deep_store().uri_for(staging_key), work)

    return _run(ctx, Job.Kind.BUILD, BUILD_FAILURES, table, segment, task_id, build, output_key)


def reingest_segment(
    ctx: ClusterContext,
    table: str,
    segment: str,
    start_offset: int,
    end_offset: int,
    task_id: str = "",
) -> BuildOutcome:
    """Rebuild `segment` by reading its offset range `[start, end)` from the stream again."""

    def build(work: Path) -> BuildResult:
        request, config = _request(ctx, table, segment, start_offset, end_offset)
        name = LLCSegmentName.parse(segment)
        if name is None:
            raise ValueError(f"{segment} is not an LLC segment name: no partition to re-read")
        redis_url = config.stream_config.get("stream.redis.url") or ctx.redis_url
        spark = get_session(settings.SPARK_MASTER, settings.SPARK_DRIVER_MEMORY)
        prefix = config.stream_config.get("stream.redis.key.prefix") or DEFAULT_KEY_PREFIX
        return build_from_stream(
            spark, request, redis_url, config.topic_name, name.partition_group_id, work, prefix
        )

    return _run(ctx, Job.Kind.REINGEST, REINGEST_FAILURES, table, segment, task_id, build)
