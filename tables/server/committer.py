"""The committer's part (reference §5.8, §B.2): blocking mode builds, then sends commit start and
end; pauseless mode sends commit start first, then builds and sends commit end.

Contract, for the replica the controller answered COMMIT (blocking mode, the default):
1. The consumer's rows are written to a staging file (`tables.segments.staging`) and put in the
   deep store under `_staging/<raw>/<segment>.<uuid>.parquet`.
2. The Spark build runs as the Celery task `tables.spark_build_segment` and publishes the tar at
   `<raw>/<segment>.tmp.<uuid>` (an upload: only commit end makes it the segment). While waiting,
   the lease is renewed with `extendBuildTime` before it runs out; an answer other than PROCESSED
   means the controller gave the commit up, and so does the committer. An unanswered renewal
   (NOT_SENT: the controller unreachable) is asked again until the lease ends; then the
   controller has given the commit up, and the committer stops waiting for the build.
3. `segmentCommitStart` must answer COMMIT_CONTINUE, then `segmentCommitEndWithMetadata` sends the
   tar's `metadata.properties` and `creation.meta` with `location` = the upload's URI and must
   answer COMMIT_SUCCESS. When the consumer met offsets the stream had dropped (`lost_ranges`),
   commit end also carries `streamDataLoss` = "s-e,s-e" (`tables.domain.ledger`), which the
   controller writes into the committed segment's metadata.
Anything else is a failed commit: `commit` returns False and the consumer asks again. The staging
file is always removed; the upload is removed when the controller clearly refused it (an upload
left by a lost reply is the controller's or the healer's to clean: commit end may have moved it).

Pauseless mode (`ConsumingSegment.pauseless`, Pinot's `PauselessSegmentCommitter`):
- `segmentCommitStart` comes first, with the consumer's offset and row count, and waits up to
  `MAX_SEGMENT_COMMIT_TIME_S` (120 s) for the answer: the controller marks the segment COMMITTING,
  creates the next segment and flips the IdealState inside that call. Anything but COMMIT_CONTINUE
  is a failed commit before anything was staged or built.
- After COMMIT_CONTINUE steps 1 and 2 run (the lease counted from the COMMIT answer, renewed with
  `extendBuildTime`, which the controller accepts in COMMITTER_UPLOADING), then commit end as in 3.
  The replica going ONLINE meanwhile (the IdealState flip) does not end the wait: only a stop
  does. Meanwhile the server consumes the next segment.
- Fault injection (tests only): while the file `server.<instance_id>.commit_holds` exists
  (`faults.held`), the committer does not look at its build (in either mode; the lease is still
  renewed), so a test can hold a commit between commit start and commit end.
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
from tables.domain.completion_response import Response, Status
from tables.domain.ledger import STREAM_DATA_LOSS_PARAM, format_offset_ranges
from tables.domain.names import raw_table_name
from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import CREATION_META, METADATA_FILE, read_metadata_files
from tables.segments.staging import write_staging

from .consumer import SegmentConsumer
from .protocol import MAX_SEGMENT_COMMIT_TIME_S, CompletionClient, SegmentFiles

__all__ = ["BuildHandle", "Committer", "commit_end_params"]

log = logging.getLogger(__name__)

DEFAULT_LEASE_S = 120


class BuildHandle(Protocol):
    """What the committer needs of a submitted build (a Celery AsyncResult has all of it)."""

    def ready(self) -> bool: ...
    def successful(self) -> bool: ...
    def get(self, timeout: float | None = None, propagate: bool = True) -> Any: ...
    def revoke(self) -> None: ...


SubmitBuild = Callable[[str, str, str, int, int, str], BuildHandle]


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
        poll_s: float = 0.25,
        instance_id: str = "",
    ) -> None:
        self.client = client
        self.deep_store = deep_store
        self.submit_build = submit_build
        self.work_dir = work_dir
        self.poll_s = poll_s
        self.hold_point = f"server.{instance_id}.commit_holds" if instance_id else None
        self.build_failures: dict[tuple[str, int], int] = {}  # segmentBuildFailure per partition

    def __call__(self, consumer: SegmentConsumer, response: Response) -> bool:
        if consumer.spec.pauseless:
            return self._commit_pauseless(consumer, response)
        return self._commit_blocking(consumer, response)

    @contextmanager
    def _attempt(self, consumer: SegmentConsumer) -> Iterator[_Attempt]:
        """The deep-store keys of one commit attempt; cleaned up as the module contract says."""
        spec = consumer.spec
        tag = uuid.uuid4().hex
        store = self.deep_store()
        attempt = _Attempt(
            store,
            store.staging_key(spec.table, f"{spec.segment}.{tag}"),
            f"{raw_table_name(spec.table)}/{spec.segment}.tmp.{tag}",
        )
        try:
            yield attempt
        finally:
            store.delete(attempt.staging_key)
            if attempt.refused:
                store.delete(attempt.upload_key)

    def _commit_blocking(self, consumer: SegmentConsumer, response: Response) -> bool:
        spec = consumer.spec
        started = time.monotonic()
        with self._attempt(consumer) as attempt:
            try:
                self._stage(consumer, attempt.store, attempt.staging_key)
                outcome = self._build(consumer, response, attempt.staging_key, attempt.upload_key)
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

    def _commit_pauseless(self, consumer: SegmentConsumer, response: Response) -> bool:
        spec = consumer.spec
        started = time.monotonic()
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
        with self._attempt(consumer) as attempt:
            try:
                self._stage(consumer, attempt.store, attempt.staging_key)
                outcome = self._build(
                    consumer,
                    response,
                    attempt.staging_key,
                    attempt.upload_key,
                    lease_from=started,
                    online_ends=False,
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
        """segmentCommitEndWithMetadata with the built tar's metadata; True on COMMIT_SUCCESS."""
        spec, offset, store = consumer.spec, consumer.next_offset, attempt.store
        with store.open_read(attempt.upload_key) as stream:
            files = read_metadata_files(stream)
        end = self.client.segment_commit_end(
            spec.table,
            spec.segment,
            offset,
            store.uri_for(attempt.upload_key),
            SegmentFiles(files[METADATA_FILE], files[CREATION_META]),
            commit_end_params(consumer, params),
        )
        if end.status is not Status.COMMIT_SUCCESS:
            attempt.refused = end.status is not Status.NOT_SENT
            log.warning("%s: commit end answered %s", spec.segment, end.status)
            return False
        log.info(
            "%s: committed %d rows [%d, %d) in %.1f s",
            spec.segment,
            consumer.rows,
            spec.start_offset,
            offset,
            time.monotonic() - started,
        )
        return True

    def _stage(self, consumer: SegmentConsumer, store: DeepStore, key: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="staging-", dir=self.work_dir) as tmp:
            local = Path(tmp) / "rows.parquet"
            write_staging(consumer.pairs(), local)
            store.publish(local, key)

    def _held(self) -> bool:
        return self.hold_point is not None and faults.held(self.hold_point)

    def _build(
        self,
        consumer: SegmentConsumer,
        response: Response,
        staging_key: str,
        upload_key: str,
        lease_from: float | None = None,
        online_ends: bool = True,
    ) -> dict[str, Any] | None:
        """Run the build, renewing the lease (counted from the `time.monotonic()` `lease_from`,
        default now); the build's outcome, or None when given up. `online_ends`: the replica
        going ONLINE ends the wait (blocking mode: somebody else committed)."""
        spec = consumer.spec
        offset = consumer.next_offset
        handle = self.submit_build(
            spec.table, spec.segment, staging_key, spec.start_offset, offset, upload_key
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
            log.error("%s: build failed: %s", spec.segment, handle.get(propagate=False))
            return None
        return dict(handle.get(timeout=10))


@dataclass
class _Attempt:
    store: DeepStore
    staging_key: str
    upload_key: str
    refused: bool = False  # the controller refused the upload: delete it


def _build_params(
    consumer: SegmentConsumer, outcome: dict[str, Any], started: float
) -> dict[str, int | str]:
    return {
        "buildTimeMillis": int((time.monotonic() - started) * 1000),
        "rowCount": consumer.rows,
        "segmentSizeBytes": int(outcome.get("size_bytes", 0)),
    }
