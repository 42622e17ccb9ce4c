"""The controller's side of the segment completion protocol: Pinot's SegmentCompletionManager.

Contract:
- One in-memory FSM (`tables.domain.completion`) per completing segment, in THIS process: the
  completion endpoints must be served by the one controller process that leads the table (not by a
  pool of web workers). Each FSM is used under its own lock and dropped once COMMITTED or ABORTED.
  Losing the FSMs (a controller restart) is safe: a new FSM is built from the segment's ZooKeeper
  metadata, and servers simply re-report.
- Only the table's lead controller runs FSM calls; any other answers NOT_LEADER. In a controller
  process (`run_controller`) leadership is answered from memory by its `LeadFollower` (`leads`);
  a manager made without one (an API process that is not a controller, tests) asks ZooKeeper
  per call (`leadership.lead_controller_for`). A controller that stops answers NOT_LEADER to new
  calls while `wait_idle` lets the calls in flight finish; `forget` drops the FSMs of tables whose
  lead partitions moved (a regained table starts again from its ZooKeeper metadata).
- A call missing a required parameter, or with an offset that is not an integer, answers FAILED.
- The FSM's side effects are the LLC segment manager's commit steps. Commit end resolves the
  segment file (Pinot's commitSegmentFile): a `peer://` location (the committer's upload failed:
  only servers hold the segment, `tables.server.peer`) commits with download URL "" and counts
  nothing; a blank location (empty or whitespace: no copy anywhere that the committer knows of)
  commits with download URL "" too and adds 1 to the table's durable counter
  `segmentMissingDeepStoreLink` (Pinot's meter, raw table; a `peer://` one is not blank, as in
  Pinot); an object elsewhere in the deep store is moved to the segment's final key inside the
  store (`DeepStore.move`: a rename, or a server-side copy then delete), and the download URL
  becomes `<vip>/segments/<raw>/<segment>`. The controller never downloads the segment: what
  the metadata needs comes with the request (CRC from creation.meta, docs and times from
  metadata.properties, the size from `segmentSizeBytes`). The move happens before any ZooKeeper
  write, so a DONE segment's object always exists; a crash after the move leaves the final
  object without DONE metadata, which the next commit of the segment replaces. When the move
  fails (the upload gone, or an error) but the final object's creation.meta holds this commit's
  CRC (a move whose reply was lost, a retried commit end), the move counts as done (only the
  tar's first blocks are read). Uploads of other attempts (`<segment>.tmp.*`, e.g. from a
  committer that died) are deleted then (not for `peer://` or blank locations). A DONE segment
  with download URL "" is the healer's to upload (`tables.controller.deep_store_repair`).
- Commit end's optional `streamDataLoss` ("s-e,s-e": offsets the committer's consumer found
  gone from the stream) must parse (`tables.domain.ledger.parse_offset_ranges`) and end at or
  before the call's offset, else the call answers FAILED before anything is looked up; the ranges
  go into the DONE metadata (step 1 of `LLCSegmentManager.commit_segment_metadata`, which refuses
  ranges below the segment's start offset), and a commit that succeeds with loss adds 1 to the
  table's durable counter `llcStreamDataLoss` and logs the ranges.
- segmentStoppedConsuming is logged with the server's reason (why it gave up).
- Pauseless tables (§5.7, §6.3): commit start runs `LLCSegmentManager.
  commit_segment_metadata_to_committing` (COMMITTING, next segment, IdealState) before answering
  COMMIT_CONTINUE; commit end resolves the segment file as above and runs
  `commit_segment_metadata_to_done` (COMMITTING -> DONE, refused past the completion-time guard).
  A failure of either answers FAILED and aborts the FSM.
- Only real replicas are believed (`tables.domain.completion_trust`): the endpoints call
  `authenticate` with the request's Authorization header before anything else, and every call is
  checked (live instance, replica of the segment in the IdealState, offset not past the stream's
  end) after the leader check and before any FSM is looked up or created. A refusal raises
  `CallRefused` and changes nothing, neither an FSM nor ZooKeeper.
"""

from __future__ import annotations

import logging
import tarfile
import threading
from collections.abc import Callable, Mapping
from urllib.parse import quote

