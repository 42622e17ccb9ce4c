"""The committer's part (reference §5.8, §B.2): blocking mode builds, then sends commit start and
end; pauseless mode sends commit start first, then builds and sends commit end.

Contract, for the replica the controller answered COMMIT (blocking mode, the default):
1. The consumer's rows are written to a staging file (`tables.segments.staging`) and put in the
   deep store under `_staging/<raw>/<segment>.<uuid>.parquet`.
2. The Spark build runs as the Celery task `tables.spark_build_segment` and hands the built tar
   over at `_staging/<raw>/<segment>.<uuid>.tar.gz` (the build's output, not yet an upload).
   While waiting, the lease is renewed with `extendBuildTime` before it runs out; an answer other
   than PROCESSED means the controller gave the commit up, and so does the committer. An
   unanswered renewal (NOT_SENT: the controller unreachable) is asked again until the lease ends;
   then the controller has given the commit up, and the committer stops waiting for the build.
3. `segmentCommitStart` must answer COMMIT_CONTINUE.
4. The committer keeps its own copy: the built tar goes into its local segment store
   (`LocalSegments.path`, where the replica's ONLINE transition then finds it), so it can serve
   the segment to peers (`tables.server.peer`).
5. The upload (Pinot's `PinotFSSegmentUploader`): the committer moves the build's hand-over to
   its upload key `<raw>/<segment>.tmp.<uuid>` inside the deep store (`DeepStore.move`: a rename,
   or a server-side copy then delete; atomic at the destination as a publish is), so the bytes
   the store already has are not sent again: they are the very bytes of the local copy (step 4
   read them from the hand-over, whose key no other attempt uses). "The upload failed" means
   exactly that this move raised (the deep store unreachable, full, refusing the write, ...) or
   the fault point below tripped; the build's hand-over having worked does not make the upload
   safe, as Pinot's local build does not make its upload safe. A failed build is a build
   failure, not an upload failure: there is no copy, and the commit fails.
   - upload done: `location` = the upload's URI;
   - upload failed and the table has `segmentsConfig.peerSegmentDownloadScheme`: `location` =
     `peer:///<segment>` (Pinot's rule): the controller commits with download URL "" and the
     replicas fetch the committer's copy from its admin port; the healer later uploads a copy
     (`uploadCommittedSegment`) and fills the URL;
   - upload failed without a peer scheme: a failed commit, as before.
6. `segmentCommitEndWithMetadata` sends the tar's `metadata.properties` and `creation.meta` (read
   from the local copy) with that `location` and must answer COMMIT_SUCCESS. When the consumer
   met offsets the stream had dropped (`lost_ranges`), commit end also carries `streamDataLoss` =
   "s-e,s-e" (`tables.domain.ledger`), which the controller writes into the committed segment's
   metadata.
Anything else is a failed commit: `commit` returns False and the consumer asks again. The staging
file and the hand-over (unless moved to the upload) are always removed; the upload is removed
when the controller clearly refused it (an upload left by a lost reply is the controller's or
the healer's to clean: commit end may have moved it), and so is the local copy in blocking mode
(another replica may commit other rows under that name).

Pauseless mode (`ConsumingSegment.pauseless`, Pinot's `PauselessSegmentCommitter`):
- `segmentCommitStart` comes first, with the consumer's offset and row count, and waits up to
  `MAX_SEGMENT_COMMIT_TIME_S` (120 s) for the answer: the controller marks the segment COMMITTING,
  creates the next segment and flips the IdealState inside that call. Anything but COMMIT_CONTINUE
  is a failed commit before anything was staged or built. A COMMIT that says `commit_started`
  (the early commit start ran in the consumer's segmentConsumed) needs no such call: it is not
  sent, and nothing competes with the next segment's start for this process and the
  controller.
- After commit start the committer first lets this server start consuming the next segment and
  return that consumer's first fetch (`wait_next`, bounded: `tables.server.handoff`): staging and
  the build would otherwise compete with that start for this process, lengthening the
  partition's freshness gap.
- Then steps 1, 2 and 4 to 6 run (the lease counted from the COMMIT answer,
  renewed with `extendBuildTime`, which the controller accepts in COMMITTER_UPLOADING). The
  replica going ONLINE meanwhile (the IdealState flip) does not end the wait: only a stop does.
  Meanwhile the server consumes the next segment.
- The local copy is kept even when commit end fails, and recorded as this server's own build
  (`LocalSegments.mark_built`): it holds exactly `[startOffset, endOffset)` of the COMMITTING
  segment, so the replica goes ONLINE with it and the healer can have it uploaded.
- Fault injection (tests only): while the file `server.<instance_id>.commit_holds` exists
  (`faults.held`), the committer does not look at its build (in either mode; the lease is still
  renewed), so a test can hold a commit between commit start and commit end. The one-shot points
  `server.<instance_id>.upload_fails` and `server.any.upload_fails` (`faults.trip`) fail the
  upload of step 5.

Build back-off (issue 23, `holds`: `tables.server.build_holds.BuildHolds`; None: off): before
anything else (staging, commit start) the committer asks whether the segment's build is held
(`tables.build_backoffs`: it failed deterministically under the same table config and schema, and
its back-off is not over); a held build is a failed commit without a build, so neither
`segmentBuildFailure` counter moves. A failed build is classified and a deterministic one recorded
under the config fingerprint (read before the build when a record already existed, else just
after the failure); a successful build clears the record, in the background.
`build_hold(spec)` is what the consumer asks after a failed commit: the hold to wait for, or None.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tables import faults
from tables.domain.build_backoff import Hold, classify
from tables.domain.completion_response import Response, Status
from tables.domain.ledger import STREAM_DATA_LOSS_PARAM, format_offset_ranges
from tables.domain.names import raw_table_name
from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import CREATION_META, METADATA_FILE, read_metadata_files
from tables.segments.staging import write_staging

from .build_holds import BuildHolds
from .consumer import ConsumingSegment, SegmentConsumer
from .local_segments import LocalSegments
from .protocol import MAX_SEGMENT_COMMIT_TIME_S, CompletionClient, SegmentFiles

__all__ = ["PEER_LOCATION", "BuildHandle", "Committer", "commit_end_params"]

log = logging.getLogger(__name__)

DEFAULT_LEASE_S = 120
# How often a committer asks whether its build is done (one Redis GET): the commit goes on at most
# this long after the spark worker stored the result.
BUILD_POLL_S = 0.05
PEER_LOCATION = "peer:///"  # + segment name: Pinot's location for a segment only peers hold


class BuildHandle(Protocol):
    """What the committer needs of a submitted build (a Celery AsyncResult has all of it)."""

    def ready(self) -> bool: ...
    def successful(self) -> bool: ...
    def get(self, timeout: float | None = None, propagate: bool = True) -> Any: ...
    def revoke(self) -> None: ...


SubmitBuild = Callable[[str, str, str, int, int, str], BuildHandle]


def _no_peer_scheme(table: str) -> str | None:
    return None


def _no_wait(table: str, segment: str) -> bool:
    return False


def commit_end_params(
    consumer: SegmentConsumer, params: dict[str, int | str]
) -> dict[str, int | str]:
    """segmentCommitEnd's optional parameters: `params` plus the consumer's lost offsets."""
    if not consumer.lost_ranges:
        return dict(params)
    return {**params, STREAM_DATA_LOSS_PARAM: format_offset_ranges(consumer.lost_ranges)}


class Committer:
    def __init__(
        self,
        client: CompletionClient,
        deep_store: Callable[[], DeepStore],
        submit_build: SubmitBuild,
        work_dir: Path,
        poll_s: float = BUILD_POLL_S,
        instance_id: str = "",
        local: LocalSegments | None = None,
        peer_scheme: Callable[[str], str | None] = _no_peer_scheme,
        wait_next: Callable[[str, str], bool] = _no_wait,
        holds: BuildHolds | None = None,
    ) -> None:
        """`local`: where the committer keeps its copies (default: `<work_dir>/segments`);
        `peer_scheme`: the table's `peerSegmentDownloadScheme` (None: none), asked only when an
        upload failed; `wait_next(table, segment)`: waits (bounded) until this server consumes
        the partition's next segment (`tables.server.handoff`), before a pauseless build."""
        self.client = client
        self.deep_store = deep_store
        self.submit_build = submit_build
        self.work_dir = work_dir
        self.poll_s = poll_s
        self.local = local if local is not None else LocalSegments(work_dir / "segments")
        self.peer_scheme = peer_scheme
        self.wait_next = wait_next
        self.hold_point = f"server.{instance_id}.commit_holds" if instance_id else None
        self.upload_points = tuple(
            f"server.{who}.upload_fails"
            for who in ((instance_id, "any") if instance_id else ("any",))
        )
        self.build_failures: dict[tuple[str, int], int] = {}  # segmentBuildFailure per partition
        self.holds = holds

    def __call__(self, consumer: SegmentConsumer, response: Response) -> bool:
        spec = consumer.spec
        current = None
        # A COMMIT answering an early-start ask means the commit has started: build (the hold
        # was checked just before asking).
        if self.holds is not None and not consumer.early_start:
            held, current = self.holds.check(spec.table, spec.segment)
            if held is not None:
                log.warning("%s: not building: %s", spec.segment, held.reason)
                return False
        if spec.pauseless:
            return self._commit_pauseless(consumer, response, current)
        return self._commit_blocking(consumer, response, current)

    def build_hold(self, spec: ConsumingSegment) -> Hold | None:
        """The hold on `spec`'s build now (module docstring), or None."""
        return None if self.holds is None else self.holds.hold_of(spec.table, spec.segment)

    def build_hold_soon(self, spec: ConsumingSegment) -> Callable[[], Hold | None]:
        """`build_hold`, asked now and answered when the callable is called."""
        if self.holds is None:
            return lambda: None
        return self.holds.hold_soon(spec.table, spec.segment)

    @contextmanager
    def _attempt(self, consumer: SegmentConsumer) -> Iterator[_Attempt]:
        """The deep-store keys of one commit attempt; cleaned up as the module contract says."""
        spec = consumer.spec
        tag = uuid.uuid4().hex
        store = self.deep_store()
        raw = raw_table_name(spec.table)
        attempt = _Attempt(
            store,
            store.staging_key(spec.table, f"{spec.segment}.{tag}"),
            f"{raw}/{spec.segment}.tmp.{tag}",
            f"_staging/{raw}/{spec.segment}.{tag}.tar.gz",
        )
        try:
            yield attempt
        finally:
            store.delete(attempt.staging_key)
            store.delete(attempt.handover_key)
            if attempt.refused:
                store.delete(attempt.upload_key)
                if attempt.kept and not spec.pauseless:
                    self.local.remove(spec.table, spec.segment)

    def _commit_blocking(
        self, consumer: SegmentConsumer, response: Response, current: str | None = None
    ) -> bool:
        spec = consumer.spec
        started = time.monotonic()
        with self._attempt(consumer) as attempt:
            try:
                self._stage(consumer, attempt.store, attempt.staging_key)
                outcome = self._build(
                    consumer, response, attempt.staging_key, attempt.handover_key, current=current
                )
                if outcome is None:
                    return False
                params = _build_params(consumer, outcome, started)
                offset = consumer.next_offset
                start = self.client.segment_commit_start(spec.table, spec.segment, offset, params)
                if start.status is not Status.COMMIT_CONTINUE:
                    attempt.refused = start.status is not Status.NOT_SENT
                    log.info("%s: commit start answered %s", spec.segment, start.status)
                    return False
                return self._commit_end(consumer, attempt, params, started)
            except Exception:
                log.exception("%s: commit failed", spec.segment)
                attempt.refused = True
                return False

    def _commit_pauseless(
        self, consumer: SegmentConsumer, response: Response, current: str | None = None
    ) -> bool:
        spec = consumer.spec
        started = time.monotonic()
        if not response.commit_started:  # else the COMMIT's own call ran commit start
            start = self.client.segment_commit_start(
                spec.table,
                spec.segment,
                consumer.next_offset,
                {"rowCount": consumer.rows},
                timeout=MAX_SEGMENT_COMMIT_TIME_S,
            )
            if start.status is not Status.COMMIT_CONTINUE:
                log.info("%s: pauseless commit start answered %s", spec.segment, start.status)
                return False
        log.info(
            "%s: COMMITTING at offset %d; building while the next segment consumes",
            spec.segment,
            consumer.next_offset,
        )
        self.wait_next(spec.table, spec.segment)  # the next segment's consumer starts first
        with self._attempt(consumer) as attempt:
            try:
                self._stage(consumer, attempt.store, attempt.staging_key)
                outcome = self._build(
                    consumer,
                    response,
                    attempt.staging_key,
                    attempt.handover_key,
                    lease_from=started,
                    online_ends=False,
                    current=current,
                )
                if outcome is None:
                    return False
                params = _build_params(consumer, outcome, started)
                return self._commit_end(consumer, attempt, params, started)
            except Exception:
                log.exception("%s: pauseless commit failed", spec.segment)
                attempt.refused = True
                return False

    def _commit_end(
        self,
        consumer: SegmentConsumer,
        attempt: _Attempt,
        params: dict[str, int | str],
        started: float,
    ) -> bool:
        """Steps 4 to 6: keep the copy, upload it, segmentCommitEndWithMetadata; True on
        COMMIT_SUCCESS."""
        spec, offset = consumer.spec, consumer.next_offset
        local = self._keep_copy(consumer, attempt)
        with local.open("rb") as stream:
            files = read_metadata_files(stream)
        location = self._upload(consumer, attempt)
        if location is None:
            attempt.refused = True
            return False
        end = self.client.segment_commit_end(
            spec.table,
            spec.segment,
            offset,
            location,
            SegmentFiles(files[METADATA_FILE], files[CREATION_META]),
            commit_end_params(consumer, params),
        )
        if end.status is not Status.COMMIT_SUCCESS:
            attempt.refused = end.status is not Status.NOT_SENT
            log.warning("%s: commit end answered %s", spec.segment, end.status)
            return False
        log.info(
            "%s: committed %d rows [%d, %d) in %.1f s%s",
            spec.segment,
            consumer.rows,
            spec.start_offset,
            offset,
            time.monotonic() - started,
            " (peers only: no deep-store copy)" if location.startswith(PEER_LOCATION) else "",
        )
        return True

    def _keep_copy(self, consumer: SegmentConsumer, attempt: _Attempt) -> Path:
        """Step 4: the built tar into the local segment store; its path."""
        spec = consumer.spec
        path = attempt.store.download(
            attempt.handover_key, self.local.path(spec.table, spec.segment)
        )
        attempt.kept = True
        if spec.pauseless:
            self.local.mark_built(spec.table, spec.segment)
        return path

    def _upload(self, consumer: SegmentConsumer, attempt: _Attempt) -> str | None:
        """Step 5: the location for commit end (module docstring); None: the commit fails."""
        spec = consumer.spec
        try:
            for point in self.upload_points:
                if faults.trip(point):
                    raise OSError(f"fault injection: {point}")
            return attempt.store.move(attempt.handover_key, attempt.upload_key)
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
        scheme = self._peer_scheme_of(spec.table)
        if scheme:
            log.warning(
                "%s: the deep-store upload failed (%s); committing with %s%s: peers (%s) serve it",
                spec.segment,
                failure,
                PEER_LOCATION,
                spec.segment,
                scheme,
            )
            return f"{PEER_LOCATION}{spec.segment}"
        log.error(
            "%s: the deep-store upload failed (%s) and the table has no peer download scheme",
            spec.segment,
            failure,
        )
        return None

    def _peer_scheme_of(self, table: str) -> str | None:
        try:
            return self.peer_scheme(table)
        except Exception:
            log.exception("%s: cannot read the peer download scheme", table)
            return None

    def _stage(self, consumer: SegmentConsumer, store: DeepStore, key: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="staging-", dir=self.work_dir) as tmp:
            local = Path(tmp) / "rows.parquet"
            write_staging(consumer.pairs(), local)
            store.publish(local, key, durable=False)  # made again if lost: the commit fails

    def _held(self) -> bool:
        return self.hold_point is not None and faults.held(self.hold_point)

    def _build(
        self,
        consumer: SegmentConsumer,
        response: Response,
        staging_key: str,
        output_key: str,
        lease_from: float | None = None,
        online_ends: bool = True,
        current: str | None = None,
    ) -> dict[str, Any] | None:
        """Run the build (its tar published at `output_key`), renewing the lease (counted from
        the `time.monotonic()` `lease_from`, default now); the build's outcome, or None when given
        up. `online_ends`: the replica going ONLINE ends the wait (blocking mode: somebody else
        committed). `current`: the fingerprint a deterministic failure is recorded under."""
        spec = consumer.spec
        offset = consumer.next_offset
        handle = self.submit_build(
            spec.table, spec.segment, staging_key, spec.start_offset, offset, output_key
        )
        lease_s = response.build_time_sec if response.build_time_sec > 0 else DEFAULT_LEASE_S
        lease_end = (time.monotonic() if lease_from is None else lease_from) + lease_s
        while self._held() or not handle.ready():
            stopped = (
                consumer.wait(self.poll_s)
                if online_ends
                else consumer.wait(self.poll_s, online_ends=False)
            )
            if stopped:
                handle.revoke()
                return None
            if time.monotonic() > lease_end - min(30.0, lease_s / 2):
                extended = self.client.extend_build_time(spec.table, spec.segment, offset, lease_s)
                if extended.status is Status.PROCESSED:
                    lease_end = time.monotonic() + lease_s
                elif extended.status is Status.NOT_SENT and time.monotonic() < lease_end:
                    pass  # the controller is unreachable for now: ask again at the next poll
                elif extended.status is Status.NOT_SENT:
                    # The lease ran out without the controller hearing from us: it has aborted
                    # this commit (another replica may be committing). Stop waiting.
                    log.warning("%s: build lease ran out unrenewed; giving up", spec.segment)
                    handle.revoke()
                    return None
                else:
                    log.warning("%s: extendBuildTime answered %s", spec.segment, extended.status)
                    handle.revoke()
                    return None
        if not handle.successful():
            key = (spec.table, spec.partition)
            self.build_failures[key] = self.build_failures.get(key, 0) + 1
            error = handle.get(propagate=False)
            kind = (
                classify(type(error).__name__, str(error))
                if self.holds is None
                else self.holds.failed(spec.table, spec.segment, current, error)
            )
            log.error("%s: build failed: %s [%s]", spec.segment, error, kind)
            return None
        if self.holds is not None:
            self.holds.succeeded(spec.table, spec.segment)
        return dict(handle.get(timeout=10))


@dataclass
class _Attempt:
    store: DeepStore
    staging_key: str
    upload_key: str
    handover_key: str  # where the build hands the tar over
    refused: bool = False  # the controller refused the upload: delete it
    kept: bool = False  # the local copy was written


def _build_params(
    consumer: SegmentConsumer, outcome: dict[str, Any], started: float
) -> dict[str, int | str]:
    return {
        "buildTimeMillis": int((time.monotonic() - started) * 1000),
        "rowCount": consumer.rows,
        "segmentSizeBytes": int(outcome.get("size_bytes", 0)),
    }
