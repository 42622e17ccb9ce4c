"""Pause and resume consumption (reference §4.1 to §4.4): Pinot's `LLCM.pauseConsumption`,
`resumeConsumption` and `getPauseStatusDetails`, plus partition-level pause.

Contract:
- `table` is raw or `<raw>_REALTIME`; no IdealState -> 404 "Table X not found!", a disabled one ->
  400; bad `consumeFrom` or `partitions` -> 400. Every check runs before anything is written.
- Pause and resume of one table are serialised by a ZooKeeper lock (`LOCK_ROOT/<table>`), so the
  order in which requests are acknowledged is the order of their IdealState writes; each write is
  still a compare-and-set, because commits update the IdealState without the lock.
- `pause`: one compare-and-set IdealState update (`tables.domain.pause.paused_record`), then the
  CONSUMING segments of the written IdealState (of the paused partitions, for a partition pause)
  are force committed through `ForceCommitManager.start` (first batch sent in the request, later
  ones by Celery; a job record in CONTROLLER_JOBS/FORCE_COMMIT gives progress). A pause with no
  live server to tell is still a pause: the segments are committed (empty) when their servers
  start consuming them and see the flag. Repeating a pause writes nothing and re-sends nothing.
- `resume`: reads each partition's latest segment and the stream's offsets, creates the metadata of
  the new CONSUMING segments, then one compare-and-set update clears the flag (or the partitions)
  and adds them, re-planned from the record being replaced (`plan_resume`). Metadata this call
  created that did not make it into the IdealState is deleted again. If a racing commit left a
  partition without a CONSUMING segment, the round is repeated (at most `RESUME_ROUNDS` times).
  Offsets lost by the stream are counted in `llcStreamDataLoss` by the caller (it owns the
  database).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from tables.cluster.context import ClusterContext
from tables.cluster.errors import BadRequest, ServiceError, Unavailable
from tables.domain import pause as domain
from tables.domain.assignment import consuming_instances_for_partition, max_partitions_per_instance
from tables.domain.idealstate import (
    consuming_segments,
    paused_partitions,
    with_paused_partitions,
)
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata, new_in_progress
from tables.domain.table_config import TableConfig
from tables.domain.znrecord import ZNRecord
from tables.streams.base import StreamError, provider_for
from tables.zk.errors import LockTimeout, NodeExists, NoNode
from tables.zk.group_commit import update_idealstate
from tables.zk.records import create_record, read_record

from .force_commit import BatchConfig, ForceCommitManager, ForceCommitResult, parse_partitions
from .llc import flush_updater

__all__ = ["PauseManager", "PauseResult", "ResumeResult"]

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 30.0
RESUME_ROUNDS = 5


@dataclass(frozen=True)
class PauseResult:
    table: str
    details: dict[str, object]
    written: bool  # False: it was paused already
    commit: ForceCommitResult | None = None


@dataclass(frozen=True)
class ResumeResult:
    table: str
    details: dict[str, object]
    segments: tuple[domain.NewSegment, ...] = field(default_factory=tuple)

    @property
    def data_loss(self) -> int:
        return domain.ResumePlan(self.segments).data_loss


class PauseManager:
    def __init__(self, ctx: ClusterContext, commits: ForceCommitManager | None = None) -> None:
        self.ctx, self.zk, self.paths = ctx, ctx.client, ctx.paths
        self.commits = commits or ForceCommitManager(ctx)
        self.resources = self.commits.resources

    @contextlib.contextmanager
    def _locked(self, table: str) -> Iterator[None]:
        path = f"{self.paths.controller}/LOCKS/pause/{table}"
        lock = self.zk.lock(path, self.commits.source)
        try:
            if not lock.acquire(timeout=LOCK_TIMEOUT_S):
                raise Unavailable(f"another pause or resume of {table} is still running")
        except LockTimeout:
            raise Unavailable(f"another pause or resume of {table} is still running") from None
        try:
            yield
        finally:
            lock.release()

    def _partitions(self, text: str | None) -> frozenset[int] | None:
        return None if text is None else frozenset(parse_partitions(text))

    # --- pauseStatus ----------------------------------------------------------------------------
    def status(self, name: str) -> dict[str, object]:
        table = self.resources.table_name(name)
        record = self.commits.enabled_idealstate(table, check_enabled=False)
        return domain.pause_status_details(record, consuming_segments(record))

    # --- pauseConsumption ---------------------------------------------------------------------
    def pause(
        self,
        name: str,
        comment: str | None = None,
        batch: BatchConfig | None = None,
        partitions: str | None = None,
    ) -> PauseResult:
        wanted = self._partitions(partitions)
        table = self.resources.table_name(name)
        self.commits.enabled_idealstate(table)
        self.commits.check_allowed(table)
        with self._locked(table):
            written: dict[str, bool] = {"value": False}

            def mutate(record: ZNRecord) -> ZNRecord | None:
                new = domain.paused_record(record, comment, self.ctx.now_ms(), wanted)
                written["value"] = new is not None
                return new

            after = update_idealstate(self.zk, self.paths.idealstate(table), mutate).record
            commit = None
            if written["value"]:
                commit = self._commit_paused(table, after, wanted, batch or BatchConfig())
        details = domain.pause_status_details(after, consuming_segments(after))
        if wanted is None:
            details["comment"] = comment or domain.PAUSED_COMMENT
        return PauseResult(table, details, written["value"], commit)

    def _commit_paused(
        self, table: str, record: ZNRecord, wanted: frozenset[int] | None, batch: BatchConfig
    ) -> ForceCommitResult | None:
        targets = consuming_segments(record)
        if wanted is not None:
            targets = [
                s
                for s in targets
                if (n := LLCSegmentName.parse(s)) is not None and n.partition_group_id in wanted
            ]
        if not targets:
            return None
        try:
            return self.commits.start(table, targets, record.map_fields, batch)
        except ServiceError as exc:  # no live server: they commit when they start and see the flag
            log.warning("pause of %s: %s", table, exc.message)
            return None

    # --- resumeConsumption --------------------------------------------------------------------
    def resume(
        self,
        name: str,
        consume_from: str | None = None,
        comment: str | None = None,
        partitions: str | None = None,
    ) -> ResumeResult:
        try:
            criteria = domain.parse_consume_from(consume_from)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        wanted = self._partitions(partitions)
        table = self.resources.table_name(name)
        self.commits.enabled_idealstate(table)
        config = self.resources.get_table_config(table)
        streams = self._stream_ranges(config)
        made: list[domain.NewSegment] = []
        with self._locked(table):
            first = True
            for _ in range(RESUME_ROUNDS):
                added, after, missing = self._resume_round(
                    config, streams, criteria, comment, wanted, first
                )
                made += added
                first = False
                if not missing:
                    break
        details = domain.pause_status_details(after, consuming_segments(after))
        if wanted is None:
            details["comment"] = comment or domain.RESUMED_COMMENT
        return ResumeResult(table, details, tuple(made))

    def _resume_round(
        self,
        config: TableConfig,
        streams: dict[int, domain.OffsetRange],
        criteria: domain.ConsumeFrom,
        comment: str | None,
        wanted: frozenset[int] | None,
        clear_flags: bool,
    ) -> tuple[list[domain.NewSegment], ZNRecord, bool]:
        """Plan, create metadata, write; returns (segments added, the record written or read,
        whether a partition still needs a segment)."""
        table = config.table_name_with_type
        path = self.paths.idealstate(table)
        now = self.ctx.now_ms()
        snapshot = self.commits.enabled_idealstate(table)
        tails = self._tails(table, snapshot)
        replicas = self._replicas_for(config, len(streams))

        def cleared(record: ZNRecord) -> ZNRecord:
            if not clear_flags:
                return record
            if wanted is None:
                return domain.resumed_flag(record, comment, self.ctx.now_ms())
            held = paused_partitions(record) - wanted
            return with_paused_partitions(record, held)

        def plan(record: ZNRecord) -> domain.ResumePlan:
            return domain.plan_resume(
                record,
                config.raw_table_name,
                tails,
                streams,
                criteria,
                replicas,
                now,
                config.offset_reset,
                wanted,
            )

        ahead = plan(cleared(snapshot))
        created, records = self._create_metadata(config, ahead, len(streams))
        ensured = {s.segment for s in ahead.segments}
        used: list[domain.NewSegment] = []

        def mutate(record: ZNRecord) -> ZNRecord | None:
            new = cleared(record)
            chosen = [s for s in plan(new).segments if s.segment in ensured]
            used[:] = chosen
            if not chosen and not clear_flags:
                return None
            out = domain.apply_resume(new, domain.ResumePlan(tuple(chosen)))
            # A table-level resume consumes the note of a topic swap (`plan_resume` read it).
            return domain.without_stream_change(out) if clear_flags and wanted is None else out

        after = update_idealstate(self.zk, path, mutate).record
        self._restore_metadata(table, used, records)
        for segment in created - {s.segment for s in used}:
            if segment not in after.map_fields:
                with contextlib.suppress(NoNode):
                    self.zk.delete(self.paths.segment(table, segment))
        missing = bool(plan(after).segments)
        if used:
            log.info("resumed %s: %s", table, [(s.segment, s.start_offset) for s in used])
        return used, after, missing

    def _tails(self, table: str, record: ZNRecord) -> dict[int, domain.PartitionTail]:
        latest = domain.latest_segments(record)
        tails = {}
        for partition, name in latest.items():
            found = read_record(self.zk, self.paths.segment(table, str(name)))
            if found is None:
                continue
            meta = SegmentZKMetadata.from_znrecord(found.record)
            tails[partition] = domain.PartitionTail(
                str(name), str(meta.status), _int(meta.start_offset), _int(meta.end_offset)
            )
        return tails

    def _stream_ranges(self, config: TableConfig) -> dict[int, domain.OffsetRange]:
        try:
            provider = provider_for(config.stream_config, self.ctx.redis_url)
        except StreamError as exc:
            message = f"cannot read the stream of {config.table_name_with_type}: {exc}"
            raise BadRequest(message) from None
        try:
            return {
                p: domain.OffsetRange(provider.earliest_offset(p), provider.latest_offset(p))
                for p in range(provider.partition_count())
            }
        except StreamError as exc:
            message = f"cannot read the stream of {config.table_name_with_type}: {exc}"
            raise Unavailable(message) from None
        finally:
            provider.close()

    def _replicas_for(self, config: TableConfig, partitions: int):
        instances = self.resources.tagged_instances(config.server_tag)
        if len(instances) < config.replication:
            raise Unavailable(
                f"{len(instances)} server(s) tagged {config.server_tag}, "
                f"{config.replication} replica(s) needed"
            )
        table = config.table_name_with_type

        def replicas(partition: int) -> list[str]:
            return consuming_instances_for_partition(
                table, instances, partition, config.replication
            )

        return replicas

    def _restore_metadata(
        self, table: str, used: list[domain.NewSegment], records: dict[str, ZNRecord]
    ) -> None:
        """Re-create the metadata of a segment the IdealState now names when it is gone. A
        commit that made a segment of the same name (its next one, same sequence, same minute)
        and found the table paused deletes it again unless the IdealState names it: when that
        clean-up ran between our create (NodeExists: adopted) and our IdealState write, the
        segment would have no metadata. After our write no clean-up can delete it any more."""
        for segment in used:
            path = self.paths.segment(table, segment.segment)
            if self.zk.exists(path) is not None:
                continue
            with contextlib.suppress(NodeExists):
                create_record(self.zk, path, records[segment.segment])
            log.warning("%s: its metadata was deleted by a commit's clean-up; made again", path)

    def _create_metadata(
        self, config: TableConfig, plan: domain.ResumePlan, partitions: int
    ) -> tuple[set[str], dict[str, ZNRecord]]:
        """Create each planned segment's metadata; returns the names this call created and
        every planned segment's record."""
        if not plan.segments:
            return set(), {}
        table = config.table_name_with_type
        instances = self.resources.tagged_instances(config.server_tag)
        per_instance = max_partitions_per_instance(
            max(partitions, 1), config.replication, max(len(instances), 1)
        )
        updater = flush_updater(table, config.topic_name or "", config.stream_config)
        threshold = updater.threshold_for_new_segment(per_instance, None)
        created = set()
        records: dict[str, ZNRecord] = {}
        for segment in plan.segments:
            meta = new_in_progress(
                segment.segment,
                str(segment.start_offset),
                config.replication,
                threshold,
                self.ctx.now_ms(),
            )
            custom = segment.custom_map()
            if custom:
                meta = _with_custom(meta, custom)
            records[segment.segment] = meta.to_znrecord()
            with contextlib.suppress(NodeExists):
                path = self.paths.segment(table, segment.segment)
                create_record(self.zk, path, records[segment.segment])
                created.add(segment.segment)
        return created, records


def _with_custom(meta: SegmentZKMetadata, custom: dict[str, str]) -> SegmentZKMetadata:
    return replace(meta, custom_map={**meta.custom_map, **custom})


def _int(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None
