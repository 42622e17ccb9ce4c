"""The committer's part (reference §5.8, blocking mode): build, then commit start, upload, end.

Contract, for the replica the controller answered COMMIT:
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
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tables.domain.completion_response import Response, Status
from tables.domain.ledger import STREAM_DATA_LOSS_PARAM, format_offset_ranges
from tables.domain.names import raw_table_name
from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import CREATION_META, METADATA_FILE, read_metadata_files
from tables.segments.staging import write_staging

from .consumer import SegmentConsumer
from .protocol import CompletionClient, SegmentFiles

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
    ) -> None:
        self.client = client
        self.deep_store = deep_store
        self.submit_build = submit_build
        self.work_dir = work_dir
        self.poll_s = poll_s
        self.build_failures: dict[tuple[str, int], int] = {}  # segmentBuildFailure per partition

    def __call__(self, consumer: SegmentConsumer, response: Response) -> bool:
        spec = consumer.spec
        raw = raw_table_name(spec.table)
        tag = uuid.uuid4().hex
        store = self.deep_store()
        staging_key = store.staging_key(spec.table, f"{spec.segment}.{tag}")
        upload_key = f"{raw}/{spec.segment}.tmp.{tag}"
        started = time.monotonic()
        refused = False
        try:
            self._stage(consumer, store, staging_key)
            outcome = self._build(consumer, response, staging_key, upload_key)
            if outcome is None:
                return False
            build_ms = int((time.monotonic() - started) * 1000)
            params: dict[str, int | str] = {
                "buildTimeMillis": build_ms,
                "rowCount": consumer.rows,
                "segmentSizeBytes": int(outcome.get("size_bytes", 0)),
            }
            offset = consumer.next_offset
            start = self.client.segment_commit_start(spec.table, spec.segment, offset, params)
            if start.status is not Status.COMMIT_CONTINUE:
                refused = start.status is not Status.NOT_SENT
                log.info("%s: commit start answered %s", spec.segment, start.status)
                return False
            with store.open_read(upload_key) as stream:
                files = read_metadata_files(stream)
            end = self.client.segment_commit_end(
                spec.table,
                spec.segment,
                offset,
                store.uri_for(upload_key),
                SegmentFiles(files[METADATA_FILE], files[CREATION_META]),
                commit_end_params(consumer, params),
            )
            if end.status is not Status.COMMIT_SUCCESS:
                refused = end.status is not Status.NOT_SENT
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
        except Exception:
            log.exception("%s: commit failed", spec.segment)
            refused = True
            return False
        finally:
            store.delete(staging_key)
            if refused:
                store.delete(upload_key)

    def _stage(self, consumer: SegmentConsumer, store: DeepStore, key: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="staging-", dir=self.work_dir) as tmp:
            local = Path(tmp) / "rows.parquet"
            write_staging(consumer.pairs(), local)
            store.publish(local, key)

    def _build(
        self, consumer: SegmentConsumer, response: Response, staging_key: str, upload_key: str
    ) -> dict[str, Any] | None:
        """Run the build, renewing the lease; the build's outcome, or None when given up."""
        spec = consumer.spec
        offset = consumer.next_offset
        handle = self.submit_build(
            spec.table, spec.segment, staging_key, spec.start_offset, offset, upload_key
        )
        lease_s = response.build_time_sec if response.build_time_sec > 0 else DEFAULT_LEASE_S
        lease_end = time.monotonic() + lease_s
        while not handle.ready():
            if consumer.wait(self.poll_s):
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
