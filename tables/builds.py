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
- Batched builds (`build_segment` with a task id; `tables.build_batches` holds the pending
  requests): the task that runs first claims its own request, then every other pending one it can
  (at most `BATCH_MAX_BUILDS` requests and `BATCH_MAX_ROWS` offsets; when others were registered
  less than `BURST_SETTLE_S` ago it first waits, at most `BURST_WAIT_MAX_S`, for that burst to
  settle; for builds a force commit announced, while they keep coming, at most
  `ANNOUNCED_WAIT_MAX_S`), and builds them with `tables.segments.builder.build_batch`: one Spark job
  per schema, each segment byte-identical to its build alone. Each request is its own `Job` row (its
  own task id; `details.batch`: size, leader, queued_ms), publishes to its own key, succeeds or
  fails on its own, and a failure is counted once, by the batch; the batch hands each request's
  outcome over at once (`on_outcome`: the Celery task stores it as that task's result): a segment
  as soon as it is published (on a thread of its own, while the batch still writes the others'
  tars, before the Job rows are recorded; the batch's own task's too, which later returns the
  same outcome), another task's failure once recorded. Should the batch's process die in
  between, a committer may commit a segment whose Job row is still RUNNING (the next attempt of
  that build marks it ABANDONED).
  The task of a request a batch built returns the outcome recorded in its Job row (a failure: raises
  `BuildError` with the recorded error) without building again, then builds what is still pending
  (instead of leaving it to the tasks queued behind it), first letting a burst settle as a
  leader does (the next pause's builds); while another batch still holds its claim,
  it waits. A request whose staging file is gone when claimed (its committer gave up) is left to its
  own task. Without Redis a task builds alone.
- A failed attempt's `details.failure` is the failure's class (`tables.domain.build_backoff.
  classify` on the error's type name and message): "deterministic" (the build itself refused the
  rows or the config: the same attempt fails again) or "transient". The committer classifies the
  error the task hands back the same way (`tables.server.build_holds`).
- Fault injection (tests only, `tables.faults`): a committer's build (`build_segment`, not a
  re-ingestion) of `segment` fails before Spark is asked when `spark.<segment>.build_fails` or
  `spark.build_fails` trips in the process that runs it (the spark worker's
  FAULT_INJECTION_DIR): a `BuildError`, recorded and counted as any failed build (transient).
  While the file `spark.<segment>.build_rejects` exists (held, not consumed), every build of
  `segment` fails the same way with a DETERMINISTIC `BuildError` ("fault injection
  (deterministic): ...").
"""

from __future__ import annotations

import functools
import logging
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from queue import SimpleQueue

import redis
from django.conf import settings
from django.db import transaction

from tables import faults
from tables.build_batches import BatchLimits, BuildQueue, Heartbeat, PendingBuild
from tables.build_jobs import (
    BuildOutcome,
    batch_details,
    built_outcome,
    outcome_of,
    record,
    recorded_among,
    save_outcomes,
    start_build_jobs,
    start_job,
)
from tables.build_jobs import recorded as recorded_outcome
from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.cluster.reads import ClusterReader
from tables.domain.build_backoff import DETERMINISTIC_FAULT
from tables.domain.names import LLCSegmentName, raw_table_name, table_name_with_type
from tables.domain.schema import Schema
from tables.domain.table_config import TableConfig
from tables.models import DurableCounter, Job
from tables.redisconn import get_redis
from tables.segments.builder import (
    BatchItem,
    BuildRequest,
    BuildResult,
    build_batch,
    build_from_stream,
)
from tables.segments.deepstore import DeepStore
from tables.segments.errors import BuildError
from tables.segments.spark import get_session

__all__ = [
    "BATCH_MAX_BUILDS",
    "BATCH_MAX_ROWS",
    "BUILD_FAILURES",
    "REINGEST_FAILURES",
    "BuildOutcome",
    "build_segment",
    "failure_key",
    "reingest_segment",
]

BUILD_FAILURES = "segmentBuildFailure"  # Pinot's ServerMeter.SEGMENT_BUILD_FAILURE
REINGEST_FAILURES = "segmentReingestionFailure"  # Pinot's ServerMeter.SEGMENT_REINGESTION_FAILURE
BATCH_MAX_BUILDS = 128  # requests in one batch
BATCH_MAX_ROWS = 5_000_000  # offsets in one batch (the first request is always taken)
BURST_SETTLE_S = 0.15  # a burst of requests has settled when none came for this long
BURST_WAIT_MAX_S = 0.6  # the longest a batch waits for a burst to settle
# Builds a force commit (a pause) announced: the longest a batch waits for them while they keep
# coming, and the time without a new one after which it builds what came (`bench/pause.py`, 64
# partitions: their registrations span about a second; a second batch cost 1.1-2.5 s more).
ANNOUNCED_WAIT_MAX_S = 3.0
ANNOUNCED_STALL_S = 0.4
CLAIM_POLL_S = 0.2
#: A batch publishes its segments as they are made, at most this many at a time (those made while
#: the last group was being published; the syncs of a group are shared), and hands each over at
#: once, so commits start while the rest are still being written.
PUBLISH_EVERY = 8

log = logging.getLogger(__name__)

#: Told the outcomes of a batch's other requests as they are known, several at a time (those of
#: one publish group, or the failures once the batch is recorded): (task id, outcome or error).
OnOutcomes = Callable[[list[tuple[str, "BuildOutcome | Exception"]]], None]


def deep_store() -> DeepStore:
    """The deep store of DEEP_STORE_URI (and DEEP_STORE_ENDPOINT_URL for S3-compatible stores).

    One `DeepStore` per (URI, endpoint), made at the first call and shared (it holds nothing but
    its file system and root): making one resolves the root path, one `lstat` per component,
    which every commit end paid, on the controller and on the committer (`bench/pause.py`, 64
    partitions: the controller's commit-end file step went from a median of 105 ms to 21 ms)."""
    return _deep_store_at(settings.DEEP_STORE_URI, settings.DEEP_STORE_ENDPOINT_URL or "")


@functools.lru_cache(maxsize=8)
def _deep_store_at(uri: str, endpoint_url: str) -> DeepStore:
    options = {"endpoint_url": endpoint_url} if endpoint_url else {}
    return DeepStore.from_uri(uri, **options)


def _creation_time_ms(manager: ClusterReader, table: str, segment: str, now_ms: int) -> int:
    """Pinot's `segment.creation.time` of a realtime segment: when its consuming segment was
    created (its ZK metadata), else the time in its LLC name. Stable, so a rebuild is identical."""
    try:
        created = manager.segment_metadata(table, segment).creation_time
    except NotFound:
        created = None
    return _or_from_name(created, segment, now_ms)


def _or_from_name(created: int | None, segment: str, now_ms: int) -> int:
    if created is None:
        name = LLCSegmentName.parse(segment)
        created = name.creation_time_ms if name is not None else now_ms
    return created


def _creation_times_ms(ctx: ClusterContext, batch: list[PendingBuild]) -> dict[str, int]:
    """`_creation_time_ms` of every request of a batch, their metadata read at once; {} when
    that fails (each request then reads its own)."""
    try:
        found = ClusterReader(ctx).segments_metadata([(b.table, b.segment) for b in batch])
    except Exception as exc:
        log.warning("cannot read the batch's segment metadata at once: %s", exc)
        return {}
    now_ms = ctx.now_ms()
    return {
        b.segment: _or_from_name(None if meta is None else meta.creation_time, b.segment, now_ms)
        for b, meta in zip(batch, found, strict=True)
    }


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
    """One build outside a batch (a re-ingestion, or a build without batching): `build(work
    dir)` makes the tar, published at `output_key` (default: the segment's key), recorded in its
    Job row; a failure is counted under `counter` and raised."""
    raw = raw_table_name(table)
    job = start_job(kind, raw, segment, task_id)
    started = time.monotonic()
    outcome: tuple[BuildResult, str] | Exception
    try:
        store = deep_store()
        with tempfile.TemporaryDirectory(prefix="segment-build-") as work:
            result: BuildResult = build(Path(work))
            key = output_key or store.segment_key(raw, segment)
            outcome = (result, store.publish(result.tar_path, key))
    except Exception as exc:
        outcome = exc
    recorded = record(job, outcome, int((time.monotonic() - started) * 1000))
    job.save()
    if isinstance(recorded, Exception):
        DurableCounter.increment(counter, failure_key(ctx, counter, table, segment))
        raise recorded
    return outcome_of(job)


def _injected_failure(segment: str) -> None:
    """Raise BuildError when a build fault point trips (see the module docstring)."""
    for point in (f"spark.{segment}.build_fails", "spark.build_fails"):
        if faults.trip(point):
            raise BuildError(f"fault injection: {point}")
    rejects = f"spark.{segment}.build_rejects"
    if faults.held(rejects):
        raise BuildError(f"{DETERMINISTIC_FAULT}: {rejects}")


def build_segment(
    ctx: ClusterContext,
    table: str,
    segment: str,
    staging_key: str,
    start_offset: int,
    end_offset: int,
    task_id: str = "",
    output_key: str | None = None,
    on_outcome: OnOutcomes | None = None,
) -> BuildOutcome:
    """Build `segment` from the rows a server staged at `staging_key`, and publish it at
    `output_key`, by default the segment's final key. A committing server passes a temporary key
    (`<raw>/<segment>.tmp.<id>`): only the controller's commit end makes it the segment.

    With a `task_id` (the Celery task's), the build is batched (module docstring): it returns the
    outcome recorded for this task when another task's batch built it, else builds it together
    with the other pending requests it can claim. `on_outcome([(task id, outcome or error),
    ...])` is told those others' outcomes, several at a time (`OnOutcomes`)."""
    mine = PendingBuild(task_id, table, segment, staging_key, start_offset, end_offset, output_key)
    queue = _queue() if task_id else None
    if queue is None:
        return _result(_build_all(ctx, [mine], leader="")[0])
    try:
        recorded = recorded_outcome(task_id)
        if recorded is not None:
            queue.forget([task_id])  # registered again when its task was published
        else:
            recorded = queue.wait_for_claim(mine, recorded_outcome, CLAIM_POLL_S)
        if recorded is not None:
            # Built by another batch (its result was handed over already): build what is still
            # pending meanwhile, rather than leave it to tasks queued behind this one.
            _help(ctx, queue, task_id, on_outcome)
            return _result(recorded)
        batch = queue.gather(mine, _limits(), recorded_among, _staged)
    except redis.RedisError as exc:
        log.warning("build batching unavailable (%s): building %s alone", exc, segment)
        return _result(_build_all(ctx, [mine], leader="")[0])
    return _result(_run_batch(ctx, queue, batch, task_id, on_outcome)[0])


def _help(
    ctx: ClusterContext,
    queue: BuildQueue,
    task_id: str,
    on_outcome: OnOutcomes | None,
) -> None:
    """Build the pending requests nobody claimed yet; a failure here is not this task's. A burst
    of them still coming (the next pause's builds, while this task's message waited behind its
    own batch) is let settle first, as a batch's leader does (`BuildQueue.settle`): else this
    task would build the first of them and leave the rest to a second batch."""
    try:
        queue.settle(_limits())
        others = queue.claim_others(task_id, [], _limits(), recorded_among, _staged)
        _run_batch(ctx, queue, others, task_id, on_outcome)
    except Exception:
        log.exception("building the pending requests for others failed")


def _run_batch(
    ctx: ClusterContext,
    queue: BuildQueue,
    batch: list[PendingBuild],
    leader: str,
    on_outcome: OnOutcomes | None,
) -> list[BuildOutcome | Exception]:
    """Build the claimed `batch`, finish its registrations and hand over the outcomes: every
    published segment at once, `leader`'s own too (its committer need not wait for the rest of the
    batch and the Job rows; the task later returns the same outcome from its row), and the
    failures of the others once recorded (`leader`'s own task raises its own)."""
    if not batch:
        return []
    ids = [b.task_id for b in batch]
    handed: set[str] = set()

    def hand_over(pairs: list[tuple[PendingBuild, BuildOutcome | Exception]]) -> None:
        fresh = [(b.task_id, outcome) for b, outcome in pairs if b.task_id not in handed]
        if on_outcome is None or not fresh:
            return
        handed.update(task_id for task_id, _ in fresh)
        try:
            on_outcome(fresh)
        except Exception:  # their own tasks still return them
            log.exception("could not hand over the outcomes of %s", [t for t, _ in fresh])

    try:
        with Heartbeat(queue, ids, leader):
            outcomes = _build_all(ctx, batch, leader=leader, on_published=hand_over)
    except BaseException:
        _quietly(queue.release, ids, leader)  # their own tasks build them
        raise
    _quietly(queue.finish, ids)
    hand_over([(b, o) for b, o in zip(batch, outcomes, strict=True) if b.task_id != leader])
    return outcomes


def _limits() -> BatchLimits:
    return BatchLimits(
        BATCH_MAX_BUILDS,
        BATCH_MAX_ROWS,
        BURST_SETTLE_S,
        BURST_WAIT_MAX_S,
        ANNOUNCED_WAIT_MAX_S,
        ANNOUNCED_STALL_S,
    )


def _staged(staging_key: str) -> bool:
    return deep_store().exists(staging_key)


def _queue() -> BuildQueue | None:
    try:
        return BuildQueue(get_redis(settings.REDIS_URL), settings.CLUSTER_NAME)
    except redis.RedisError as exc:
        log.warning("build batching unavailable: %s", exc)
        return None


def _quietly(call, *args: object) -> None:
    try:
        call(*args)
    except redis.RedisError as exc:  # claims expire; registrations are dropped when read
        log.warning("build batching: %s failed: %s", getattr(call, "__name__", call), exc)


def _result(outcome: BuildOutcome | BaseException) -> BuildOutcome:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _request_cached(
    ctx: ClusterContext,
    cache: dict[str, tuple[TableConfig, Schema]],
    build: PendingBuild,
    created_ms: int | None = None,
) -> BuildRequest:
    manager = ClusterReader(ctx)
    if build.table not in cache:
        config = manager.get_table_config(build.table)
        cache[build.table] = (config, manager.get_schema(config.schema_name))
    config, schema = cache[build.table]
    if created_ms is None:
        created_ms = _creation_time_ms(manager, build.table, build.segment, ctx.now_ms())
    return BuildRequest(
        table_name=config.raw_table_name,
        segment_name=build.segment,
        schema=schema.raw,
        table_config=config.rest,
        start_offset=build.start_offset,
        end_offset=build.end_offset,
        creation_time_ms=created_ms,
    )


def _build_all(
    ctx: ClusterContext,
    batch: list[PendingBuild],
    leader: str,
    on_published: Callable[[list[tuple[PendingBuild, BuildOutcome]]], None] | None = None,
) -> list[BuildOutcome | Exception]:
    """Build and publish every request of `batch` (one Spark job per schema), recording each
    attempt as a Job row; one outcome per request, in order (module docstring).
    `on_published([(request, outcome), ...])` is told the requests' outcomes as soon as their
    segments are published (a publish group at a time), before the batch is over and before
    their Job rows are recorded; it must not raise."""
    jobs = start_build_jobs(batch)

    def published(items: list[tuple[int, BuildResult, str]]) -> None:
        if on_published is not None:
            on_published(
                [
                    (batch[i], built_outcome(batch[i], result, uri, jobs[i].pk))
                    for i, result, uri in items
                ]
            )

    started = time.monotonic()
    started_ms = int(time.time() * 1000)
    outcomes: list[tuple[BuildResult, str] | Exception | None] = [None] * len(batch)
    try:
        store = deep_store()
        prepared: list[tuple[int, BuildRequest]] = []
        cache: dict[str, tuple[TableConfig, Schema]] = {}
        created = _creation_times_ms(ctx, batch) if len(batch) > 1 else {}
        for index, build in enumerate(batch):
            try:
                _injected_failure(build.segment)
                request = _request_cached(ctx, cache, build, created.get(build.segment))
                prepared.append((index, request))
            except Exception as exc:  # this request only
                outcomes[index] = exc
        if prepared:
            _build_and_publish(store, batch, prepared, outcomes, published)
    except Exception as exc:  # no Spark, no deep store: every request not done yet fails
        outcomes = [o if o is not None else exc for o in outcomes]
    duration_ms = int((time.monotonic() - started) * 1000)
    with transaction.atomic():
        recorded = [
            record(job, outcome, duration_ms, batch_details(batch, build, leader, started_ms))
            for job, build, outcome in zip(jobs, batch, outcomes, strict=True)
        ]
        save_outcomes(jobs)
    for build, outcome in zip(batch, recorded, strict=True):
        if isinstance(outcome, Exception):
            key = failure_key(ctx, BUILD_FAILURES, build.table, build.segment)
            DurableCounter.increment(BUILD_FAILURES, key)
    return [
        o if isinstance(o, Exception) else outcome_of(job)
        for job, o in zip(jobs, recorded, strict=True)
    ]


def _build_and_publish(
    store: DeepStore,
    batch: list[PendingBuild],
    prepared: list[tuple[int, BuildRequest]],
    outcomes: list[tuple[BuildResult, str] | Exception | None],
    on_published: Callable[[list[tuple[int, BuildResult, str]]], None],
) -> None:
    """Build the `prepared` requests of `batch` in one `build_batch` and publish each tar as soon
    as it is made, on a thread of its own (`_publisher`), so that the next segments are written
    while the syncs and hand-overs of the last ones wait on the disk and Redis; `on_published([(
    index, result, uri), ...])` (on that thread) once for each group published, then (index into
    `batch`) in `outcomes`. Returns once every segment built is published."""
    spark = get_session(settings.SPARK_MASTER, settings.SPARK_DRIVER_MEMORY)
    made: SimpleQueue[tuple[int, BuildResult, str] | None] = SimpleQueue()

    def publish(ready: list[tuple[int, BuildResult, str]]) -> None:
        uris = store.publish_many([(result.tar_path, key) for _, result, key in ready])
        done = []
        for (index, result, _), uri in zip(ready, uris, strict=True):
            outcomes[index] = uri if isinstance(uri, Exception) else (result, uri)
            if not isinstance(uri, Exception):
                done.append((index, result, uri))
        if done:
            on_published(done)  # the group's hand-overs together: one round trip

    def built(position: int, result: BuildResult | Exception) -> None:
        index, request = prepared[position]
        if isinstance(result, Exception):
            outcomes[index] = result
            return
        build = batch[index]
        made.put(
            (
                index,
                result,
                build.output_key or store.segment_key(request.table_name, build.segment),
            )
        )

    with (
        tempfile.TemporaryDirectory(prefix="segment-build-") as tmp,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="build-publish") as pool,
    ):
        publishing = pool.submit(_publisher, made, publish)
        work = Path(tmp)
        items = [
            BatchItem(request, store.uri_for(batch[index].staging_key), work / str(index))
            for index, request in prepared
        ]
        try:
            build_batch(spark, items, work / "scratch", on_result=built)
        finally:
            made.put(None)
            wait([publishing])  # the tars stay in `tmp` until they are published
        publishing.result()  # a publisher that raised: the requests it left fail (`_build_all`)


def _publisher(
    made: SimpleQueue[tuple[int, BuildResult, str] | None],
    publish: Callable[[list[tuple[int, BuildResult, str]]], None],
) -> None:
    """Publish what `made` brings until its None: each time every segment made meanwhile (at most
    `PUBLISH_EVERY`) in one group, whose syncs are shared; the first one alone, at once."""
    done = False
    while not done:
        first = made.get()
        if first is None:
            return
        group = [first]
        while len(group) < PUBLISH_EVERY and not made.empty():
            item = made.get()
            if item is None:
                done = True
                break
            group.append(item)
        publish(group)


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
        spark = get_session(settings.SPARK_MASTER, settings.SPARK_DRIVER_MEMORY)
        return build_from_stream(
            spark, request, config.stream_config, name.partition_group_id, work, ctx.redis_url
        )

    return _run(ctx, Job.Kind.REINGEST, REINGEST_FAILURES, table, segment, task_id, build)
