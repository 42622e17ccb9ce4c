"""Force commit (reference §4.1, §4.5): Pinot's `LLCM.forceCommit` and its job record.

`ForceCommitManager(ctx, source).force_commit(table, partitions, segments, batch)`:
- `table` is raw or `<raw>_REALTIME` (malformed -> 400). No IdealState -> 404 "Table X not found!";
  `HELIX_ENABLED` = "false" -> 400 "Table X is disabled!". A table that is inconsistent during
  consumption (partial upsert, or upsert with out-of-order handling) is refused (400) unless the
  cluster config `pinot.server.consuming.segment.consistency.mode` is PROTECTED or UNSAFE (default
  RESTRICTED), as `validateForceCommitAllowed`. All checks happen before anything is written.
- Targets: the segments with a CONSUMING replica in the IdealState; `partitions` (partition group
  ids) keeps those of the given partitions (none found -> 400), `segments` keeps the named ones
  (names that are not CONSUMING are ignored; if none is left -> 400). Giving both -> 400.
- Messages: one FORCE_COMMIT message (`tables.zk.messages`) per live instance that hosts a target
  in the IdealState or the EXTERNALVIEW, addressed to its current session; the message lists all
  the round's segments, each server picks its own. A round with targets but no live recipient
  raises ServiceError (500) "No force commit message was sent for table: X". Before the
  messages go, the round's segments are announced to the spark worker's build queue
  (`tables.build_batches.BuildQueue.expect`, best effort), so that their builds go in one batch
  instead of the first committer's build running alone.
- Batching: when `batch_size` < #targets, the targets are split round-robin over their instances
  (`segment_batches`); the first batch is sent in the request, the rest by the Celery task
  `tables.force_commit_batches`, which runs `advance` every `check_interval_s`: batch i+1 is sent
  once every segment of batch i is DONE in ZooKeeper (or deleted); when batch i is not DONE
  `check_timeout_s` after it was sent, the remaining batches are not sent (logged), as Pinot
  does. The schedule lives in the broker, so it outlives the web process that took the request.
  The task sends each later batch on behalf of the table's lead controller (message source) and,
  while the table has none, does not send: it waits, within that same timeout.
- Job record: mapField `<jobId>` of `PROPERTYSTORE/CONTROLLER_JOBS/FORCE_COMMIT` (record id
  FORCE_COMMIT) with `jobId`, `tableName` (with type), `jobType` = FORCE_COMMIT, `submissionTimeMs`
  and `segmentsForceCommitted` (a compact JSON array string of every target, all batches), written
  with compare-and-set after the first round; the newest `MAX_JOBS` (100) jobs by
  `submissionTimeMs` are kept. A failed write leaves the force commit done and reports
  `jobMetaZKWriteStatus` FAILED with no job id (Pinot's response).

`status(job_id)`: the job's fields plus `segmentsYetToBeCommitted` (JSON array: listed segments
whose metadata is not DONE; deleted ones dropped) and `numberOfSegmentsYetToBeCommitted`; the
shrinking list is written back (as a JSON string, compare-and-set) whenever it got shorter. An
unknown job -> 404.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from tables.build_batches import BuildQueue
from tables.cluster.context import ClusterContext
from tables.cluster.errors import BadRequest, NotFound, ServiceError
from tables.domain.idealstate import InstanceState
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.domain.znrecord import ZNRecord
from tables.redisconn import get_redis
from tables.zk import messages
from tables.zk.errors import NodeExists, NoNode
from tables.zk.records import create_record, read_record, update_record

from .resources import ResourceManager

ANNOUNCE_TIMEOUT_S = 1.0  # a Redis that does not answer delays a force commit at most this

__all__ = [
    "JOB_TYPE",
    "MAX_JOBS",
    "BatchConfig",
    "ForceCommitManager",
    "ForceCommitResult",
    "add_job",
    "batch_config_of",
    "is_inconsistent_during_consumption",
    "parse_partitions",
    "parse_segments",
    "recipients",
    "segment_batches",
    "select_targets",
]

log = logging.getLogger(__name__)

JOB_TYPE = "FORCE_COMMIT"
MAX_JOBS = 100
JOB_ID, TABLE_NAME, JOB_TYPE_KEY = "jobId", "tableName", "jobType"
SUBMISSION_TIME_MS = "submissionTimeMs"
FORCE_COMMITTED = "segmentsForceCommitted"
YET_TO_BE_COMMITTED = "segmentsYetToBeCommitted"
NUM_YET_TO_BE_COMMITTED = "numberOfSegmentsYetToBeCommitted"
CONSISTENCY_MODE = "pinot.server.consuming.segment.consistency.mode"
DEFAULT_BATCH_SIZE = 2**31 - 1  # Integer.MAX_VALUE


# --- pure parts ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchConfig:
    batch_size: int = DEFAULT_BATCH_SIZE
    check_interval_s: int = 5
    check_timeout_s: int = 180

    @classmethod
    def parse(
        cls, batch_size: str | None, interval_s: str | None, timeout_s: str | None
    ) -> BatchConfig:
        """From the query parameters (None = default); each must be an integer > 0, else 400."""
        default = cls()
        values = []
        for name, text, fallback in (
            ("batchSize", batch_size, default.batch_size),
            ("batchStatusCheckIntervalSec", interval_s, default.check_interval_s),
            ("batchStatusCheckTimeoutSec", timeout_s, default.check_timeout_s),
        ):
            if text is None or text.strip() == "":
                values.append(fallback)
                continue
            try:
                value = int(text.strip())
            except ValueError:
                raise BadRequest(f"Invalid batch config: {name} must be an integer") from None
            if value <= 0:
                raise BadRequest(f"Invalid batch config: {name} must be > 0, got {value}")
            values.append(value)
        return cls(*values)


def batch_config_of(params: Mapping[str, str]) -> BatchConfig:
    """The batch parameters of a request's query (`batchSize`, `batchStatusCheckIntervalSec`,
    `batchStatusCheckTimeoutSec`), checked by `BatchConfig.parse`."""
    return BatchConfig.parse(
        params.get("batchSize"),
        params.get("batchStatusCheckIntervalSec"),
        params.get("batchStatusCheckTimeoutSec"),
    )


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_partitions(text: str) -> set[int]:
    """`partitions=0,2`: partition group ids (400 when one is not a non-negative integer)."""
    found: set[int] = set()
    for part in _csv(text):
        if not part.isdigit():
            raise BadRequest(f"invalid partition id {part!r} in partitions={text!r}")
        found.add(int(part))
    if not found:
        raise BadRequest("partitions is empty")
    return found


def parse_segments(text: str) -> set[str]:
    found = set(_csv(text))
    if not found:
        raise BadRequest("segments is empty")
    return found


def select_targets(
    consuming: Iterable[str], partitions: set[int] | None, segments: set[str] | None
) -> list[str]:
    """The CONSUMING segments to commit, sorted (see the module contract)."""
    if partitions is not None and segments is not None:
        raise BadRequest("Cannot specify both partitions and segments to commit")
    targets = sorted(set(consuming))
    if partitions is not None:
        targets = [
            s
            for s in targets
            if (name := LLCSegmentName.parse(s)) is not None
            and name.partition_group_id in partitions
        ]
        if not targets:
            wanted = ",".join(map(str, sorted(partitions)))
            raise BadRequest(f"Cannot find segments to commit for partitions: {wanted}")
    if segments is not None:
        targets = [s for s in targets if s in segments]
        if not targets:
            raise BadRequest(f"none of the segments {sorted(segments)} is CONSUMING")
    return targets


def segment_batches(
    assignment: Mapping[str, Mapping[str, str]], targets: Iterable[str], batch_size: int
) -> list[list[str]]:
    """Split `targets` into batches of `batch_size`, taking one segment per instance in turn
    (instances and their segments in name order), so every batch spreads over the servers."""
    queues: dict[str, list[str]] = {}
    targets = sorted(set(targets))
    for segment in targets:
        for instance, state in sorted(assignment.get(segment, {}).items()):
            if state == InstanceState.CONSUMING:
                queues.setdefault(instance, []).append(segment)
    order: list[str] = []
    seen: set[str] = set()
    position = 0
    while any(position < len(q) for q in queues.values()):
        for _instance, queue in sorted(queues.items()):
            if position < len(queue) and queue[position] not in seen:
                seen.add(queue[position])
                order.append(queue[position])
        position += 1
    order += [s for s in targets if s not in seen]  # no CONSUMING replica listed: last
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def recipients(
    segments: Iterable[str],
    assignments: Iterable[Mapping[str, Mapping[str, str]]],
    live_sessions: Mapping[str, str],
) -> dict[str, str]:
    """Live instance -> its session, for every instance that any assignment (IdealState,
    EXTERNALVIEW) gives a replica of one of `segments`."""
    wanted = set(segments)
    found: dict[str, str] = {}
    for assignment in assignments:
        for segment in wanted:
            for instance in assignment.get(segment, {}):
                if instance in live_sessions:
                    found[instance] = live_sessions[instance]
    return dict(sorted(found.items()))


def add_job(record: ZNRecord, job: Mapping[str, str], max_jobs: int = MAX_JOBS) -> ZNRecord:
    """`record` with `job` added under its jobId, keeping the newest `max_jobs` jobs."""
    out = record.copy()
    out.map_fields[job[JOB_ID]] = dict(job)
    if len(out.map_fields) > max_jobs:

        def submitted(item: tuple[str, dict[str, str]]) -> int:
            try:
                return int(item[1].get(SUBMISSION_TIME_MS, "0"))
            except ValueError:
                return 0

        newest = sorted(out.map_fields.items(), key=submitted, reverse=True)[:max_jobs]
        out.map_fields = dict(newest)
    return out


def is_inconsistent_during_consumption(rest: Mapping[str, Any]) -> bool:
    """Partial upsert, or upsert dropping/marking out-of-order records (Pinot's
    `TableConfigUtils.isTableTypeInconsistentDuringConsumption`)."""
    upsert = rest.get("upsertConfig")
    if not isinstance(upsert, dict):
        return False
    mode = str(upsert.get("mode") or "FULL").upper()
    if mode == "NONE":
        return False
    return (
        mode == "PARTIAL"
        or str(upsert.get("dropOutOfOrderRecord", "false")).lower() == "true"
        or bool(upsert.get("outOfOrderRecordColumn"))
    )


def _json_list(values: Iterable[str]) -> str:
    return json.dumps(list(values), separators=(",", ":"))


# --- the service --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ForceCommitResult:
    table: str
    segments: tuple[str, ...]
    job_id: str | None
    batches: int
    messages_sent: int

    def response(self) -> dict[str, str]:
        """Pinot's forceCommit response."""
        body = {"forceCommitStatus": "SUCCESS"}
        body["jobMetaZKWriteStatus"] = "SUCCESS" if self.job_id else "FAILED"
        if self.job_id:
            body["forceCommitJobId"] = self.job_id
        return body


