"""Re-ingestion on a server (round 2 §C.2): Pinot's ReingestionResource behind the admin port.

Contract:
- `start(segment)` checks, in Pinot's order, and raises `ReingestionRefused` with Pinot's
  status and message: 400 "Segment name is not in LLC format: …"; 404 "Table data manager not
  found for table: …" (this server serves nothing of the table); 404 "Segment ZK metadata not
  found for segment: …"; 400 "Download URL is already present for segment: …. No need to
  re-ingest." when `segment.download.url` is present in the metadata, even as "" (a peer-download
  commit): only an absent key reads as None (`SegmentZKMetadata.download_url`); 500 "Null
  start/end offset for segment: …" when either offset is missing (or not an offset); 409
  "Re-ingestion for segment: … is already in progress." while a job for it runs. Otherwise the
  job is registered and runs in the background; `start` returns `{"jobId", "segmentName",
  "startTimeMs"}` at once, and `jobs()` lists the running ones in that shape.
- A job (on a pool of max(nCPU/2, 1) threads, `reingestion-worker-*`): submits the Spark task
  `tables.spark_reingest_segment` for `[startOffset, endOffset)` (by name, on the spark queue),
  waits for it (at most `timeout_s`, Pinot's 30 min), reads the rebuilt tar's
  `metadata.properties` and `creation.meta` from the deep store and posts them (multipart, as
  commit end does) to `POST <lead controller>/segments/reingested?tableName=<raw>` with the
  cluster token and Pinot's custom headers UPLOAD_TYPE=METADATA, DOWNLOAD_URI=<the tar's URI>,
  COPY_SEGMENT_TO_DEEP_STORE=true. They are sent spelled with dashes (`UPLOAD-TYPE`, …): Django's
  HTTP server drops header names containing "_" (WSGI cannot tell them from dashes), and both
  spellings reach the controller's view as the same WSGI key.
- Any failure logs an ERROR and counts `segmentReingestionFailure` for the raw table (durable
  counter, `tables.builds.REINGEST_FAILURES`), except a failure of the Spark task itself, which
  the worker has counted already (`tables.builds`): it is only logged. The job leaves the running
  list in every case.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tables.domain.ledger import parse_offset
from tables.domain.names import LLCSegmentName, raw_table_name, table_name_with_type
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.segments.segment_format import CREATION_META, METADATA_FILE, read_metadata_files
from tables.zk.records import read_record

from .committer import BuildHandle
from .protocol import _multipart

if TYPE_CHECKING:
    from .instance import ServerInstance

__all__ = [
    "REINGEST_TASK",
    "UPLOAD_HEADERS",
    "ReingestionJob",
    "ReingestionRefused",
    "SegmentReingestion",
    "submit_reingestion",
]

log = logging.getLogger(__name__)

REINGEST_TASK = "tables.spark_reingest_segment"
REINGESTED_PATH = "/segments/reingested"
# FileUploadDownloadClient.CustomHeaders, spelled as they survive a WSGI server (module docstring)
UPLOAD_HEADERS = ("UPLOAD-TYPE", "DOWNLOAD-URI", "COPY-SEGMENT-TO-DEEP-STORE")
CONSUMPTION_END_TIMEOUT_S = 30 * 60.0  # Pinot's StatelessRealtimeSegmentWriter limit
UPLOAD_TIMEOUT_S = 60.0
LEADER_WAIT_S = 30.0

Submit = Callable[[str, str, int, int], BuildHandle]


class ReingestionRefused(Exception):
    """A refused `POST /reingestSegment/{segment}`: Pinot's HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _TaskFailed(Exception):
    """The Spark task failed (the worker counted it)."""


@dataclass(frozen=True)
class ReingestionJob:
    job_id: str
    segment_name: str
    start_time_ms: int

    def as_json(self) -> dict[str, Any]:
        return {
            "jobId": self.job_id,
            "segmentName": self.segment_name,
            "startTimeMs": self.start_time_ms,
        }


def submit_reingestion(table: str, segment: str, start: int, end: int) -> BuildHandle:
    """`tables.spark_reingest_segment` on the spark queue, sent by name."""
    from celery import current_app

    from .build_results import poll_for

    return poll_for(
        current_app.send_task(REINGEST_TASK, args=(table, segment, start, end), queue="spark")
    )


def count_failure(raw_table: str) -> None:
    """One more `segmentReingestionFailure` for the table (the durable counter)."""
    from tables.builds import REINGEST_FAILURES
    from tables.models import DurableCounter

    DurableCounter.increment(REINGEST_FAILURES, raw_table)


