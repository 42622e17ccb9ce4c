"""The healing manager: Pinot's RealtimeSegmentValidationManager (reference round 2 §A).

`RealtimeSegmentValidationManager.run_table` is one run of the task on one table:
1. A ZooKeeper lock per table (`CONTROLLER/LOCKS/healing/<table>`) keeps two runs (beat, a
   mirror-triggered run, an operator's) from overlapping; a run that cannot take it within
   `lock_timeout_s` reports so and does nothing.
2. Unless the table is paused (then this part is skipped, as Pinot does), the consuming repairs of
   `tables.domain.healing.plan_consuming_repairs`: each partition's latest segment (read from the
   segment znode names, then only the latest ones' metadata), the IdealState, the stream's
   partitions and earliest offsets. Guarded cases wait for `max.segment.completion.time.millis`
   (cluster config, as the commit path reads it) past the znode's mtime: the commit path refuses its
   last step after that same time, so a slow committer and the healer never both act.
   New segments' metadata is created first (a name already taken is left for the next run), then
   one compare-and-set IdealState write in a ZooKeeper transaction that also checks every new
   segment's metadata is still there; each repair is re-checked against the record it replaces
   (`tables.domain.healing_apply.apply_repairs`). Metadata this run created that did not make it
   into the IdealState is deleted, in a transaction that checks the IdealState did not change
   meanwhile. A new segment that starts past offsets the stream already dropped records
   `[wanted, start)` in its `custom.map` (as a resume does), so `verify_ledger` excuses exactly
   that range; the action says `data_loss` and the caller counts `llcStreamDataLoss`.
3. Orphan committer uploads (`<segment>.tmp.<uuid>` in the deep store) older than
   `tmp_retention_s` are deleted unless they are a DONE segment's download URL (§A.8).
4. Segments without a deep-store copy (a DONE one with download URL "", a pauseless COMMITTING one
   held ONLINE past the guard) get one from a server that holds it (`uploadCommittedSegment`), and
   `committingSegments` is synced (`tables.controller.deep_store_repair`).
5. With `error_auto_reset`, ERROR replicas are reset, and a COMMITTING segment whose replicas are
   all ERROR is re-ingested by a live replica (`POST /reingestSegment`), unless the disaster
   recovery mode forbids it (`tables.controller.healing_errors`, `reingest_trigger`).
Every step runs even when an earlier one failed; failures are in `HealingReport.error`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from django.db import DatabaseError

from tables.cluster.context import ClusterContext
from tables.cluster.reads import ClusterReader
from tables.domain import healing as domain
from tables.domain import pause as pause_domain
from tables.domain.assignment import consuming_instances_for_partition, max_partitions_per_instance
from tables.domain.commit import is_partition_paused
from tables.domain.healing_apply import apply_repairs
from tables.domain.helix_enabled import is_enabled
from tables.domain.idealstate import pause_state, paused_partitions
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata, new_in_progress
from tables.domain.table_config import TableConfig
from tables.domain.znrecord import ZNRecord
from tables.models import DurableCounter
from tables.segments.deepstore import DeepStore
from tables.streams.base import StreamError, StreamProvider, provider_for
from tables.zk import codec
from tables.zk.errors import LockTimeout, NodeExists, NoNode, ZooKeeperError
from tables.zk.records import create_record, read_record

from .deep_store_repair import DeepStoreRepairer
from .healing_errors import ErrorRepairer, UploadSweeper
from .healing_report import HealingAction, HealingReport
from .llc import LLCSegmentManager, flush_updater
from .segment_cleanup import drop_unless_in_idealstate

__all__ = [
    "TASK_NAME",
    "HealingAction",
    "HealingReport",
    "HealingSettings",
    "RealtimeSegmentValidationManager",
]

log = logging.getLogger(__name__)

TASK_NAME = "RealtimeSegmentValidationManager"
STREAM_DATA_LOSS = "llcStreamDataLoss"
IDEALSTATE_ATTEMPTS = 10


@dataclass(frozen=True)
class HealingSettings:
    """Pinot's controller settings of the task (README names the Pinot keys)."""

    partial_offline_repair: bool = False  # ...realtime.segment.partialOfflineReplicaRepairEnabled
    error_auto_reset: bool = True  # controller.segment.error.autoReset
    tmp_retention_s: int = 3600  # controller.realtime.segment.tmpFileRetentionInSeconds
    lock_timeout_s: float = 5.0