@dataclass(frozen=True)
class BatchRun:
    """The state of a batched force commit between two Celery runs: send `rounds[index]` once
    every segment of `rounds[index - 1]` is DONE, or give up at `deadline` (epoch seconds)."""

    table: str
    rounds: tuple[tuple[str, ...], ...]
    index: int
    deadline: float
    batch: BatchConfig

    def as_kwargs(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rounds": [list(r) for r in self.rounds],
            "index": self.index,
            "deadline": self.deadline,
            "batch": [
                self.batch.batch_size,
                self.batch.check_interval_s,
                self.batch.check_timeout_s,
            ],
        }

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> BatchRun:
        return cls(
            kwargs["table"],
            tuple(tuple(r) for r in kwargs["rounds"]),
            int(kwargs["index"]),
            float(kwargs["deadline"]),
            BatchConfig(*kwargs["batch"]),
        )


BATCHES_TASK = "tables.force_commit_batches"  # tables.tasks.force_commit_batches


def _schedule_with_celery(run: BatchRun) -> None:
    """The next batch, by task name: tables.tasks imports the controller, not the reverse."""
    from celery import current_app

    current_app.send_task(
        BATCHES_TASK, kwargs=run.as_kwargs(), countdown=run.batch.check_interval_s
    )


class ForceCommitManager:
    def __init__(
        self,
        ctx: ClusterContext,
        source: str = "controller",
        schedule: Callable[[BatchRun], None] = _schedule_with_celery,
        clock: Callable[[], float] = time.time,
        lead_controller: Callable[[str], str | None] | None = None,
    ) -> None:
        self.ctx, self.zk, self.paths = ctx, ctx.client, ctx.paths
        self.source = source or "controller"
        self.resources = ResourceManager(ctx)
        self._schedule, self._clock = schedule, clock
        self._lead_controller = lead_controller

    # --- forceCommit ------------------------------------------------------------------------
    def force_commit(
        self,
        name: str,
        partitions: str | None = None,
        segments: str | None = None,
        batch: BatchConfig | None = None,
    ) -> ForceCommitResult:
        if partitions is not None and segments is not None:
            raise BadRequest("Cannot specify both partitions and segments to commit")
        batch = batch or BatchConfig()
        wanted_partitions = parse_partitions(partitions) if partitions is not None else None
        wanted_segments = parse_segments(segments) if segments is not None else None
        table = self.resources.table_name(name)
        ideal = self.enabled_idealstate(table)
        self.check_allowed(table)
        consuming = [
            s
            for s, replicas in ideal.map_fields.items()
            if InstanceState.CONSUMING in replicas.values()
        ]
        targets = select_targets(consuming, wanted_partitions, wanted_segments)
        return self.start(table, targets, ideal.map_fields, batch)

    def start(
        self,
        table: str,
        targets: list[str],
        assignment: Mapping[str, Mapping[str, str]],
        batch: BatchConfig,
    ) -> ForceCommitResult:
        """Send the first batch of FORCE_COMMIT messages for `targets`, schedule the rest, and
        record the job (see the module contract)."""
        submitted_ms = self.ctx.now_ms()
        if batch.batch_size >= len(targets):
            rounds = [targets] if targets else []
        else:
            rounds = segment_batches(assignment, targets, batch.batch_size)
        sent = self.send(table, rounds[0]) if rounds else 0
        if len(rounds) > 1:
            deadline = self._clock() + batch.check_timeout_s
            frozen = tuple(tuple(r) for r in rounds)
            self._schedule(BatchRun(table, frozen, 1, deadline, batch))
        job_id = str(uuid.uuid4())
        try:
            self.add_job(job_id, table, submitted_ms, targets)
        except Exception:
            log.exception("could not write the force commit job of %s", table)
            job_id = None
        log.info(
            "force commit of %s: %d segment(s) in %d batch(es), job %s",
            table,
            len(targets),
            len(rounds),
            job_id,
        )
        return ForceCommitResult(table, tuple(targets), job_id, len(rounds), sent)

    def enabled_idealstate(self, table: str, check_enabled: bool = True) -> ZNRecord:
        """The table's IdealState: 404 when there is none, 400 when it is disabled."""
        found = read_record(self.zk, self.paths.idealstate(table))
        if found is None:
            raise NotFound(f"Table {table} not found!")
        enabled = found.record.simple_fields.get("HELIX_ENABLED", "true").lower() != "false"
        if check_enabled and not enabled:
            raise BadRequest(f"Table {table} is disabled!")
        return found.record

    def check_allowed(self, table: str) -> None:
        """400 when the table may not be force committed (`validateForceCommitAllowed`)."""
        config = self.resources.get_table_config(table)
        if not is_inconsistent_during_consumption(config.rest):
            return
        cluster = read_record(self.zk, self.paths.cluster_config)
        fields = cluster.record.simple_fields if cluster is not None else {}
        mode = fields.get(CONSISTENCY_MODE, "RESTRICTED").upper()
        if mode not in ("PROTECTED", "UNSAFE"):
            raise BadRequest(
                f"Force commit is not allowed for table {table}: it is inconsistent during "
                f"consumption (partial upsert or out-of-order handling) and {CONSISTENCY_MODE} "
                f"is {mode}"
            )

    def send(self, table: str, segments: list[str], source: str | None = None) -> int:
        """One round of FORCE_COMMIT messages for `segments` from `source` (default: this
        manager's); returns how many were sent."""
        if not segments:
            return 0
        assignments = [self._map_fields(self.paths.idealstate(table))]
        assignments.append(self._map_fields(self.paths.externalview(table)))
        targets = recipients(segments, assignments, self._live_sessions())
        if targets:
            self._announce_builds(segments)
        sent = 0
        for instance, session in targets.items():
            message = messages.force_commit_message(
                table,
                segments,
                source=source or self.source,
                cluster=self.paths.cluster,
                target=instance,
                target_session=session,
                now_ms=self.ctx.now_ms(),
            )
            try:
                messages.send_message(self.zk, self.paths, message)
            except NoNode:
                log.warning("%s has no MESSAGES folder; no force commit sent to it", instance)
                continue
            sent += 1
        if sent == 0:
            raise ServiceError(f"No force commit message was sent for table: {table}")
        log.info("sent %d force commit message(s) for %s: %s", sent, table, segments)
        return sent

    def _announce_builds(self, segments: list[str]) -> None:
        """The builds these commits are about to ask for, announced so that they batch; a
        failure only costs the batching."""
        if not self.ctx.redis_url:
            return
        try:
            client = get_redis(self.ctx.redis_url, timeout=ANNOUNCE_TIMEOUT_S)
            BuildQueue(client, self.paths.cluster).expect(segments)
        except (redis.RedisError, ValueError) as exc:
            log.warning(
                "force commit: builds of %d segment(s) not announced: %s", len(segments), exc
            )

    def _map_fields(self, path: str) -> dict[str, dict[str, str]]:
        found = read_record(self.zk, path)
        return {} if found is None else found.record.map_fields

    def _live_sessions(self) -> dict[str, str]:
        try:
            live = self.zk.get_children(self.paths.liveinstances)
        except NoNode:
            return {}
        sessions = {}
        for instance in live:
            found = read_record(self.zk, self.paths.liveinstance(instance))
            if found is not None:
                sessions[instance] = found.record.simple_fields.get("SESSION_ID", "")
        return sessions

    # --- batches ------------------------------------------------------------------------------
    def advance(self, run: BatchRun) -> BatchRun | None:
        """One step of a batched force commit: the run to schedule next, or None when it is over
        (every batch sent, or given up: the previous batch was not DONE, or the table had no lead
        controller, by the deadline, or a send failed; logged, as Pinot's batch thread does).
        With `lead_controller`, a batch is sent on behalf of the table's lead controller and waits
        while the table has none."""
        previous = list(run.rounds[run.index - 1])
        if self.segments_yet_to_be_committed(run.table, previous):
            return self._wait(run, f"batch {previous} not committed")
        source = self.source
        if self._lead_controller is not None:
            source = self._lead_controller(run.table)
            if source is None:
                return self._wait(run, "no lead controller")
        try:
            self.send(run.table, list(run.rounds[run.index]), source)
        except Exception:
            log.exception("force commit of %s: sending a batch failed; giving up", run.table)
            return None
        if run.index + 1 >= len(run.rounds):
            return None
        deadline = self._clock() + run.batch.check_timeout_s
        return BatchRun(run.table, run.rounds, run.index + 1, deadline, run.batch)

    def _wait(self, run: BatchRun, why: str) -> BatchRun | None:
        """`run` again (check later) before its deadline; past it, None (logged)."""
        if self._clock() < run.deadline:
            return run
        remaining = sum(len(r) for r in run.rounds[run.index :])
        log.error(
            "force commit of %s: %s within %d s; the remaining %d segment(s) are not force "
            "committed",
            run.table,
            why,
            run.batch.check_timeout_s,
            remaining,
        )
        return None

    def segments_yet_to_be_committed(self, table: str, segments: Iterable[str]) -> list[str]:
        """Those of `segments` whose metadata exists and is not DONE, in the order given."""
        pending = []
        for segment in segments:
            found = read_record(self.zk, self.paths.segment(table, segment))
            if found is None:
                continue  # deleted: nothing left to wait for
            if SegmentZKMetadata.from_znrecord(found.record).status != SegmentStatus.DONE:
                pending.append(segment)
        return pending

    # --- the job record -----------------------------------------------------------------------
    def _jobs_path(self) -> str:
        return self.paths.controller_jobs(JOB_TYPE)

    def add_job(self, job_id: str, table: str, submitted_ms: int, segments: list[str]) -> None:
        job = {
            JOB_ID: job_id,
            TABLE_NAME: table,
            JOB_TYPE_KEY: JOB_TYPE,
            SUBMISSION_TIME_MS: str(submitted_ms),
            FORCE_COMMITTED: _json_list(segments),
        }
        path = self._jobs_path()
        try:
            update_record(self.zk, path, lambda record: add_job(record, job))
        except NoNode:
            try:
                create_record(self.zk, path, add_job(ZNRecord(id=JOB_TYPE), job))
            except NodeExists:  # created meanwhile by another request: add to that one
                update_record(self.zk, path, lambda record: add_job(record, job))

    def job(self, job_id: str) -> dict[str, str]:
        found = read_record(self.zk, self._jobs_path())
        job = None if found is None else found.record.map_fields.get(job_id)
        if job is None:
            raise NotFound(f"Failed to find controller job id: {job_id}")
        return dict(job)

    def status(self, job_id: str) -> dict[str, Any]:
        """`GET /tables/forceCommitStatus/{jobId}` (see the module contract)."""
        job = self.job(job_id)
        table = job.get(TABLE_NAME, "")
        to_check = _load_list(job.get(YET_TO_BE_COMMITTED, job.get(FORCE_COMMITTED)))
        pending = self.segments_yet_to_be_committed(table, to_check)
        if len(pending) < len(to_check):
            job[YET_TO_BE_COMMITTED] = _json_list(pending)
            self._store_pending(job_id, pending)
        result: dict[str, Any] = dict(job)
        result[YET_TO_BE_COMMITTED] = pending
        result[NUM_YET_TO_BE_COMMITTED] = len(pending)
        return result

    def _store_pending(self, job_id: str, pending: list[str]) -> None:
        def shrink(record: ZNRecord) -> ZNRecord | None:
            job = record.map_fields.get(job_id)
            if job is None:
                return None  # expired meanwhile
            stored = _load_list(job.get(YET_TO_BE_COMMITTED, job.get(FORCE_COMMITTED)))
            if len(stored) <= len(pending):
                return None  # a concurrent status call wrote as short a list already
            out = record.copy()
            out.map_fields[job_id] = {**job, YET_TO_BE_COMMITTED: _json_list(pending)}
            return out

        with contextlib.suppress(NoNode):  # the record is gone: nothing to shrink
            update_record(self.zk, self._jobs_path(), shrink)


def _load_list(text: str | None) -> list[str]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