from django.db import DatabaseError

from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.cluster.leadership import lead_controller_for
from tables.domain.completion import Response, SegmentCompletionFSM, Status
from tables.domain.leadership import lead_partition
from tables.domain.ledger import STREAM_DATA_LOSS_PARAM, parse_offset_ranges
from tables.domain.names import LLCSegmentName, table_name_with_type
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.models import DurableCounter
from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import CREATION_META, parse_properties, unpack_creation_meta
from tables.zk.records import VersionedRecord

from .completion_trust import CallerCheck, CallRefused
from .llc import CommittingSegment, LLCSegmentManager
from .resources import ResourceManager

__all__ = ["CallRefused", "CompletionManager", "SegmentFiles", "install", "installed"]

log = logging.getLogger(__name__)

STATE_MACHINE_ABORTS = "llcStateMachineAborts"
STREAM_DATA_LOSS = "llcStreamDataLoss"
MISSING_DEEP_STORE_LINK = "segmentMissingDeepStoreLink"
PEER_SCHEME = "peer://"
COMMIT_TIMEOUT_KEY = "realtime.segment.commit.timeoutSeconds"
#: A latest offset the caller check read this recently (in the same call) decides whether a first
#: report stands at the stream's end, without a second read.
STREAM_END_MAX_AGE_MS = 100


class SegmentFiles:
    """The two files a committer sends with commit end."""

    def __init__(self, metadata_properties: str, creation_meta: bytes) -> None:
        self.metadata = parse_properties(metadata_properties)
        self.crc, self.creation_time_ms = unpack_creation_meta(creation_meta)


class _Actions:
    """The FSM's side effects for one segment."""

    def __init__(
        self,
        manager: CompletionManager,
        table: str,
        segment: str,
        read: VersionedRecord | None = None,
    ) -> None:
        self.manager, self.table, self.segment = manager, table, segment
        self.read = read  # the metadata znode as the FSM was made from it: step 1 tries it first
        self.files: SegmentFiles | None = None
        self.row_count = -1
        self.lost_offsets: tuple[tuple[int, int], ...] = ()
        self.next_segment: str | None = None  # made by a pauseless commit start

    def _committed_segment(
        self, offset: int, location: str, metadata: Mapping[str, str]
    ) -> CommittingSegment:
        """The committer's built segment (commit end), its file resolved to a download URL."""
        if self.files is None:
            raise ValueError("commit end without metadata.properties and creation.meta")
        meta = self.files.metadata
        if not location.strip():
            _count_missing_link(self.table, self.segment)
        download_url = self.manager.commit_segment_file(
            self.table, self.segment, location, self.files.crc
        )
        return CommittingSegment(
            segment_name=self.segment,
            end_offset=offset,
            total_docs=int(meta.get("segment.total.docs", "0")),
            start_time_ms=int(meta.get("segment.start.time", "0")),
            end_time_ms=int(meta.get("segment.end.time", "0")),
            crc=self.files.crc,
            data_crc=self.files.crc,
            size_bytes=int(metadata.get("segmentSizeBytes", "-1")),
            download_url=download_url,
            row_count=self.row_count,
            lost_offsets=self.lost_offsets,
        )

    def commit_metadata(
        self, instance: str, offset: int, location: str, metadata: Mapping[str, str]
    ) -> None:
        committing = self._committed_segment(offset, location, metadata)
        self.manager.llc().commit_segment_metadata(self.table, committing, known=self.read)

    def commit_to_committing(self, instance: str, offset: int) -> None:
        self.next_segment = self.manager.llc().commit_segment_metadata_to_committing(
            self.table, self.segment, offset, self.row_count
        )

    def commit_to_done(
        self, instance: str, offset: int, location: str, metadata: Mapping[str, str]
    ) -> None:
        committing = self._committed_segment(offset, location, metadata)
        self.manager.llc().commit_segment_metadata_to_done(
            self.table, committing, self.next_segment
        )

    def stopped_consuming(self, instance: str, offset: int, reason: str | None) -> None:
        self.manager.llc().segment_stopped_consuming(self.table, self.segment, instance)

    def aborted(self) -> None:
        DurableCounter.increment(STATE_MACHINE_ABORTS, self.table.removesuffix("_REALTIME"))