class SegmentReingestion:
    def __init__(
        self,
        instance: ServerInstance,
        submit: Submit = submit_reingestion,
        count: Callable[[str], None] = count_failure,
        timeout_s: float = CONSUMPTION_END_TIMEOUT_S,
        poll_s: float = 0.5,
    ) -> None:
        self.instance = instance
        self.submit = submit
        self.count = count
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._running: dict[str, ReingestionJob] = {}  # segment -> job
        self._stop = threading.Event()
        workers = max((os.cpu_count() or 2) // 2, 1)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="reingestion-worker")

    # --- the endpoints ------------------------------------------------------------------------
    def jobs(self) -> list[dict[str, Any]]:
        """The running jobs, oldest first."""
        with self._lock:
            running = sorted(self._running.values(), key=lambda j: j.start_time_ms)
        return [job.as_json() for job in running]

    def start(self, segment: str) -> dict[str, Any]:
        """Check and start re-ingesting `segment` (module docstring); the job's JSON."""
        table, start, end = self._check(segment)
        with self._lock:
            if segment in self._running:
                raise ReingestionRefused(
                    409, f"Re-ingestion for segment: {segment} is already in progress."
                )
            job = ReingestionJob(str(uuid.uuid4()), segment, int(time.time() * 1000))
            self._running[segment] = job
        try:
            self._pool.submit(self._run, job, table, start, end)
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._finished(segment)
            raise ReingestionRefused(503, "the server is stopping") from None
        log.info("re-ingesting %s [%d, %d) as job %s", segment, start, end, job.job_id)
        return job.as_json()

    def _check(self, segment: str) -> tuple[str, int, int]:
        name = LLCSegmentName.parse(segment)
        if name is None:
            raise ReingestionRefused(400, f"Segment name is not in LLC format: {segment}")
        table = table_name_with_type(name.table_name, "REALTIME")
        if self.instance.replicas_of(table) is None:
            raise ReingestionRefused(404, f"Table data manager not found for table: {table}")
        ctx = self.instance.ctx()
        found = read_record(ctx.client, ctx.paths.segment(table, segment))
        if found is None:
            raise ReingestionRefused(404, f"Segment ZK metadata not found for segment: {segment}")
        meta = SegmentZKMetadata.from_znrecord(found.record)
        if meta.download_url is not None:
            raise ReingestionRefused(
                400,
                f"Download URL is already present for segment: {segment}. No need to re-ingest.",
            )
        start, end = parse_offset(meta.start_offset), parse_offset(meta.end_offset)
        if start is None or end is None:
            raise ReingestionRefused(500, f"Null start/end offset for segment: {segment}")
        return table, start, end

    # --- the job ------------------------------------------------------------------------------
    def _run(self, job: ReingestionJob, table: str, start: int, end: int) -> None:
        segment = job.segment_name
        try:
            outcome = self._rebuild(table, segment, start, end)
            self._upload(table, segment, str(outcome["download_uri"]))
            log.info("re-ingested %s (job %s): %s rows", segment, job.job_id, outcome.get("rows"))
        except _TaskFailed as exc:
            log.error("re-ingestion of %s (job %s) failed in Spark: %s", segment, job.job_id, exc)
        except Exception:
            log.exception("re-ingestion of %s (job %s) failed", segment, job.job_id)
            try:
                self.count(raw_table_name(table))
            except Exception:
                log.exception("cannot count the failed re-ingestion of %s", segment)
        finally:
            self._finished(segment)

    def _finished(self, segment: str) -> None:
        with self._idle:
            self._running.pop(segment, None)
            self._idle.notify_all()

    def _rebuild(self, table: str, segment: str, start: int, end: int) -> dict[str, Any]:
        handle = self.submit(table, segment, start, end)
        deadline = time.monotonic() + self.timeout_s
        while not handle.ready():
            if self._stop.wait(self.poll_s):
                handle.revoke()
                raise RuntimeError("the server stopped before the rebuild finished")
            if time.monotonic() > deadline:
                handle.revoke()
                raise TimeoutError(f"the rebuild took longer than {self.timeout_s:.0f} s")
        if not handle.successful():
            raise _TaskFailed(repr(handle.get(propagate=False)))
        return dict(handle.get(timeout=10))

    def _upload(self, table: str, segment: str, download_uri: str) -> None:
        """Pinot's uploadReingestedSegment: the tar's metadata files to the lead controller."""
        store = self.instance.committer.deep_store()
        key = store.key_for_uri(download_uri)
        if key is None:
            raise ValueError(f"{download_uri} is not in the deep store")
        with store.open_read(key) as stream:
            files = read_metadata_files(stream)
        body, content_type = _multipart(
            {METADATA_FILE: files[METADATA_FILE], CREATION_META: files[CREATION_META]}
        )
        raw = raw_table_name(table)
        base = self._leader(table)
        query = urllib.parse.urlencode({"tableName": raw})
        request = urllib.request.Request(
            f"{base}{REINGESTED_PATH}?{query}", data=body, method="POST"
        )
        request.add_header("Authorization", f"Bearer {self.instance.client.token}")
        request.add_header("Content-Type", content_type)
        for header, value in zip(UPLOAD_HEADERS, ("METADATA", download_uri, "true"), strict=True):
            request.add_header(header, value)
        try:
            with urllib.request.urlopen(request, timeout=UPLOAD_TIMEOUT_S) as reply:
                answer = json.loads(reply.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            exc.close()
            raise RuntimeError(f"the controller refused it (HTTP {exc.code}): {detail}") from None
        log.info("%s: the controller completed the re-ingestion: %s", segment, answer)

    def _leader(self, table: str) -> str:
        locator = self.instance.client.locator
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            base = locator.url_for(table)
            if base is not None:
                return base
            if time.monotonic() > deadline or self._stop.wait(self.poll_s):
                raise RuntimeError(f"no lead controller for {table}")

    # --- life cycle ---------------------------------------------------------------------------
    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no job runs (True) or `timeout_s` passed (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._running, timeout=timeout_s)

    def stop(self) -> None:
        """Running jobs give up at their next poll; no new job starts."""
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
