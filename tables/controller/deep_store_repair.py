"""A step of a healing run: the deep-store upload repair (round 2 §B.4, §B.5), Pinot's
`uploadToDeepStoreIfMissing` and `syncCommittingSegments`.

Contract of `DeepStoreRepairer.repair(config, report)`:
1. Candidates (`tables.domain.deep_store_repairs.plan_deep_store_repairs`): the metadata of every
   segment with an ONLINE instance in the IdealState, and its ExternalView replicas that are
   ONLINE. Pauseless COMMITTING segments held ONLINE somewhere, and DONE segments whose download
   URL is "", past `max.segment.completion.time.millis` (cluster config, on the metadata znode's
   mtime) in a pauseless table; a candidate inside that guard is a `report.waiting` note.
2. For each candidate: a server picked at random among its ExternalView-ONLINE replicas with a
   known admin endpoint (`consuming.admin_urls`) is asked `POST <admin>/segments/<table>/<segment>/
   uploadCommittedSegment?uploadTimeoutMs=<upload_timeout_ms>` with the cluster token. Its answer
   must be the segment's simple fields with status DONE, a CRC and, as download URL, one of the
   segment's uploads in this deep store (`<raw>/<segment>.tmp.<uuid>`: nothing else is ever
   moved). The upload is moved to the segment's final key `<raw>/<segment>.tar.gz`, then the
   metadata is written compare-and-set on the znode version (retried on conflict, the candidate
   re-checked on the record it replaces; Pinot writes with version -1): COMMITTING adopts the
   server's simple fields (status DONE), DONE only gets the URL (and the copy's CRC when it
   differs); the download URL is `<vip>/segments/<raw>/<segment>` (`CONTROLLER_VIP_URL`), as every
   commit writes it. The replicas already hold the segment; the ones still waiting for a COMMITTING
   segment download it from that URL.
   Success: a `deepStoreUploaded` HealingAction and the durable counter
   `llcSegmentsDeepStoreUploadRetrySuccess`. Failure (no ONLINE replica with an admin endpoint, a
   refusal, an unreachable server, a malformed answer, a failed move or write): a `report.waiting`
   note, `llcSegmentsDeepStoreUploadRetryError` (both counters per raw table), and an upload the
   repair did not move is deleted; the next run tries again. A segment that stopped being a
   candidate meanwhile (repaired by someone else) is a note and counts nothing. Unlike Pinot there
   is no fallback endpoint (servers here have only this one) and each upload is waited for in the
   run.
3. `committingSegments` of `PAUSELESS_DEBUG_METADATA` (when the znode exists) drops the segments
   whose metadata is gone or completed (`stale_committing`), in one compare-and-set write: a
   `committingSegmentsSynced` HealingAction.
Without a deep store (`deep_store` None) the step is skipped with a note. A failure of one segment
never fails the step; reading the table's views can.
"""

from __future__ import annotations

import json
import logging
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from django.conf import settings
from django.db import DatabaseError

from tables.cluster.context import ClusterContext
from tables.domain import deep_store_repairs as domain
from tables.domain.idealstate import InstanceState
from tables.domain.names import LLCSegmentName
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import TableConfig
from tables.domain.znrecord import ZNRecord
from tables.models import DurableCounter
from tables.security import cluster_token
from tables.segments.deepstore import DeepStore
from tables.zk.errors import NoNode
from tables.zk.records import read_record, update_record

from .consuming import admin_urls
from .healing_report import HealingAction, HealingReport
from .llc import COMMITTING_SEGMENTS, LLCSegmentManager

__all__ = [
    "RETRY_ERROR",
    "RETRY_SUCCESS",
    "SYNCED",
    "UPLOADED",
    "DeepStoreRepairer",
]

log = logging.getLogger(__name__)

UPLOADED = "deepStoreUploaded"
SYNCED = "committingSegmentsSynced"
RETRY_SUCCESS = "llcSegmentsDeepStoreUploadRetrySuccess"
RETRY_ERROR = "llcSegmentsDeepStoreUploadRetryError"
UPLOAD_TIMEOUT_MS = 60_000
BODY_CHARS = 300


class _Failed(Exception):
    """One candidate's repair failed (the message says why)."""


def _clock_text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S UTC")