def _count_missing_link(table: str, segment: str) -> None:
    """`segmentMissingDeepStoreLink` +1: a commit end with a blank location."""
    log.warning("%s: committing with no deep-store location at all", segment)
    try:
        DurableCounter.increment(MISSING_DEEP_STORE_LINK, table.removesuffix("_REALTIME"))
    except DatabaseError:
        log.exception("%s: cannot count %s", segment, MISSING_DEEP_STORE_LINK)


class CompletionManager:
    def __init__(
        self,
        ctx: Callable[[], ClusterContext],
        instance_id: str,
        vip_url: str,
        deep_store: Callable[[], DeepStore],
        caller_check: CallerCheck | None = None,
        leads: Callable[[str], bool] | None = None,
    ) -> None:
        self.ctx = ctx
        self._leads = leads
        self._in_flight = 0
        self._idle = threading.Condition()
        self.caller_check = caller_check if caller_check is not None else CallerCheck()
        self.instance_id = instance_id
        self.vip_url = vip_url.rstrip("/")
        self.deep_store = deep_store
        self._lock = threading.Lock()
        self._fsms: dict[str, tuple[threading.Lock, SegmentCompletionFSM, _Actions]] = {}
        # One lock per segment whose FSM is being created: its ZooKeeper reads run outside
        # `_lock`, so the first calls of many segments (a pause) do not queue behind each other.
        self._creating: dict[str, threading.Lock] = {}

    def llc(self) -> LLCSegmentManager:
        """The commit steps on this process's context, with the caller check's hot reads."""
        ctx = self.ctx()
        check = self.caller_check
        return LLCSegmentManager(
            ctx,
            check.hot(ctx),
            lambda table, partition: check.looks_paused(ctx, table, partition),
            lambda table: check.stream(ctx, table),
        )

    # --- the protocol's calls ----------------------------------------------------------------
    def authenticate(
        self, authorization: str | None, instance: str | None = None, segment: str | None = None
    ) -> None:
        """The cluster token of a call's `Authorization` header; raises CallRefused."""
        self.caller_check.authenticate(authorization, instance, segment)

    def segment_consumed(
        self,
        instance: str,
        segment: str,
        offset: int,
        reason: str | None,
        row_count: int = -1,
        start_commit: bool = False,
    ) -> Response:
        """`start_commit`: a pauseless winner's commit start runs in this call (the FSM's early
        commit start)."""

        def call(fsm: SegmentCompletionFSM, actions: _Actions, now: int) -> Response:
            actions.row_count = row_count if row_count > 0 else actions.row_count
            at_end = fsm.first_alone(instance) and self._at_stream_end(segment, offset)
            return fsm.segment_consumed(instance, offset, reason, now, start_commit, at_end)

        return self._run(instance, segment, offset, call)

    def _at_stream_end(self, segment: str, offset: int) -> bool:
        """Whether `offset` is the latest of the segment's partition, read from the stream now or
        by this call's caller check (at most `STREAM_END_MAX_AGE_MS` ago; the FSM's
        `first_alone`: such a first report wins at once)."""
        name = LLCSegmentName.parse(segment)
        if name is None:
            return False
        table = table_name_with_type(name.table_name, "REALTIME")
        latest = self.caller_check.latest_offset_now(
            self.ctx(), table, name.partition_group_id, max_age_ms=STREAM_END_MAX_AGE_MS
        )
        return latest is not None and offset >= latest

    def segment_commit_start(self, instance: str, segment: str, offset: int) -> Response:
        return self._run(
            instance,
            segment,
            offset,
            lambda f, a, now: f.segment_commit_start(instance, offset, now),
        )

    def segment_commit_end(
        self,
        instance: str,
        segment: str,
        offset: int,
        location: str,
        files: SegmentFiles,
        params: Mapping[str, str],
    ) -> Response:
        try:
            lost = tuple(parse_offset_ranges(params.get(STREAM_DATA_LOSS_PARAM) or ""))
            if lost and lost[-1][1] > offset:
                raise ValueError(f"lost offsets end past the end offset {offset}")
        except ValueError as exc:
            log.warning(
                "%s: commit end from %s refused: %s: %s",
                segment,
                instance,
                STREAM_DATA_LOSS_PARAM,
                exc,
            )
            return Response(Status.FAILED)

        def call(fsm: SegmentCompletionFSM, actions: _Actions, now: int) -> Response:
            actions.files = files
            actions.lost_offsets = lost
            if int(params.get("rowCount", "-1")) > 0:
                actions.row_count = int(params["rowCount"])
            return fsm.segment_commit_end(instance, offset, location, params, now)

        response = self._run(instance, segment, offset, call)
        if lost and response.status == Status.COMMIT_SUCCESS:
            self._count_data_loss(segment, instance, lost)
        return response

    @staticmethod
    def _count_data_loss(segment: str, instance: str, lost: tuple[tuple[int, int], ...]) -> None:
        """One `llcStreamDataLoss` per committed segment that declares lost offsets."""
        name = LLCSegmentName.parse(segment)
        spans = ", ".join(f"[{a}, {b})" for a, b in lost)
        log.warning(
            "%s: committed by %s without offsets %s: lost by the stream", segment, instance, spans
        )
        try:
            DurableCounter.increment(STREAM_DATA_LOSS, name.table_name if name else "")
        except DatabaseError:
            log.exception("%s: cannot count %s", segment, STREAM_DATA_LOSS)

    def segment_stopped_consuming(
        self, instance: str, segment: str, offset: int, reason: str | None
    ) -> Response:
        response = self._run(
            instance,
            segment,
            offset,
            lambda f, a, now: f.stopped_consuming(instance, offset, reason, now),
            first_is_stopped=True,
        )
        log.warning(
            "%s: %s stopped consuming at offset %d: %s (%s)",
            segment,
            instance,
            offset,
            reason or "no reason given",
            response.status,
        )
        return response

    def extend_build_time(
        self, instance: str, segment: str, offset: int, extra_time_sec: int
    ) -> Response:
        return self._run(
            instance,
            segment,
            offset,
            lambda f, a, now: f.extend_build_time(instance, offset, extra_time_sec, now),
        )

    # --- machinery ---------------------------------------------------------------------------
    def _run(
        self, instance: str, segment: str, offset: int, call, first_is_stopped: bool = False
    ) -> Response:
        name = LLCSegmentName.parse(segment)
        if name is None:
            return Response(Status.FAILED)
        table = table_name_with_type(name.table_name, "REALTIME")
        ctx = self.ctx()
        with self._idle:
            self._in_flight += 1
        try:
            if not self.leads(ctx, table):
                return Response(Status.NOT_LEADER)
            self.caller_check.check(ctx, table, name.partition_group_id, segment, instance, offset)
            try:
                lock, fsm, actions = self._fsm_for(ctx, table, segment, first_is_stopped)
            except NotFound:
                return Response(Status.FAILED)
            with lock:
                response = call(fsm, actions, ctx.now_ms())
                if fsm.is_done:
                    with self._lock:
                        self._fsms.pop(segment, None)
            return response
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def leads(self, ctx: ClusterContext, table: str) -> bool:
        if self._leads is not None:
            return self._leads(table)
        return lead_controller_for(ctx, table) == self.instance_id

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no protocol call is in flight (True) or `timeout_s` passed (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    def forget(self, partitions: frozenset[int], num_partitions: int) -> int:
        """Drop the FSMs of the tables in these lead partitions; returns how many were dropped."""
        with self._lock:
            gone = [
                segment
                for segment in self._fsms
                if (name := LLCSegmentName.parse(segment)) is not None
                and lead_partition(name.table_name, num_partitions) in partitions
            ]
            for segment in gone:
                del self._fsms[segment]
        return len(gone)

    def _fsm_for(self, ctx: ClusterContext, table: str, segment: str, first_is_stopped: bool):
        """The segment's FSM, created from its metadata on the first call (one creation per
        segment at a time; other segments' calls do not wait for it)."""
        with self._lock:
            entry = self._fsms.get(segment)
            if entry is not None:
                return entry
            creating = self._creating.setdefault(segment, threading.Lock())
        with creating:
            with self._lock:
                entry = self._fsms.get(segment)
            if entry is not None:
                return entry
            try:
                entry = self._new_fsm(ctx, table, segment, first_is_stopped)
            finally:
                with self._lock:
                    if entry is not None:
                        self._fsms[segment] = entry
                    self._creating.pop(segment, None)
            return entry

    def _new_fsm(self, ctx: ClusterContext, table: str, segment: str, first_is_stopped: bool):
        config = self.caller_check.hot(ctx).table_config(table)
        found = ResourceManager(ctx).segment_metadata_record(table, segment)
        meta = SegmentZKMetadata.from_znrecord(found.record)
        timeout_s = config.stream_config.get(COMMIT_TIMEOUT_KEY)
        actions = _Actions(self, table, segment, found)
        done = meta.status in (SegmentStatus.DONE, SegmentStatus.UPLOADED)
        fsm = SegmentCompletionFSM(
            segment,
            meta.num_replicas or config.replication,
            ctx.now_ms(),
            actions,
            pauseless=config.pauseless_enabled,
            zk_status=str(meta.status),
            zk_end_offset=int(meta.end_offset) if done and meta.end_offset else None,
            commit_timeout_ms=int(timeout_s) * 1000 if timeout_s else 120_000,
            first_message_is_stopped_consuming=first_is_stopped,
            controller_vip_url=self.vip_url,
        )
        return (threading.Lock(), fsm, actions)

    def commit_segment_file(
        self, table: str, segment: str, location: str, crc: int | None = None
    ) -> str:
        """Pinot's commitSegmentFile: the committed segment's download URL ("" for a `peer://`
        or blank location). The upload is moved inside the deep store (`DeepStore.move`), never
        downloaded; when it is gone but the final object holds the commit's `crc` (a move that
        happened although its reply was lost, or a retried commit end), the move is done."""
        if location.startswith(PEER_SCHEME) or not location.strip():
            return ""
        raw = table.removesuffix("_REALTIME")
        store = self.deep_store()
        final = store.segment_key(raw, segment)
        if location != store.uri_for(final):
            source = store.key_for_uri(location)
            if source is None:
                raise ValueError(f"segment location {location} is not in the deep store")
            self._move_upload(store, source, final, crc)
        stale = store.delete_uploads(raw, segment)
        if stale:
            log.info("%s: removed %d upload(s) of other attempts: %s", segment, len(stale), stale)
        return f"{self.vip_url}/segments/{quote(raw)}/{quote(segment)}"

    @staticmethod
    def _move_upload(store: DeepStore, source: str, final: str, crc: int | None) -> None:
        """The upload to the final key. When the move fails (no upload, or an error) the final
        object holding this commit's `crc` means the move happened (its reply lost, or a
        retried commit end); else the failure is raised (ValueError for a missing upload)."""
        try:
            store.move(source, final)
            return
        except FileNotFoundError:
            failure: Exception = ValueError(f"segment upload {source} is not in the deep store")
        except Exception as exc:
            failure = exc
        if crc is None or stored_crc(store, final) != crc:
            raise failure
        log.info("%s: %s already holds CRC %d (moved before); %s", source, final, crc, failure)


def stored_crc(store: DeepStore, key: str) -> int | None:
    """The CRC in the `creation.meta` of the segment tar at `key` (the tar's first file: only
    its first blocks are read); None when there is no such object or it is not a segment."""
    try:
        with store.open_read(key) as stream, tarfile.open(fileobj=stream, mode="r|gz") as tar:
            for member in tar:
                if member.isfile() and member.name.rsplit("/", 1)[-1] == CREATION_META:
                    handle = tar.extractfile(member)
                    return None if handle is None else unpack_creation_meta(handle.read())[0]
    except (OSError, tarfile.TarError, ValueError, EOFError):
        return None
    return None


_installed: CompletionManager | None = None


def install(manager: CompletionManager) -> None:
    """Make `manager` this process's completion manager (`run_controller` does, before serving)."""
    global _installed
    _installed = manager


def installed() -> CompletionManager | None:
    """The manager `install`ed in this process, if any."""
    return _installed