def _clock_text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S UTC")


class RealtimeSegmentValidationManager:
    def __init__(
        self,
        ctx: ClusterContext,
        settings: HealingSettings | None = None,
        *,
        source: str = "",
        deep_store: Callable[[], DeepStore] | None = None,
    ) -> None:
        self.ctx, self.zk, self.paths = ctx, ctx.client, ctx.paths
        self.deep_store = deep_store
        self.settings = settings or HealingSettings()
        self.source = source or "controller"
        self.reader = ClusterReader(ctx)
        self.llc = LLCSegmentManager(ctx)

    def realtime_tables(self) -> list[str]:
        """Every REALTIME table (with type) of the cluster."""
        return [t for t in self.reader.list_tables() if t.endswith("_REALTIME")]

    # --- one run ------------------------------------------------------------------------------
    def run_table(
        self, table: str, *, run_id: str, trigger: str, takeover_ms: int | None = None
    ) -> HealingReport:
        """One validation run of `table` (raw or with type); raises NotFound for an unknown one.
        `takeover_ms`: when the table's lead controller took it over (ZooKeeper's clock), for a
        run asked for by the new lead controller: guarded writes older than that are repaired at
        once (`tables.domain.healing`)."""
        config = self.reader.get_table_config(table)
        table = config.table_name_with_type
        report = HealingReport(table, run_id, trigger, self.ctx.now_ms())
        with self._locked(table) as held:
            if not held:
                report.skipped.append("another healing run of this table holds its lock")
            else:
                self._run_steps(config, report, takeover_ms)
        report.finished_ms = self.ctx.now_ms()
        for action in report.actions:
            log.warning("healing %s: %s", table, action.detail)
        self._count_data_loss(config, report)
        return report

    @staticmethod
    def _count_data_loss(config: TableConfig, report: HealingReport) -> None:
        """`llcStreamDataLoss` +1 per repair that met offsets the stream had dropped (Pinot's
        meter), keyed by the raw table as the commit path counts it."""
        lost = sum(1 for action in report.actions if action.data_loss)
        if not lost:
            return
        try:
            DurableCounter.increment(STREAM_DATA_LOSS, config.raw_table_name, by=lost)
        except DatabaseError:
            log.exception("healing %s: cannot count %s", config.table_name_with_type, lost)

    def _run_steps(
        self, config: TableConfig, report: HealingReport, takeover_ms: int | None = None
    ) -> None:
        table = config.table_name_with_type
        try:
            found = read_record(self.zk, self.paths.idealstate(table))
            if found is None:
                report.skipped.append("the table has no IdealState")
                return
            if not is_enabled(found.record):  # as Pinot's validation skips a disabled table
                report.skipped.append("the table is disabled: its segments are not repaired")
            elif pause_state(found.record).paused:
                report.skipped.append(
                    "the table is paused: consuming segments are not repaired (errors are)"
                )
            else:
                ConsumingRepairer(self, config, report, takeover_ms).run(found.record)
        except Exception as exc:  # the other steps still run
            log.exception("healing %s: consuming repairs failed", table)
            report.fail("consuming repairs", exc)
        if self.deep_store is None:
            report.skipped.append("orphan uploads are not swept (no deep store given)")
        else:
            try:
                store = self.deep_store()
                UploadSweeper(self.ctx, store, self.settings.tmp_retention_s).sweep(config, report)
            except Exception as exc:
                log.exception("healing %s: upload cleanup failed", table)
                report.fail("orphan upload cleanup", exc)
        try:
            DeepStoreRepairer(self.ctx, self.deep_store).repair(config, report)
        except Exception as exc:
            log.exception("healing %s: deep-store upload repair failed", table)
            report.fail("deep-store upload repair", exc)
        if not self.settings.error_auto_reset:
            report.skipped.append(
                "ERROR replicas are not reset (controller.segment.error.autoReset)"
            )
            return
        try:
            ErrorRepairer(self.ctx, self.source).repair(config, report)
        except Exception as exc:
            log.exception("healing %s: error repair failed", table)
            report.fail("ERROR replica reset", exc)

    def reset_segment(self, table: str, segment: str) -> list[str]:
        """Helix-style reset of `segment`'s replicas (current state -> OFFLINE); returns the
        instances messaged. NotFound for an unknown table or segment."""
        config = self.reader.get_table_config(table)
        return ErrorRepairer(self.ctx, self.source).reset(config.table_name_with_type, segment)

    @contextlib.contextmanager
    def _locked(self, table: str) -> Iterator[bool]:
        lock = self.zk.lock(f"{self.paths.controller}/LOCKS/healing/{table}", self.source)
        try:
            held = bool(lock.acquire(timeout=self.settings.lock_timeout_s))
        except LockTimeout:
            held = False
        try:
            yield held
        finally:
            if held:
                lock.release()


