"""Two steps of a healing run: ERROR replica resets and orphan upload cleanup (round 2 §A.6-§A.8).

`ErrorRepairer.repair` is Pinot's `repairSegmentsInErrorState` (the decision is
`tables.domain.healing.plan_error_repairs`, gated by the table's disaster-recovery mode,
`doctor_facts.committing_repair_allowed`): a COMMITTING segment with every replica in ERROR is
re-ingested (`tables.controller.reingest_trigger`, §C.1) or, for a partial-upsert or dedup table
in DEFAULT mode, left untouched with a `report.waiting` note; the others are reset.
`reset` is Pinot's `resetPartitionAllState`: for every instance the IdealState gives the segment
to whose ExternalView state is not OFFLINE, a Helix STATE_TRANSITION message (current state ->
OFFLINE) is written to `INSTANCES/<id>/MESSAGES/`, addressed to the instance's live session; the
server drops the replica to OFFLINE and then follows the IdealState back (downloads the committed
copy, or consumes again). Beyond Pinot, an instance that is not live, or already has a reset of
that replica pending, is skipped with a note instead of failing the whole reset.

`UploadSweeper.sweep` deletes committer uploads `<raw>/<segment>.tmp.<uuid>` last modified more
than `retention_s` ago that are not the download URL of a DONE segment (Pinot's async
`deleteTmpSegments`); the commit path already removes the losers' uploads of each commit, so these
are what crashed commits left.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid

from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.domain import healing as domain
from tables.domain.doctor_facts import committing_repair_allowed
from tables.domain.idealstate import InstanceState
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.domain.table_config import TableConfig
from tables.segments.deepstore import DeepStore
from tables.zk import messages
from tables.zk.records import read_record

from .healing_report import HealingAction, HealingReport
from .reingest_trigger import ReingestTrigger

__all__ = ["ErrorRepairer", "UploadSweeper"]

log = logging.getLogger(__name__)

RESET = "errorReset"
TMP_DELETED = "orphanUploadDeleted"


class ErrorRepairer:
    def __init__(
        self, ctx: ClusterContext, source: str, *, reingest: ReingestTrigger | None = None
    ) -> None:
        self.ctx, self.zk, self.paths = ctx, ctx.client, ctx.paths
        self.source = f"{socket.gethostname()}-ADMIN" if not source else f"{source}-ADMIN"
        self.reingest = reingest

    def _views(self, table: str) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        ideal = read_record(self.zk, self.paths.idealstate(table))
        external = read_record(self.zk, self.paths.externalview(table))
        return (
            {} if ideal is None else ideal.record.map_fields,
            {} if external is None else external.record.map_fields,
        )

    def repair(self, config: TableConfig, report: HealingReport) -> None:
        table = config.table_name_with_type
        ideal, external = self._views(table)
        candidates = [
            s
            for s, replicas in external.items()
            if InstanceState.ERROR in replicas.values() and s in ideal
        ]
        statuses = self._statuses(table, candidates)
        repairs, _ = domain.plan_error_repairs(
            ideal,
            external,
            statuses,
            repair_committing=committing_repair_allowed(config.rest),
            pauseless=config.pauseless_enabled,
        )
        for repair in repairs:
            if repair.kind is domain.ErrorRepairKind.UNRECOVERABLE:
                report.waiting.append(repair.reason)
                continue
            if repair.kind is domain.ErrorRepairKind.REINGEST:
                trigger = self.reingest or ReingestTrigger(self.ctx)
                trigger.trigger(table, repair, ideal.get(repair.segment, {}), report)
                continue
            sent, notes = self._reset(table, repair.segment, ideal, external)
            report.waiting.extend(notes)
            if sent:
                report.actions.append(
                    HealingAction(RESET, repair.reason, None, repair.segment, None, tuple(sent))
                )

    def _statuses(self, table: str, segments: list[str]) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        for segment in segments:
            record = read_record(self.zk, self.paths.segment(table, segment))
            if record is not None:
                found[segment] = str(SegmentZKMetadata.from_znrecord(record.record).status)
        return found

    def reset(self, table: str, segment: str) -> list[str]:
        """Reset every replica of `segment` that is not OFFLINE; NotFound for a segment that is
        in neither the IdealState nor ZooKeeper."""
        ideal, external = self._views(table)
        if segment not in ideal:
            raise NotFound(f"Segment {segment} of table {table} is not in the IdealState")
        sent, notes = self._reset(table, segment, ideal, external)
        for note in notes:
            log.warning("reset %s: %s", segment, note)
        return sent

    def reset_instance(self, table: str, segment: str, instance: str) -> bool:
        """Reset one replica whatever its state (after segmentStoppedConsuming); False when the
        instance is not live or a reset is already pending."""
        session = self._session(instance)
        if session is None or messages.pending_state_transition(
            self.zk, self.paths, instance, session, table, segment
        ):
            return False
        self._send(table, segment, instance, session, InstanceState.ERROR)
        return True

    def _send(self, table: str, segment: str, instance: str, session: str, state: str) -> None:
        record = messages.state_transition_message(
            table,
            segment,
            target=instance,
            target_session=session,
            from_state=state,
            source=self.source,
            cluster=self.paths.cluster,
            now_ms=self.ctx.now_ms(),
            msg_id=str(uuid.uuid4()),
        )
        messages.send_message(self.zk, self.paths, record)

    def _reset(
        self,
        table: str,
        segment: str,
        ideal: dict[str, dict[str, str]],
        external: dict[str, dict[str, str]],
    ) -> tuple[list[str], list[str]]:
        sent: list[str] = []
        notes: list[str] = []
        replicas = external.get(segment, {})
        for instance in sorted(ideal.get(segment, {})):
            state = replicas.get(instance)
            if state in (None, InstanceState.OFFLINE):
                continue
            session = self._session(instance)
            if session is None:
                notes.append(f"{segment} on {instance}: not reset, the instance is not live")
                continue
            if messages.pending_state_transition(
                self.zk, self.paths, instance, session, table, segment
            ):
                notes.append(f"{segment} on {instance}: a reset is already pending")
                continue
            self._send(table, segment, instance, session, state)
            sent.append(instance)
        return sent, notes

    def _session(self, instance: str) -> str | None:
        found = read_record(self.zk, self.paths.liveinstance(instance))
        if found is None:
            return None
        return found.record.simple_fields.get("SESSION_ID") or None


class UploadSweeper:
    def __init__(self, ctx: ClusterContext, store: DeepStore, retention_s: float) -> None:
        self.ctx, self.zk, self.paths = ctx, ctx.client, ctx.paths
        self.store = store
        self.retention_s = retention_s

    def sweep(self, config: TableConfig, report: HealingReport) -> None:
        store = self.store
        uploads = store.uploads(config.raw_table_name)
        if not uploads:
            return
        now = time.time()
        old = [(key, seg) for key, seg, modified in uploads if now - modified > self.retention_s]
        if not old:
            return
        keep = self._download_keys(config, store, {seg for _, seg in old})
        for key, segment in old:
            if key in keep:
                continue
            if store.delete(key):
                report.actions.append(
                    HealingAction(
                        TMP_DELETED,
                        f"deleted orphan upload {key} (older than {int(self.retention_s)} s, "
                        "not a committed segment's copy)",
                        None,
                        segment,
                    )
                )

    def _download_keys(self, config: TableConfig, store: DeepStore, segments: set[str]) -> set[str]:
        """Deep-store keys that DONE segments among `segments` name as their download URL."""
        keep = set()
        table = config.table_name_with_type
        for segment in segments:
            found = read_record(self.zk, self.paths.segment(table, segment))
            if found is None:
                continue
            meta = SegmentZKMetadata.from_znrecord(found.record)
            if meta.status == SegmentStatus.DONE and meta.download_url:
                key = store.key_for_uri(meta.download_url)
                if key is not None:
                    keep.add(key)
        return keep
