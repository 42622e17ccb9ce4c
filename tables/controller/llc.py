"""The controller's segment commit: Pinot's PinotLLCRealtimeSegmentManager (reference §6.2 to §6.6).

`commit_segment_metadata` performs the three ZooKeeper steps of a normal commit, each a
compare-and-set write:
1. the committing segment's metadata: IN_PROGRESS -> DONE with the built segment's facts;
2. the next segment's metadata (IN_PROGRESS at the committed end offset), unless the stream no
   longer has the partition. When the partition looked paused lately (`paused_hint`: the caller
   check's last IdealState, no read) the write is deferred: step 3 then adds no segment and there
   is nothing to delete again (a pause's commits each save a create and a delete); should step 3
   find the partition resumed after all, it stops, makes the metadata and runs again;
3. one IdealState update: the committing segment ONLINE on all its replicas, the next segment
   CONSUMING on its instances unless that very IdealState has the table or partition paused;
   refused when the MAX_SEGMENT_COMPLETION_TIME guard (§6.5) trips, that is when `now` is past
   the committing metadata's znode mtime plus
   `max.segment.completion.time.millis` (cluster config, default 300 000 ms): a commit that slow is
   left to the healing manager, which uses the same guard, so the two never both act.
Offsets the committer's consumer found gone from the stream (`CommittingSegment.lost_offsets`)
are written by step 1 into the DONE metadata's `custom.map` under `consumption.lostOffsets`
("s-e,s-e"); each range must lie inside the segment's `[startOffset, endOffset)`, else the commit
is refused (CommitRejected) and nothing is written.
Fault injection (tests only, `tables.faults`): the process exits right after step 1
(`controller.commit.after_step1`) or right after step 2 (`controller.commit.after_step2`).
If step 3 fails or the next segment did not make it into the IdealState (a pause raced the
commit), step 2's metadata is deleted again. A crash between steps leaves a state the healing
manager repairs (§7.3); nothing committed is lost.

The pauseless commit (§6.3, Pinot's commitSegmentMetadataToCommitting / ToDone) runs the same
steps split over the two calls of the committer:
- `commit_segment_metadata_to_committing` (commit start, before the build): step 1 is
  IN_PROGRESS -> COMMITTING with `segment.realtime.endOffset` and nothing else; steps 2 and 3 are
  the blocking commit's (same guard, same clean-up of step 2, same fault points), so the replicas
  start consuming the next segment at once. The flush updater sizes the next segment without
  learning (the committing segment's size is not known yet). Step 0 adds the segment to the
  listField `committingSegments` of `/PROPERTYSTORE/PAUSELESS_DEBUG_METADATA/<table>`
  (compare-and-set, created when missing; a failure is only logged) once step 1 succeeded, after
  step 3 (also when steps 2 or 3 failed: the segment is COMMITTING either way), before commit
  start answers. Pinot makes it first; it is debug metadata (the validation's
  `syncCommittingSegments` rewrites it from the segments' statuses, as after a crash between the
  steps), and its compare-and-set, on a znode all the table's commits share, then stood between the
  next segment and its servers (`bench/freshness.py`: up to 137 ms, median 2.6 ms).
- `commit_segment_metadata_to_done` (commit end, after build and upload): refused
  (CommitRejected) when the guard trips; else COMMITTING -> DONE with exactly the facts the
  blocking step 1 writes (lost offsets included), the segment leaves `committingSegments`
  (best effort), the flush updater learns from it, and the same "committed <segment> at offset
  <n>" line is logged.
Either commit with download URL "" (the committer's location was `peer://` or blank: only servers
hold the segment) logs a warning; the healer's deep-store repair fills the URL later.

Flush thresholds (§6.6) come from one updater per table and topic, kept in this process's memory
(as in Pinot: a new lead controller starts learning again). It is made again when the table
config's flush settings change (`PUT /tables/{t}`), so the next segment uses the new thresholds;
while they stay the same the size-based updater keeps what it learned.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from tables import faults
from tables.cluster.context import ClusterContext
from tables.cluster.hot_reads import HotReads
from tables.domain.assignment import consuming_instances_for_partition, max_partitions_per_instance
from tables.domain.commit import CommitRejected, apply_commit
from tables.domain.flush import (
    CommittedSegmentStats,
    FlushThresholdUpdater,
    flush_settings,
    make_updater,
)
from tables.domain.healing import (
    MAX_SEGMENT_COMPLETION_TIME_KEY,
    max_completion_time_ms,
)
from tables.domain.idealstate import InstanceState
from tables.domain.ledger import LOST_OFFSETS_KEY, format_offset_ranges, parse_offset
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata, new_in_progress
from tables.domain.table_config import TableConfig
from tables.domain.znrecord import ZNRecord
from tables.streams.base import StreamError, StreamProvider, provider_for
from tables.zk.errors import NodeExists, NoNode
from tables.zk.group_commit import update_idealstate
from tables.zk.interface import ZkStore
from tables.zk.records import VersionedRecord, create_record, read_record, update_record

from .healing_errors import ErrorRepairer
from .resources import ResourceManager
from .segment_cleanup import drop_unless_in_idealstate

__all__ = [
    "COMMITTING_SEGMENTS",
    "CommitRejected",
    "CommittingSegment",
    "LLCSegmentManager",
    "change_committing",
    "committing_segments",
]

log = logging.getLogger(__name__)


#: listField of /PROPERTYSTORE/PAUSELESS_DEBUG_METADATA/<table> (Pinot's LLCM.COMMITTING_SEGMENTS)
COMMITTING_SEGMENTS = "committingSegments"

_updaters_lock = threading.Lock()
# (table, topic) -> (the flush settings it was made for, the updater)
_updaters: dict[tuple[str, str], tuple[tuple[object, ...], FlushThresholdUpdater]] = {}


@dataclass(frozen=True)
class CommittingSegment:
    """What the committer reports at commit end (the built segment's metadata)."""

    segment_name: str
    end_offset: int
    total_docs: int
    start_time_ms: int
    end_time_ms: int
    crc: int
    data_crc: int
    size_bytes: int
    download_url: str
    row_count: int = -1  # rows consumed before the build (the commit's rowCount)
    force_commit: bool = False
    # [start, end) ranges the stream dropped before the committer read them (streamDataLoss)
    lost_offsets: tuple[tuple[int, int], ...] = ()

    @classmethod
    def at_commit_start(cls, segment: str, end_offset: int, row_count: int = -1) -> Self:
        """What a pauseless commit start knows: the end offset (and the rows consumed), nothing
        built yet (-1, as Pinot's descriptor has segment size -1 then)."""
        return cls(segment, end_offset, -1, -1, -1, -1, -1, -1, "", row_count=row_count)


def flush_updater(table: str, topic: str, stream_config: dict[str, str]) -> FlushThresholdUpdater:
    """This process's updater for (table, topic), created on first use and made again when the
    stream config's flush settings differ from those it was made for."""
    settings = flush_settings(stream_config)
    with _updaters_lock:
        key = (table, topic)
        cached = _updaters.get(key)
        if cached is None or cached[0] != settings:
            cached = (settings, make_updater(stream_config))
            _updaters[key] = cached
        return cached[1]


def _lost_offsets_custom(
    current: SegmentZKMetadata, committing: CommittingSegment
) -> dict[str, str] | None:
    """The custom.map entry declaring the commit's lost offsets (None when there are none);
    CommitRejected when a range is not inside the segment's [startOffset, end offset)."""
    if not committing.lost_offsets:
        return None
    start = parse_offset(current.start_offset)
    for low, high in committing.lost_offsets:
        if start is None or not start <= low < high <= committing.end_offset:
            raise CommitRejected(
                f"{committing.segment_name}: lost offsets [{low}, {high}) are not inside the "
                f"segment's range [{current.start_offset}, {committing.end_offset})"
            )
    return {LOST_OFFSETS_KEY: format_offset_ranges(committing.lost_offsets)}


def _log_committed(segment: str, end_offset: int, next_segment: str | None) -> None:
    """The line both commits log once the segment is DONE."""
    log.info(
        "committed %s at offset %s (next: %s)",
        segment,
        end_offset,
        next_segment if next_segment is not None else "none",
    )


def _warn_if_peers_only(committing: CommittingSegment) -> None:
    """A segment committed with download URL "" (a `peer://` or blank location)."""
    if not committing.download_url:
        log.warning(
            "%s: committed without a deep-store copy (download URL empty): servers serve it, "
            "the healing manager uploads one",
            committing.segment_name,
        )


def committing_segments(ctx: ClusterContext, table: str) -> list[str]:
    """The table's `committingSegments` (PAUSELESS_DEBUG_METADATA); [] when there is none.
    `table` is the name with type."""
    found = read_record(ctx.client, ctx.paths.pauseless_debug(table))
    return list(found.record.list_fields.get(COMMITTING_SEGMENTS, [])) if found else []


def change_committing(zk: ZkStore, table: str, path: str, segment: str, add: bool) -> None:
    """Add `segment` to (or remove it from) the committing list at `path`, compare-and-set;
    the znode (id: the table name with type) is created on the first add."""

    def change(record):
        current = record.list_fields.get(COMMITTING_SEGMENTS, [])
        if (segment in current) == add:
            return None
        out = record.copy()
        out.list_fields[COMMITTING_SEGMENTS] = (
            [*current, segment] if add else [s for s in current if s != segment]
        )
        return out

    for _ in range(3):  # the znode may be created (or deleted) by someone else meanwhile
        try:
            update_record(zk, path, change)
            return
        except NoNode:
            if not add:
                return
        record = change(ZNRecord(id=table))
        with contextlib.suppress(NodeExists):
            create_record(zk, path, record)
            return
    raise RuntimeError(f"{path}: created and deleted concurrently, {segment} not recorded")


class _DeferredNextNeeded(Exception):
    """Step 3 would add a next segment whose metadata step 2 deferred (the partition looked
    paused): make the metadata first, then apply step 3 again."""


class LLCSegmentManager:
    def __init__(
        self,
        ctx: ClusterContext,
        hot: HotReads | None = None,
        paused_hint: Callable[[str, int], bool] | None = None,
        streams: Callable[[str], StreamProvider | None] | None = None,
    ) -> None:
        """`hot`: the completion manager's watched reads of the table config, the tagged servers
        and the cluster config (`tables.cluster.hot_reads`); None reads them from ZooKeeper.
        `paused_hint(table, partition)`: whether the partition looked paused lately (the caller
        check's last IdealState): step 2 then defers the next segment's metadata (step 3).
        `streams(table)`: a stream provider of the table kept open by the caller (the caller
        check's), for step 2's partition count; None opens one per count."""
        self.ctx = ctx
        self.zk = ctx.client
        self.paths = ctx.paths
        self.resources = ResourceManager(ctx)
        self.hot = hot
        self._step1_mtime_ms: dict[str, int] = {}  # metadata path -> mtime after step 1
        self.paused_hint = paused_hint
        self.streams = streams
        self._deferred: set[str] = set()  # next segments whose metadata step 2 did not create

    # --- reads -------------------------------------------------------------------------------
    def max_completion_time_ms(self) -> int:
        if self.hot is not None:
            return max_completion_time_ms(
                self.hot.cluster_simple_field(MAX_SEGMENT_COMPLETION_TIME_KEY)
            )
        found = read_record(self.zk, self.paths.cluster_config)
        raw = found.record.simple_fields.get(MAX_SEGMENT_COMPLETION_TIME_KEY) if found else None
        return max_completion_time_ms(raw)

    def _config(self, table: str) -> TableConfig:
        if self.hot is None:
            return self.resources.get_table_config(table)
        return self.hot.table_config(self.resources.table_name(table))

    def _tagged(self, tag: str) -> list[str]:
        if self.hot is None:
            return self.resources.tagged_instances(tag)
        return self.hot.tagged_instances(tag)

    def _partition_count(self, config: TableConfig) -> int | None:
        if self.streams is not None:
            shared = self.streams(config.table_name_with_type)
            try:
                return None if shared is None else shared.partition_count()
            except StreamError:
                return None
        try:
            provider = provider_for(config.stream_config, self.ctx.redis_url)
        except StreamError:
            return None
        try:
            return provider.partition_count()
        except StreamError:
            return None
        finally:
            provider.close()

    # --- commit ------------------------------------------------------------------------------
    def commit_segment_metadata(
        self, table: str, committing: CommittingSegment, known: VersionedRecord | None = None
    ) -> str | None:
        """The three commit steps; returns the next segment's name (None when none was made).

        Raises CommitRejected (the server is told FAILED) when the segment is not IN_PROGRESS, the
        IdealState no longer has it CONSUMING, or the completion-time guard trips.
        """
        config = self._config(table)
        table = config.table_name_with_type
        name = LLCSegmentName.parse(committing.segment_name)
        if name is None:
            raise CommitRejected(f"{committing.segment_name} is not an LLC segment name")
        meta_path = self.paths.segment(table, committing.segment_name)

        done = self._step1_mark_done(meta_path, committing, known=known)
        faults.exit_if("controller.commit.after_step1")
        # Learn from this segment before sizing the next one, as Pinot's updaters do.
        self._learn(config, done, committing)
        next_meta, next_replicas = self._step2_next_segment(config, name, committing, done)
        faults.exit_if("controller.commit.after_step2")
        next_name = self._step3_or_drop(config, committing, next_meta, next_replicas, meta_path)
        _warn_if_peers_only(committing)
        _log_committed(committing.segment_name, committing.end_offset, next_name)
        return next_name

    # --- pauseless commit (§6.3) ---------------------------------------------------------------
    def commit_segment_metadata_to_committing(
        self, table: str, segment: str, end_offset: int, row_count: int = -1
    ) -> str | None:
        """Pauseless commit start (steps 0 to 3, see the module docstring); returns the next
        segment's name (None when none was made). CommitRejected as `commit_segment_metadata`."""
        config = self._config(table)
        table = config.table_name_with_type
        name = LLCSegmentName.parse(segment)
        if name is None:
            raise CommitRejected(f"{segment} is not an LLC segment name")
        meta_path = self.paths.segment(table, segment)
        committing = CommittingSegment.at_commit_start(segment, end_offset, row_count)

        current = self._step1_mark_committing(meta_path, committing)
        try:
            faults.exit_if("controller.commit.after_step1")
            next_meta, next_replicas = self._step2_next_segment(config, name, committing, current)
            faults.exit_if("controller.commit.after_step2")
            next_name = self._step3_or_drop(config, committing, next_meta, next_replicas, meta_path)
        finally:
            self._add_committing(table, segment)  # step 0, last (module docstring)
        log.info(
            "%s is COMMITTING at offset %s (next: %s)", segment, end_offset, next_name or "none"
        )
        return next_name

    def commit_segment_metadata_to_done(
        self, table: str, committing: CommittingSegment, next_segment: str | None = None
    ) -> None:
        """Pauseless commit end: COMMITTING -> DONE (see the module docstring). `next_segment`
        (what commit start made) only goes into the log line. CommitRejected when the guard
        trips, the segment is not COMMITTING or the lost offsets do not fit."""
        config = self._config(table)
        table = config.table_name_with_type
        segment = committing.segment_name
        meta_path = self.paths.segment(table, segment)
        self._refuse_if_too_late(meta_path, segment)
        done = self._step1_mark_done(meta_path, committing, SegmentStatus.COMMITTING)
        try:
            change_committing(self.zk, table, self.paths.pauseless_debug(table), segment, False)
        except Exception:
            log.exception("%s: cannot remove it from %s", segment, COMMITTING_SEGMENTS)
        self._learn(config, done, committing)
        _warn_if_peers_only(committing)
        _log_committed(segment, committing.end_offset, next_segment)

    def _add_committing(self, table: str, segment: str) -> None:
        """Step 0 of a pauseless commit start; a failure is only logged."""
        try:
            change_committing(self.zk, table, self.paths.pauseless_debug(table), segment, True)
        except Exception:
            log.exception("%s: cannot add it to %s", segment, COMMITTING_SEGMENTS)

    def _step1_mark_committing(self, path: str, committing: CommittingSegment) -> SegmentZKMetadata:
        """IN_PROGRESS -> COMMITTING + end offset, compare-and-set; returns the new metadata."""
        result: dict[str, SegmentZKMetadata] = {}

        def mark(record):
            current = SegmentZKMetadata.from_znrecord(record)
            if current.status != SegmentStatus.IN_PROGRESS:
                raise CommitRejected(
                    f"{committing.segment_name} is {current.status}, not IN_PROGRESS"
                )
            result["meta"] = current.mark_committing(str(committing.end_offset))
            return result["meta"].to_znrecord()

        self._update_metadata(path, committing.segment_name, mark)
        return result["meta"]

    # --- the steps -----------------------------------------------------------------------------
    def _step1_mark_done(
        self,
        path: str,
        committing: CommittingSegment,
        expected: SegmentStatus = SegmentStatus.IN_PROGRESS,
        known: VersionedRecord | None = None,
    ) -> SegmentZKMetadata:
        """`expected` (IN_PROGRESS, or COMMITTING for a pauseless commit end) -> DONE with the
        built segment's facts, compare-and-set (first on `known`, the znode as read earlier:
        `update_record`)."""
        result: dict[str, SegmentZKMetadata] = {}

        def mark(record):
            current = SegmentZKMetadata.from_znrecord(record)
            if current.status != expected:
                raise CommitRejected(
                    f"{committing.segment_name} is {current.status}, not {expected}"
                )
            custom = _lost_offsets_custom(current, committing)
            done = current.mark_done(
                end_offset=str(committing.end_offset),
                start_time_ms=committing.start_time_ms,
                end_time_ms=committing.end_time_ms,
                total_docs=committing.total_docs,
                crc=committing.crc,
                data_crc=committing.data_crc,
                size_in_bytes=committing.size_bytes,
                download_url=committing.download_url,
                custom_map=custom,
            )
            result["done"] = done
            return done.to_znrecord()

        self._update_metadata(path, committing.segment_name, mark, known)
        return result["done"]

    def _update_metadata(
        self, path: str, segment: str, mark: Callable, known: VersionedRecord | None = None
    ) -> None:
        """Compare-and-set `mark` over a segment's metadata; CommitRejected when it has none.
        The znode's mtime after the write is kept for step 3's guard (no second read)."""
        try:
            written = update_record(self.zk, path, mark, known=known)
        except NoNode:
            raise CommitRejected(f"{segment} has no metadata") from None
        self._step1_mtime_ms[path] = written.mtime_ms

    def _step2_next_segment(
        self,
        config: TableConfig,
        name: LLCSegmentName,
        committing: CommittingSegment,
        done: SegmentZKMetadata,
    ) -> tuple[SegmentZKMetadata | None, list[str]]:
        """The next segment's metadata (created in ZooKeeper, or deferred: module docstring) and
        the replicas it goes to, or (None, []) when the partition ended. Whether the table or
        partition is paused is decided by step 3 alone, on the IdealState it replaces: a pause or
        resume that lands between the two steps then cannot leave the partition without its next
        segment, or with one."""
        table = config.table_name_with_type
        partitions = self._partition_count(config)
        if partitions is not None and name.partition_group_id >= partitions:
            return None, []  # the partition ended
        now = self.ctx.now_ms()
        next_name = str(name.next(now))
        num_partitions = partitions or 1
        instances = self._tagged(config.server_tag)
        per_instance = max_partitions_per_instance(
            num_partitions, config.replication, max(len(instances), 1)
        )
        updater = flush_updater(table, config.topic_name or "", config.stream_config)
        threshold = updater.threshold_for_new_segment(per_instance, self._stats(done, committing))
        meta = new_in_progress(
            next_name, str(committing.end_offset), config.replication, threshold, now
        )
        if self.paused_hint is not None and self.paused_hint(table, name.partition_group_id):
            self._deferred.add(next_name)  # made by step 3 only if it adds the segment after all
        else:
            self._create_next(table, meta)
        replicas = consuming_instances_for_partition(
            table, instances, name.partition_group_id, config.replication
        )
        return meta, replicas

    def _refuse_if_too_late(self, meta_path: str, segment: str) -> None:
        """The MAX_SEGMENT_COMPLETION_TIME guard (§6.5) on the metadata znode's mtime: as step 1
        of this commit left it (its write's reply), else read."""
        mtime = self._step1_mtime_ms.pop(meta_path, None)
        if mtime is None:
            stat = self.zk.exists(meta_path)
            mtime = None if stat is None else stat.mtime
        limit = self.max_completion_time_ms()
        if mtime is None or self.ctx.now_ms() > mtime + limit:
            raise CommitRejected(
                f"{segment}: commit took longer than {limit} ms "
                "(MAX_SEGMENT_COMPLETION_TIME); the healing manager repairs it"
            )

    def _step3_or_drop(
        self,
        config: TableConfig,
        committing: CommittingSegment,
        next_meta: SegmentZKMetadata | None,
        next_replicas: list[str],
        meta_path: str,
    ) -> str | None:
        """Step 3; step 2's metadata is dropped again when step 3 fails (re-raised) or the next
        segment did not make it into the IdealState. Returns the next segment's name or None."""
        table = config.table_name_with_type
        try:
            try:
                added = self._step3_idealstate(
                    config, committing, next_meta, next_replicas, meta_path
                )
            except _DeferredNextNeeded:  # resumed since it looked paused: make it, then again
                self._create_next(table, next_meta)
                added = self._step3_idealstate(
                    config, committing, next_meta, next_replicas, meta_path
                )
        except Exception:
            self._drop_next(table, next_meta)
            raise
        if next_meta is not None and not added:
            self._drop_next(table, next_meta)
            return None
        return None if next_meta is None else next_meta.segment_name

    def _step3_idealstate(
        self,
        config: TableConfig,
        committing: CommittingSegment,
        next_meta: SegmentZKMetadata | None,
        next_replicas: list[str],
        meta_path: str,
    ) -> bool:
        self._refuse_if_too_late(meta_path, committing.segment_name)
        next_name = None if next_meta is None else next_meta.segment_name
        added: dict[str, bool] = {}

        def change(record):
            result = apply_commit(record, committing.segment_name, next_name, next_replicas)
            if result.next_segment_added and next_name in self._deferred:
                raise _DeferredNextNeeded(next_name)  # this call only: nothing written for it
            added["value"] = result.next_segment_added
            return result.idealstate

        update_idealstate(self.zk, self.paths.idealstate(config.table_name_with_type), change)
        return added.get("value", False)

    def _create_next(self, table: str, meta: SegmentZKMetadata | None) -> None:
        """Step 2's write; NodeExists: a retried commit made it already (same name and start)."""
        if meta is None:
            return
        with contextlib.suppress(NodeExists):
            create_record(self.zk, self.paths.segment(table, meta.segment_name), meta.to_znrecord())
        self._deferred.discard(meta.segment_name)

    def _drop_next(self, table: str, meta: SegmentZKMetadata | None) -> None:
        """Delete the next segment's metadata again, unless a healing run adopted it into the
        IdealState meanwhile (`drop_unless_in_idealstate`). One never made needs nothing."""
        if meta is not None and meta.segment_name not in self._deferred:
            drop_unless_in_idealstate(self.ctx, table, meta.segment_name)

    @staticmethod
    def _stats(done: SegmentZKMetadata, committing: CommittingSegment) -> CommittedSegmentStats:
        return CommittedSegmentStats(
            total_docs=committing.total_docs,
            size_bytes=committing.size_bytes,
            creation_time_ms=done.creation_time or 0,
            threshold=done.flush_threshold_size or 0,
            force_commit=committing.force_commit,
            pre_commit_rows=committing.row_count,
        )

    def _learn(
        self, config: TableConfig, done: SegmentZKMetadata, committing: CommittingSegment
    ) -> None:
        updater = flush_updater(
            config.table_name_with_type, config.topic_name or "", config.stream_config
        )
        updater.on_segment_commit(self._stats(done, committing), self.ctx.now_ms())

    # --- other server-reported events ----------------------------------------------------------
    def segment_stopped_consuming(self, table: str, segment: str, instance: str) -> None:
        """§6.7: that replica CONSUMING -> OFFLINE in the IdealState (healing recreates the
        segment once all its replicas are OFFLINE)."""
        table = self.resources.table_name(table)

        def stop(record):
            replicas = record.map_fields.get(segment)
            if not replicas or replicas.get(instance) != InstanceState.CONSUMING:
                return None
            out = record.copy()
            out.map_fields[segment] = {**replicas, instance: InstanceState.OFFLINE}
            return out

        update_idealstate(self.zk, self.paths.idealstate(table), stop)
        # Pinot then resets the replica (best effort), so the server leaves ERROR for OFFLINE and
        # a later repair (a new segment, or the partial-OFFLINE switch) finds it ready to consume.
        try:
            ErrorRepairer(self.ctx, "controller").reset_instance(table, segment, instance)
        except Exception:
            log.warning("%s: could not reset %s after it stopped consuming", segment, instance)