class ConsumingRepairer:
    """Step 2 of a run (see the module docstring) for one table."""

    def __init__(
        self,
        manager: RealtimeSegmentValidationManager,
        config: TableConfig,
        report: HealingReport,
        takeover_ms: int | None = None,
    ) -> None:
        self.manager, self.config, self.report = manager, config, report
        self.takeover_ms = takeover_ms
        self.ctx, self.zk, self.paths = manager.ctx, manager.zk, manager.paths
        self.table = config.table_name_with_type
        self._provider: StreamProvider | None = None
        self._earliest: dict[int, int | None] = {}
        self._made: set[str] = set()  # metadata this run created

    def run(self, ideal: ZNRecord) -> None:
        try:
            partitions = self._stream_partitions()
            plan = domain.plan_consuming_repairs(
                ideal.map_fields,
                self._latest_facts(),
                stream_partitions=partitions,
                now_ms=self.ctx.now_ms(),
                max_completion_ms=self.manager.llc.max_completion_time_ms(),
                partial_offline_repair=self.manager.settings.partial_offline_repair,
                paused_partitions=paused_partitions(ideal),
                takeover_ms=self.takeover_ms,
                pauseless=self.config.pauseless_enabled,
            )
            self._note_plan(plan)
            resolved, created = self._resolve(plan.repairs, partitions)
            applied = self._write(resolved, created)
            self._drop_strays(plan.repairs)
            for item in applied:
                self.report.actions.append(self._action(item))
        finally:
            if self._provider is not None:
                self._provider.close()

    # --- reads --------------------------------------------------------------------------------
    def _provider_or_none(self) -> StreamProvider | None:
        if self._provider is None:
            try:
                self._provider = provider_for(self.config.stream_config, self.ctx.redis_url)
            except StreamError as exc:
                self.report.waiting.append(f"the stream cannot be read: {exc}")
        return self._provider

    def _stream_partitions(self) -> set[int] | None:
        provider = self._provider_or_none()
        if provider is None:
            return None
        try:
            return set(range(provider.partition_count()))
        except StreamError as exc:
            self.report.waiting.append(f"the stream's partitions cannot be read: {exc}")
            return None

    def earliest(self, partition: int) -> int | None:
        if partition not in self._earliest:
            provider = self._provider_or_none()
            value = None
            if provider is not None:
                try:
                    value = provider.earliest_offset(partition)
                except StreamError as exc:
                    self.report.waiting.append(
                        f"partition {partition}: earliest offset unreadable: {exc}"
                    )
            self._earliest[partition] = value
        return self._earliest[partition]

    def _latest_facts(self) -> list[domain.SegmentFacts]:
        """The metadata of each partition's highest sequence (every segment holding it)."""
        try:
            names = self.zk.get_children(self.paths.segments(self.table))
        except NoNode:
            return []
        top: dict[int, int] = {}
        parsed: list[tuple[str, LLCSegmentName]] = []
        for name in names:
            llc = LLCSegmentName.parse(name)
            if llc is not None:
                parsed.append((name, llc))
                p = llc.partition_group_id
                top[p] = max(top.get(p, -1), llc.sequence_number)
        facts = []
        for name, llc in parsed:
            if llc.sequence_number != top[llc.partition_group_id]:
                continue
            found = read_record(self.zk, self.paths.segment(self.table, name))
            if found is None:
                continue
            meta = SegmentZKMetadata.from_znrecord(found.record)
            facts.append(
                domain.SegmentFacts(
                    name,
                    str(meta.status),
                    meta.start_offset,
                    meta.end_offset,
                    found.mtime_ms,
                )
            )
        return facts

    def _note_plan(self, plan: domain.Plan) -> None:
        for wait in plan.waits:
            self.report.waiting.append(
                f"partition {wait.partition}: {wait.reason}; repaired after "
                f"{_clock_text(wait.until_ms)} if still so"
            )
        for problem in plan.problems:
            log.error("healing %s: %s", self.table, problem)
            self.report.waiting.append(problem)

    # --- resolving: names, offsets, metadata ---------------------------------------------------
    def _resolve(
        self, repairs: list[domain.Repair], partitions: set[int] | None
    ) -> tuple[list[domain.Resolved], dict[str, int]]:
        """Repairs with their new segments' names and instances; the metadata created (or, for
        `add_latest`, found) for each, name -> znode version to check at the write."""
        instances = self.manager.reader.tagged_instances(self.config.server_tag)
        resolved: list[domain.Resolved] = []
        created: dict[str, int] = {}
        for repair in repairs:
            if repair.kind is domain.RepairKind.DUPLICATE_SEQUENCE:
                continue
            replicas = tuple(
                consuming_instances_for_partition(
                    self.table, instances, repair.partition, self.config.replication
                )
                if instances
                else ()
            )
            if repair.add_latest and repair.segment:
                stat = self.zk.exists(self.paths.segment(self.table, repair.segment))
                if stat is None:
                    continue
                created[repair.segment] = stat.version
                resolved.append(domain.Resolved(repair, None, replicas))
                continue
            if repair.new_from is None:
                resolved.append(domain.Resolved(repair))
                continue
            item = self._new_segment(repair, replicas, len(instances), partitions)
            if item is not None:
                resolved.append(item)
                created[item.new_segment or ""] = 0
                self._made.add(item.new_segment or "")
        return resolved, created

    def _new_segment(
        self,
        repair: domain.Repair,
        replicas: tuple[str, ...],
        num_instances: int,
        partitions: set[int] | None,
    ) -> domain.Resolved | None:
        start, lost_from = self._start_offset(repair)
        if start is None:
            return None
        if lost_from is not None:
            repair = replace(
                repair,
                data_loss=True,
                reason=f"{repair.reason}; offsets {lost_from}..{start - 1} were already dropped "
                f"by the stream (data loss): it starts at {start}",
            )
        now = self.ctx.now_ms()
        name = str(
            LLCSegmentName.create(
                self.config.raw_table_name, repair.partition, repair.sequence, now
            )
        )
        per_instance = max_partitions_per_instance(
            max(len(partitions or ()), 1), self.config.replication, max(num_instances, 1)
        )
        updater = flush_updater(self.table, self.config.topic_name or "", self.config.stream_config)
        meta = new_in_progress(
            name,
            str(start),
            self.config.replication,
            updater.threshold_for_new_segment(per_instance, None),
            now,
        )
        if lost_from is not None:
            meta = replace(
                meta,
                custom_map={
                    pause_domain.PREVIOUS_OFFSET: str(lost_from),
                    pause_domain.START_REASON: str(pause_domain.SkipReason.DATA_LOSS),
                },
            )
        try:
            create_record(self.zk, self.paths.segment(self.table, name), meta.to_znrecord())
        except NodeExists:
            self.report.waiting.append(
                f"partition {repair.partition}: {name} exists already; the next run repairs it"
            )
            return None
        return domain.Resolved(repair, name, replicas)

    def _start_offset(self, repair: domain.Repair) -> tuple[int | None, int | None]:
        """(start offset, the offset data was lost from or None); (None, None) when unknown."""
        earliest = self.earliest(repair.partition)
        if repair.new_from is domain.OffsetFrom.EARLIEST:
            return earliest, None
        try:
            wanted = int(repair.offset or "")
        except ValueError:
            self.report.waiting.append(
                f"partition {repair.partition}: {repair.segment} has no readable "
                f"{repair.new_from} ({repair.offset!r}); not repaired"
            )
            return None, None
        if repair.kind is domain.RepairKind.COMMIT_STOPPED_AFTER_STEP1:
            return wanted, None  # Pinot checks no data loss on this path; the consumer will
        if earliest is None:
            return None, None  # the data-loss check needs the stream: the next run
        start, lost = domain.start_offset(wanted, earliest)
        return start, (wanted if lost else None)

    # --- writing ------------------------------------------------------------------------------
    def _write(
        self, resolved: list[domain.Resolved], created: dict[str, int]
    ) -> list[domain.Resolved]:
        applied: list[domain.Resolved] = []
        pending = list(resolved)
        path = self.paths.idealstate(self.table)
        for _ in range(IDEALSTATE_ATTEMPTS):
            found = read_record(self.zk, path)
            if found is None or not pending:
                break
            new, applied, dropped = apply_repairs(found.record, pending, is_partition_paused)
            for item, why in dropped:
                self.report.waiting.append(
                    f"partition {item.repair.partition}: not repaired: {why}"
                )
            if new is None:
                break
            txn = self.zk.transaction()
            for item in applied:
                name = item.new_segment or (item.repair.segment if item.repair.add_latest else None)
                if name is not None:
                    txn.check(self.paths.segment(self.table, name), created.get(name, -1))
            txn.set_data(path, codec.encode(new), version=found.version)
            results = txn.commit()
            failed = [r for r in results if isinstance(r, ZooKeeperError)]
            if not failed:
                break
            gone = self._vanished(applied, created)
            pending = [i for i in pending if not self._names(i) & gone]
            applied = []
        else:
            applied = []
        self._drop_unused(applied)
        return applied

    def _names(self, item: domain.Resolved) -> set[str]:
        names = {item.new_segment} if item.new_segment else set()
        if item.repair.add_latest and item.repair.segment:
            names.add(item.repair.segment)
        return names

    def _vanished(self, applied: list[domain.Resolved], created: dict[str, int]) -> set[str]:
        gone = set()
        for item in applied:
            for name in self._names(item):
                stat = self.zk.exists(self.paths.segment(self.table, name))
                if stat is None or stat.version != created.get(name, stat.version):
                    gone.add(name)
        return gone

    def _drop_unused(self, applied: list[domain.Resolved]) -> None:
        """Delete the metadata this run made that no applied repair uses (never someone else's)."""
        used = set().union(*(self._names(i) for i in applied)) if applied else set()
        for name in self._made - used:
            drop_unless_in_idealstate(self.ctx, self.table, name)

    def _drop_strays(self, repairs: list[domain.Repair]) -> None:
        for repair in repairs:
            if repair.kind is not domain.RepairKind.DUPLICATE_SEQUENCE:
                continue
            for name in repair.drop:
                if drop_unless_in_idealstate(self.ctx, self.table, name):
                    self.report.actions.append(
                        HealingAction(
                            str(repair.kind),
                            f"deleted {name}: {repair.reason}",
                            repair.partition,
                            name,
                        )
                    )

    def _action(self, item: domain.Resolved) -> HealingAction:
        repair = item.repair
        new = item.new_segment or (repair.segment if repair.add_latest else None)
        detail = repair.reason
        if item.new_segment:
            detail = f"{detail} ({item.new_segment} on {', '.join(item.instances)})"
        return HealingAction(
            str(repair.kind),
            detail,
            repair.partition,
            repair.segment,
            new,
            item.instances,
            repair.data_loss,
        )
