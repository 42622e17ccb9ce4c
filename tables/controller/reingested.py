"""The controller's completion of a re-ingested segment (round 2 §C.3): Pinot's
`uploadReingestedSegment` and `ZKOperator.completeReingestedSegmentOperations`.

Contract of `complete_reingested_segment` (each refusal a `ReingestRefused` with its HTTP status;
a refusal changes nothing):
1. The request's custom headers, Pinot's checks, each 400: UPLOAD_TYPE must be METADATA
   ("Reingestion upload type must be METADATA"), DOWNLOAD_URI non-empty, COPY_SEGMENT_TO_DEEP_STORE
   true. The segment's name comes from its `metadata.properties` (`segment.name`; 400 without).
2. The segment's ZK metadata: absent 404; status other than COMMITTING 409 ("must be in
   COMMITTING status").
3. The rebuilt tar at DOWNLOAD_URI (a URI of the deep store, or a key in it such as
   `<raw>/<segment>.tmp.<uuid>`; 400 when it is not there) is moved to the segment's final key
   (nothing to move when it is already there, as Pinot skips the copy of a URI onto itself).
4. COMMITTING -> DONE, compare-and-set on the version read in step 2 (a concurrent change
   raises `BadVersion`: a 500), with `SegmentZKMetadata.mark_done` as every commit writes it: CRC
   and data CRC from `creation.meta`, start/end times and docs from `metadata.properties`, the
   size of the final object, the download URL `<vip>/segments/<raw>/<segment>`; the end offset
   is unchanged.
5. The segment leaves `committingSegments` of PAUSELESS_DEBUG_METADATA (best effort, logged),
   and its build back-off record (`tables.build_backoffs`, left by the replicas whose builds
   failed) goes: the re-ingested build is the segment's successful one (best effort, logged).
6. Every replica is reset (`ErrorRepairer.reset`, Pinot's resetSegment): ERROR -> OFFLINE, then
   the servers follow the IdealState back to ONLINE and download the copy.

While a call runs it counts in Pinot's global gauge `reingestedSegmentUploadsInProgress`: the view
(`console.api.reingested`) holds a lease in Redis around it (`monitoring.in_progress`), so the
figure covers every controller process and forgets one that died mid-call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from django.db import DatabaseError

from tables import build_backoffs
from tables.cluster.context import ClusterContext
from tables.cluster.errors import NotFound
from tables.domain.names import table_name_with_type
from tables.domain.segment_metadata import SegmentStatus, SegmentZKMetadata
from tables.segments.deepstore import DeepStore
from tables.segments.segment_format import parse_properties, unpack_creation_meta
from tables.zk.records import read_record, write_record

from .healing_errors import ErrorRepairer
from .llc import change_committing

__all__ = [
    "COPY_SEGMENT_TO_DEEP_STORE",
    "DOWNLOAD_URI",
    "UPLOAD_TYPE",
    "ReingestRefused",
    "ReingestedUpload",
    "complete_reingested_segment",
]

log = logging.getLogger(__name__)

# FileUploadDownloadClient.CustomHeaders
UPLOAD_TYPE = "UPLOAD_TYPE"
DOWNLOAD_URI = "DOWNLOAD_URI"
COPY_SEGMENT_TO_DEEP_STORE = "COPY_SEGMENT_TO_DEEP_STORE"
METADATA = "METADATA"


class ReingestRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ReingestedUpload:
    """What a server sends: the three custom headers and the tar's two metadata files."""

    upload_type: str | None
    download_uri: str | None
    copy_to_deep_store: str | None
    metadata_properties: str | None
    creation_meta: bytes | None


