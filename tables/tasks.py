"""Thin Celery tasks over the table services. `tables.spark_*` tasks run on the spark queue.

Tasks take names, offsets and keys only, and are idempotent: with acks_late, a task whose worker
died is delivered again, and running it twice leaves the same result.

Leadership (README "How the Celery tasks respect leadership"): a worker is no controller, so the
periodic work acts for a table on behalf of its lead controller, looked up when the task runs:
the healing manager skips (and records) a table without one, a force-commit batch waits for one,
and the status checker, which only reads, reports every table.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import redis
from celery import shared_task
from celery.signals import before_task_publish
from django.conf import settings

from tables import builds
from tables.build_batches import BuildQueue, PendingBuild
from tables.cluster import context
from tables.cluster.leadership import lead_controller_for
from tables.controller.force_commit import BatchRun, ForceCommitManager
from tables.redisconn import get_redis
from tables.result_handover import store_outcomes
from tables.segments.spark import get_session

log = logging.getLogger(__name__)
BUILD_TASK = "tables.spark_build_segment"


@shared_task(name="tables.spark_probe", ignore_result=False)
def spark_probe() -> dict[str, object]:
    """Make (or reuse) this worker process's SparkSession and run one small job."""
    started = time.monotonic()
    spark = get_session(settings.SPARK_MASTER, settings.SPARK_DRIVER_MEMORY)
    rows = spark.range(1000).selectExpr("sum(id) AS s").collect()[0]["s"]
    return {
        "pid": os.getpid(),
        "sum": rows,
        "master": spark.sparkContext.master,
        "version": spark.version,
        "seconds": round(time.monotonic() - started, 3),
    }


@before_task_publish.connect(sender=BUILD_TASK)
def _register_build(
    sender: str | None = None,
    headers: dict[str, Any] | None = None,
    body: Any = None,
    **_: object,
) -> None:
    """Every published build is registered as pending (`tables.build_batches`), so that the spark
    worker can build it in a batch with others. A failure only costs the batching: logged."""
    try:
        task_id = str((headers or {})["id"])
        args, kwargs = body[0], body[1]
        pending = PendingBuild.from_task(task_id, args, kwargs)
        BuildQueue(get_redis(settings.REDIS_URL), settings.CLUSTER_NAME).register(pending)
    except (KeyError, IndexError, TypeError, ValueError, redis.RedisError) as exc:
        log.warning("build %s not registered for batching: %s", (headers or {}).get("id"), exc)


@shared_task(name=BUILD_TASK, bind=True, ignore_result=False)
def spark_build_segment(
    self,
    table: str,
    segment: str,
    staging_key: str,
    start_offset: int,
    end_offset: int,
    output_key: str | None = None,
) -> dict[str, object]:
    """Build a segment from a server's staged rows and publish it to the deep store (at its final
    key, or at `output_key` for a committer's upload that commit end will move). Batched with the
    other pending builds (`tables.builds.build_segment`): a build another task's batch made returns
    that outcome, and the batch stores each other task's outcome as its result at once, so that
    its committer need not wait for that task to run."""

    backend = self.backend  # this thread's: the batch's publisher thread hands segments over

    def hand_over(pairs: list[tuple[str, builds.BuildOutcome | Exception]]) -> None:
        store_outcomes(backend, pairs)  # a publish group's successes in one round trip

    outcome = builds.build_segment(
        context.current(),
        table,
        segment,
        staging_key,
        start_offset,
        end_offset,
        self.request.id,
        output_key,
        on_outcome=hand_over,
    )
    return outcome.as_dict()


@shared_task(name="tables.spark_reingest_segment", bind=True, ignore_result=False)
def spark_reingest_segment(
    self, table: str, segment: str, start_offset: int, end_offset: int
) -> dict[str, object]:
    """Rebuild a segment from its offset range in the stream (re-ingestion)."""
    outcome = builds.reingest_segment(
        context.current(), table, segment, start_offset, end_offset, self.request.id
    )
    return outcome.as_dict()


@shared_task(name="tables.sync_mirror", ignore_result=True)
def sync_mirror() -> None:
    """Beat, every MIRROR_SYNC_SECONDS: bring the database mirror up to date with ZooKeeper."""
    from tables.mirror import sync
    from tables.outages import outage_reason

    try:
        sync.sync_cluster(context.current())
    except Exception as exc:  # an outage is recorded (the pages say so); beat runs it again
        reason = outage_reason(exc)
        if reason is None:
            raise
        sync.record_unreachable(reason, int(time.time() * 1000))


@shared_task(name="tables.force_commit_batches", ignore_result=True)
def force_commit_batches(**run: object) -> None:
    """One step of a batched force commit (`ForceCommitManager.advance`); re-schedules itself
    until every batch is sent or the run gives up. A batch is sent on behalf of the table's lead
    controller (`tables.cluster.leadership.lead_controller_for`, read at each step); while the
    table has none, the step waits (re-scheduled) within the batch's timeout."""
    ctx = context.current()
    manager = ForceCommitManager(
        ctx,
        source=settings.CONTROLLER_INSTANCE_ID,
        lead_controller=lambda table: lead_controller_for(ctx, table),
    )
    following = manager.advance(BatchRun.from_kwargs(**run))
    if following is not None:
        force_commit_batches.apply_async(
            kwargs=following.as_kwargs(), countdown=following.batch.check_interval_s
        )


LEADER_RUN_RETRIES = 10  # a "leader" healing run waits up to ~10 s for the claim to show


@shared_task(name="tables.realtime_segment_validation", bind=True, ignore_result=False)
def realtime_segment_validation(
    self,
    table: str | None = None,
    trigger: str = "schedule",
    run_id: str | None = None,
    takeover_ms: int | None = None,
) -> dict[str, object]:
    """Pinot's RealtimeSegmentValidationManager on `table` (raw or with type) or on every REALTIME
    table: beat (`trigger` "schedule"), the mirror sync ("mirror"), an operator ("api") or a
    controller that became a table's lead controller ("leader", `tables.healing_triggers`, with
    `takeover_ms`: when it did, so that a commit its predecessor left half-done is finished now);
    `tables.periodic_runs.validate` records each table's run (`HealingRun`, by `run_id`: by default
    `<trigger>-` and the first 8 hex digits of this task's id), made on behalf of the table's lead
    controller; a table without one is skipped. Runs on one table never overlap: the healing
    manager takes a ZooKeeper lock per table. A "leader" run that finds the table without a lead
    controller (the new leader's claim not visible yet) is retried every second, up to
    `LEADER_RUN_RETRIES` times, with the same run id."""
    from tables.periodic_runs import new_run_id, validate

    result = validate(table, trigger, run_id or new_run_id(trigger, self.request.id), takeover_ms)
    unled = [r for r in result["tables"] if r["leadController"] is None and not r["error"]]
    if trigger == "leader" and unled and self.request.retries < LEADER_RUN_RETRIES:
        raise self.retry(countdown=1.0, max_retries=LEADER_RUN_RETRIES)
    return result


@shared_task(name="tables.segment_status_checker", ignore_result=False)
def segment_status_checker(table: str | None = None) -> dict[str, object]:
    """Pinot's SegmentStatusChecker over the mirror, for every table or `table`
    (`tables.periodic_runs.check_status`; results in `TableStatusCheck`, shown by /metrics). It
    only reads, so it reports every table, with or without a lead controller."""
    from tables.periodic_runs import check_status

    return check_status(table)