class DeepStoreRepairer:
    def __init__(
        self,
        ctx: ClusterContext,
        deep_store: Callable[[], DeepStore] | None,
        *,
        vip_url: str | None = None,
        token: Callable[[], str] = cluster_token,
        upload_timeout_ms: int = UPLOAD_TIMEOUT_MS,
        choose: Callable[[Sequence[str]], str] = random.choice,
    ) -> None:
        self.ctx, self.zk, self.paths = ctx, ctx.client, ctx.paths
        self.deep_store = deep_store
        self.vip_url = (vip_url or settings.CONTROLLER_VIP_URL).rstrip("/")
        self.token, self.choose = token, choose
        self.upload_timeout_ms = upload_timeout_ms

    def repair(self, config: TableConfig, report: HealingReport) -> None:
        """One run of the step on one table (module docstring)."""
        table = config.table_name_with_type
        if self.deep_store is None:
            report.skipped.append("missing deep-store copies are not uploaded (no deep store)")
            return
        facts, statuses = self._facts(table)
        plan = domain.plan_deep_store_repairs(
            facts,
            pauseless=config.pauseless_enabled,
            now_ms=self.ctx.now_ms(),
            max_completion_ms=LLCSegmentManager(self.ctx).max_completion_time_ms(),
        )
        for wait in plan.waits:
            report.waiting.append(
                f"{wait.reason}; a server uploads its copy after {_clock_text(wait.until_ms)} "
                "(max.segment.completion.time.millis) if still so"
            )
        store = self.deep_store() if plan.repairs else None
        for repair in plan.repairs:
            assert store is not None
            if self._repair_one(config, store, repair, report):
                statuses[repair.segment] = domain.DONE
        self._sync_committing(table, statuses, report)

    # --- candidates ---------------------------------------------------------------------------
    def _facts(self, table: str) -> tuple[list[domain.UploadFacts], dict[str, str | None]]:
        ideal = read_record(self.zk, self.paths.idealstate(table))
        external = read_record(self.zk, self.paths.externalview(table))
        ideal_map = {} if ideal is None else ideal.record.map_fields
        views = {} if external is None else external.record.map_fields
        facts: list[domain.UploadFacts] = []
        statuses: dict[str, str | None] = {}
        for segment, states in sorted(ideal_map.items()):
            if InstanceState.ONLINE not in states.values() or LLCSegmentName.parse(segment) is None:
                continue
            found = read_record(self.zk, self.paths.segment(table, segment))
            if found is None:
                continue
            meta = SegmentZKMetadata.from_znrecord(found.record)
            statuses[segment] = str(meta.status)
            online = tuple(
                sorted(i for i, s in views.get(segment, {}).items() if s == InstanceState.ONLINE)
            )
            facts.append(
                domain.UploadFacts(
                    segment, str(meta.status), meta.download_url, found.mtime_ms, online
                )
            )
        return facts, statuses

    # --- one candidate ------------------------------------------------------------------------
    def _repair_one(
        self,
        config: TableConfig,
        store: DeepStore,
        repair: domain.DeepStoreRepair,
        report: HealingReport,
    ) -> bool:
        """True when the segment was repaired (now DONE with a download URL)."""
        raw, segment = config.raw_table_name, repair.segment
        try:
            server, url = self._upload_and_write(config, store, repair, report)
        except Exception as exc:
            if not isinstance(exc, _Failed):
                log.exception("healing %s: deep-store upload of %s failed", raw, segment)
            report.waiting.append(
                f"{repair.reason}; its deep-store upload failed: {exc}; the next run tries again"
            )
            _count(RETRY_ERROR, raw)
            return False
        if server is None:
            return False
        name = LLCSegmentName.parse(segment)
        report.actions.append(
            HealingAction(
                UPLOADED,
                f"{repair.reason}: {server} uploaded its copy to the deep store; download URL "
                f"{url}",
                None if name is None else name.partition_group_id,
                segment,
                None,
                (server,),
            )
        )
        _count(RETRY_SUCCESS, raw)
        return True

    def _upload_and_write(
        self,
        config: TableConfig,
        store: DeepStore,
        repair: domain.DeepStoreRepair,
        report: HealingReport,
    ) -> tuple[str | None, str]:
        """(the server, the download URL) once written; (None, "") when the segment stopped
        being a candidate (a note). An upload not moved to the final key is deleted."""
        raw, segment = config.raw_table_name, repair.segment
        server, upload, key = self._ask(config, store, repair)
        moved = False
        try:
            path = self.paths.segment(config.table_name_with_type, segment)
            url = f"{self.vip_url}/segments/{urllib.parse.quote(raw)}/{urllib.parse.quote(segment)}"
            if not self._still_candidate(path, repair, upload, url):
                report.waiting.append(f"{segment}: repaired meanwhile; the upload is dropped")
                return None, ""
            _move(store, key, store.segment_key(raw, segment))
            moved = True
            if not self._write(path, repair, upload, url):
                report.waiting.append(f"{segment}: repaired meanwhile by someone else")
                return None, ""
            return server, url
        finally:
            if not moved:
                _quietly_delete(store, key)

    def _ask(
        self, config: TableConfig, store: DeepStore, repair: domain.DeepStoreRepair
    ) -> tuple[str, domain.ServerUpload, str]:
        """(server, its checked answer, the uploaded key); `_Failed` otherwise."""
        segment = repair.segment
        urls = {s: u for s, u in admin_urls(self.ctx, list(repair.servers)).items() if u}
        if not urls:
            raise _Failed("no server holds it ONLINE with a known admin endpoint")
        server = self.choose(sorted(urls))
        table = config.table_name_with_type
        query = urllib.parse.urlencode({"uploadTimeoutMs": self.upload_timeout_ms})
        target = (
            f"{urls[server]}/segments/{urllib.parse.quote(table, safe='')}/"
            f"{urllib.parse.quote(segment, safe='')}/uploadCommittedSegment?{query}"
        )
        request = urllib.request.Request(
            target, data=b"", method="POST", headers={"Authorization": f"Bearer {self.token()}"}
        )
        try:
            with urllib.request.urlopen(
                request, timeout=self.upload_timeout_ms / 1000 + 5
            ) as answer:
                body = answer.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as refused:
            detail = refused.read().decode("utf-8", "replace")[:BODY_CHARS]
            refused.close()
            raise _Failed(f"{server} answered HTTP {refused.code}: {detail}") from None
        except (OSError, ValueError) as exc:  # URLError, timeouts, refused connections
            raise _Failed(f"{server} ({target}) cannot be reached: {exc}") from None
        try:
            upload = domain.check_server_fields(json.loads(body), segment)
        except ValueError as exc:
            raise _Failed(f"{server}'s answer: {exc}") from None
        key = store.key_for_uri(upload.uploaded_uri)
        if key is None or not domain.is_upload_key(key, config.raw_table_name, segment):
            raise _Failed(f"{server} uploaded to {upload.uploaded_uri}, not an upload of it")
        return server, upload, key

    def _still_candidate(
        self, path: str, repair: domain.DeepStoreRepair, upload: domain.ServerUpload, url: str
    ) -> bool:
        """Check the write on the current record before moving anything (`_Failed` when the
        answer does not fit it)."""
        found = read_record(self.zk, path)
        if found is None:
            raise _Failed("its metadata is gone")
        try:
            return domain.repaired_record(found.record, repair.kind, upload, url) is not None
        except ValueError as exc:
            raise _Failed(str(exc)) from None

    def _write(
        self, path: str, repair: domain.DeepStoreRepair, upload: domain.ServerUpload, url: str
    ) -> bool:
        """The compare-and-set write; False when the segment stopped being a candidate."""
        applied: dict[str, bool] = {}

        def change(record: ZNRecord) -> ZNRecord | None:
            new = domain.repaired_record(record, repair.kind, upload, url)
            applied["value"] = new is not None
            return new

        try:
            update_record(self.zk, path, change)
        except NoNode:
            raise _Failed("its metadata was deleted") from None
        return applied.get("value", False)

    # --- committingSegments -------------------------------------------------------------------
    def _status(self, table: str, segment: str) -> str | None:
        found = read_record(self.zk, self.paths.segment(table, segment))
        return None if found is None else str(SegmentZKMetadata.from_znrecord(found.record).status)

    def _sync_committing(
        self, table: str, statuses: dict[str, str | None], report: HealingReport
    ) -> None:
        path = self.paths.pauseless_debug(table)
        found = read_record(self.zk, path)
        if found is None:
            return
        listed = list(found.record.list_fields.get(COMMITTING_SEGMENTS, []))
        known = dict(statuses)
        for segment in listed:
            if segment not in known:
                known[segment] = self._status(table, segment)
        gone = set(domain.stale_committing(listed, known))
        if not gone:
            return

        def drop(record: ZNRecord) -> ZNRecord | None:
            current = record.list_fields.get(COMMITTING_SEGMENTS, [])
            kept = [s for s in current if s not in gone]
            if kept == current:
                return None
            out = record.copy()
            out.list_fields[COMMITTING_SEGMENTS] = kept
            return out

        try:
            update_record(self.zk, path, drop)
        except NoNode:
            return
        report.actions.append(
            HealingAction(
                SYNCED,
                f"{COMMITTING_SEGMENTS} no longer lists {', '.join(sorted(gone))} "
                "(committed or deleted)",
            )
        )


def _move(store: DeepStore, source: str, final: str) -> None:
    """The upload to the segment's final key (`_Failed` when it is not there)."""
    try:
        store.move(source, final)  # inside the deep store: no download
    except FileNotFoundError:
        raise _Failed(f"the upload {source} is not in the deep store") from None


def _quietly_delete(store: DeepStore, key: str) -> None:
    try:
        store.delete(key)
    except Exception:
        log.warning("cannot delete the upload %s", key, exc_info=True)


def _count(name: str, raw: str) -> None:
    try:
        DurableCounter.increment(name, raw)
    except DatabaseError:
        log.exception("cannot count %s for %s", name, raw)