def _checked(upload: ReingestedUpload) -> tuple[str, Mapping[str, str], int]:
    """Step 1: the download URI, the properties and the CRC (ReingestRefused 400)."""
    if upload.upload_type != METADATA:
        raise ReingestRefused(400, "Reingestion upload type must be METADATA")
    if not upload.download_uri:
        raise ReingestRefused(400, f"{DOWNLOAD_URI} is required for a re-ingested segment upload")
    if (upload.copy_to_deep_store or "").lower() != "true":
        raise ReingestRefused(
            400, f"{COPY_SEGMENT_TO_DEEP_STORE} must be true for a re-ingested segment upload"
        )
    if upload.metadata_properties is None or upload.creation_meta is None:
        raise ReingestRefused(400, "metadata.properties and creation.meta are required")
    try:
        properties = parse_properties(upload.metadata_properties)
        crc, _created = unpack_creation_meta(upload.creation_meta)
    except ValueError as exc:
        raise ReingestRefused(400, f"unreadable segment metadata: {exc}") from None
    if not properties.get("segment.name"):
        raise ReingestRefused(400, "metadata.properties has no segment.name")
    return upload.download_uri, properties, crc


def _int(properties: Mapping[str, str], key: str) -> int:
    try:
        return int(properties.get(key, "-1"))
    except ValueError:
        return -1


def _move_to_final(store: DeepStore, raw: str, segment: str, uri: str) -> int:
    """Step 3; the size of the final object."""
    final = store.segment_key(raw, segment)
    source = store.key_for_uri(uri) if "://" in uri else uri
    if source is None or not store.exists(source):
        raise ReingestRefused(400, f"{DOWNLOAD_URI} {uri} is not in the deep store")
    if source != final:
        store.move(source, final)  # inside the deep store: no download
    return store.size(final)


def done_metadata(
    current: SegmentZKMetadata,
    properties: Mapping[str, str],
    crc: int,
    size_bytes: int,
    download_url: str,
) -> SegmentZKMetadata:
    """Step 4's metadata: COMMITTING -> DONE with the rebuilt segment's facts."""
    return current.mark_done(
        end_offset=str(current.end_offset),
        start_time_ms=_int(properties, "segment.start.time"),
        end_time_ms=_int(properties, "segment.end.time"),
        total_docs=_int(properties, "segment.total.docs"),
        crc=crc,
        data_crc=crc,
        size_in_bytes=size_bytes,
        download_url=download_url,
    )


def complete_reingested_segment(
    ctx: ClusterContext,
    raw_table: str,
    upload: ReingestedUpload,
    store: DeepStore,
    vip_url: str,
    source: str,
) -> dict[str, object]:
    """Complete a re-ingestion (module docstring); Pinot's success body plus the reset replicas."""
    uri, properties, crc = _checked(upload)
    segment = properties["segment.name"]
    raw = raw_table.removesuffix("_REALTIME").removesuffix("_OFFLINE")
    table = table_name_with_type(raw, "REALTIME")
    path = ctx.paths.segment(table, segment)
    found = read_record(ctx.client, path)
    if found is None:
        raise ReingestRefused(404, f"Segment ZK metadata not found for segment: {segment}")
    current = SegmentZKMetadata.from_znrecord(found.record)
    if current.status != SegmentStatus.COMMITTING:
        raise ReingestRefused(
            409,
            f"Segment: {segment} must be in COMMITTING status for re-ingestion, "
            f"but is {current.status}",
        )
    size = _move_to_final(store, raw, segment, uri)
    url = f"{vip_url.rstrip('/')}/segments/{quote(raw)}/{quote(segment)}"
    done = done_metadata(current, properties, crc, size, url)
    write_record(ctx.client, path, done.to_znrecord(), found.version)
    try:
        change_committing(ctx.client, table, ctx.paths.pauseless_debug(table), segment, False)
    except Exception:
        log.exception("%s: cannot remove it from committingSegments", segment)
    try:
        build_backoffs.succeeded(table, segment)
    except DatabaseError:
        log.exception("%s: cannot clear its build back-off record", segment)
    try:
        reset = ErrorRepairer(ctx, source).reset(table, segment)
    except NotFound:
        log.warning("%s is DONE but not in the IdealState: no replica to reset", segment)
        reset = []
    log.info("re-ingested %s is DONE (crc %d); reset replicas %s", segment, crc, reset)
    return {
        "status": f"Successfully uploaded reingested segment: {segment} of table: {table}",
        "resetInstances": reset,
    }
