"""The deep-store upload repair, as decisions (pure; round 2 §B.4, §B.5): Pinot's
`uploadToDeepStoreIfMissing` and `syncCommittingSegments`.

`plan_deep_store_repairs(segments, pauseless=, now_ms=, max_completion_ms=)` picks the segments
whose deep-store copy a server must upload (`UploadFacts`: status, download URL, metadata znode
mtime, the instances whose ExternalView state is ONLINE):
- COMMITTING, in a pauseless table, with at least one ONLINE replica (the committer built it but
  its commit end never came): kind COMMITTING, the controller adopts the server's metadata. One
  without an ONLINE replica is left to the ERROR repair (re-ingestion);
- DONE with `segment.download.url` exactly "" (committed to peers only, any table): kind
  MISSING_URL, only the URL (and a differing CRC) is filled. It is a candidate even with no ONLINE
  replica: the attempt then fails and counts, as Pinot's does;
- in a pauseless table both wait until the MAX_SEGMENT_COMPLETION_TIME guard has passed
  (`now_ms > mtime + max_completion_ms`): a `DeepStoreWait` until then.
Segments that retention would purge are not skipped: this project purges nothing by retention.

`uploaded_metadata` is what a server's `uploadCommittedSegment` answers (Pinot's
`updateCommittingSegmentZKMetadata`): the segment's metadata turned DONE with the copy's facts and
the uploaded URI, whatever its status was (a DONE one keeps its other fields).

`check_server_fields` validates such an answer; `is_upload_key` tells whether a deep-store key is
one of the segment's uploads (`<raw>/<segment>.tmp.<uuid>`), the only thing the controller moves;
`repaired_record` is the controller's compare-and-set write (None when the segment is no longer a
candidate of that kind).

`stale_committing(listed, statuses)` is the part of `committingSegments` to drop: segments with no
metadata or completed (DONE/UPLOADED). An IN_PROGRESS one stays: a commit start adds the segment
to the list (step 0) just before marking it COMMITTING (step 1).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from tables.domain.segment_metadata import (
    CRC,
    DATA_CRC,
    DOWNLOAD_URL,
    END_OFFSET,
    START_OFFSET,
    STATUS,
    SegmentStatus,
    SegmentZKMetadata,
)
from tables.domain.znrecord import ZNRecord

__all__ = [
    "DeepStorePlan",
    "DeepStoreRepair",
    "DeepStoreRepairKind",
    "DeepStoreWait",
    "ServerUpload",
    "UploadFacts",
    "check_server_fields",
    "is_upload_key",
    "plan_deep_store_repairs",
    "repaired_record",
    "stale_committing",
    "uploaded_metadata",
]

COMMITTING, DONE = str(SegmentStatus.COMMITTING), str(SegmentStatus.DONE)
_COMPLETED = (str(SegmentStatus.DONE), str(SegmentStatus.UPLOADED))


class DeepStoreRepairKind(StrEnum):
    COMMITTING = "committing"  # adopt the server's metadata (status DONE)
    MISSING_URL = "missingUrl"  # DONE with download URL "": fill it in


@dataclass(frozen=True)
class UploadFacts:
    """One segment as the repair sees it."""

    segment: str
    status: str
    download_url: str | None  # None: the key is absent
    mtime_ms: int  # the metadata znode's mtime
    online: tuple[str, ...] = ()  # instances whose ExternalView state is ONLINE


@dataclass(frozen=True)
class DeepStoreRepair:
    kind: DeepStoreRepairKind
    segment: str
    servers: tuple[str, ...]  # ONLINE replicas, sorted: one is picked at random
    reason: str


@dataclass(frozen=True)
class DeepStoreWait:
    segment: str
    until_ms: int
    reason: str


@dataclass
class DeepStorePlan:
    repairs: list[DeepStoreRepair] = field(default_factory=list)
    waits: list[DeepStoreWait] = field(default_factory=list)


def _candidate(facts: UploadFacts, pauseless: bool) -> tuple[DeepStoreRepairKind, str] | None:
    held = ", ".join(facts.online)
    if facts.status == COMMITTING and pauseless and facts.online:
        return (
            DeepStoreRepairKind.COMMITTING,
            f"{facts.segment} is COMMITTING without a deep-store copy; ONLINE on {held}",
        )
    if facts.status == DONE and facts.download_url == "":
        where = f"ONLINE on {held}" if held else "no replica is ONLINE"
        return (
            DeepStoreRepairKind.MISSING_URL,
            f"{facts.segment} is DONE without a download URL (committed to peers only); {where}",
        )
    return None


def plan_deep_store_repairs(
    segments: Iterable[UploadFacts], *, pauseless: bool, now_ms: int, max_completion_ms: int
) -> DeepStorePlan:
    """The uploads to ask for, and the candidates still inside the guard (module docstring)."""
    plan = DeepStorePlan()
    for facts in sorted(segments, key=lambda f: f.segment):
        found = _candidate(facts, pauseless)
        if found is None:
            continue
        kind, reason = found
        until = facts.mtime_ms + max_completion_ms
        if pauseless and now_ms <= until:
            plan.waits.append(DeepStoreWait(facts.segment, until, reason))
            continue
        plan.repairs.append(
            DeepStoreRepair(kind, facts.segment, tuple(sorted(facts.online)), reason)
        )
    return plan


def uploaded_metadata(
    current: SegmentZKMetadata,
    *,
    total_docs: int,
    start_time_ms: int,
    end_time_ms: int,
    crc: int,
    size_bytes: int,
    download_url: str,
) -> SegmentZKMetadata:
    """The metadata a server answers after uploading its copy (module docstring); ValueError
    when the segment has no end offset (it never stopped consuming)."""
    if current.end_offset is None:
        raise ValueError(f"{current.segment_name} has no end offset: it is still consuming")
    base = current
    if current.status not in (SegmentStatus.IN_PROGRESS, SegmentStatus.COMMITTING):
        base = replace(current, status=SegmentStatus.COMMITTING)
    return base.mark_done(
        end_offset=current.end_offset,
        start_time_ms=start_time_ms,
        end_time_ms=end_time_ms,
        total_docs=total_docs,
        crc=crc,
        data_crc=crc,
        size_in_bytes=size_bytes,
        download_url=download_url,
        index_version=current.index_version or "v3",
        crypter=current.crypter,
    )


@dataclass(frozen=True)
class ServerUpload:
    """A checked `uploadCommittedSegment` answer."""

    fields: dict[str, str]
    uploaded_uri: str
    crc: int


def check_server_fields(answer: object, segment: str) -> ServerUpload:
    """The server's answer as simple fields; ValueError naming what is wrong with it."""
    if not isinstance(answer, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in answer.items()
    ):
        raise ValueError(f"{segment}: the answer is not an object of strings")
    fields = dict(answer)
    if fields.get(STATUS) != DONE:
        raise ValueError(f"{segment}: the answer's {STATUS} is {fields.get(STATUS)!r}, not DONE")
    uri = fields.get(DOWNLOAD_URL) or ""
    if not uri:
        raise ValueError(f"{segment}: the answer has no {DOWNLOAD_URL}")
    try:
        crc = int(fields.get(CRC, ""))
    except ValueError:
        raise ValueError(f"{segment}: the answer's {CRC} is not a number") from None
    return ServerUpload(fields, uri, crc)


def is_upload_key(key: str | None, raw_table: str, segment: str) -> bool:
    """Is `key` `<raw>/<segment>.tmp.<uuid>` (Pinot's tmp-file rule)?"""
    prefix = f"{raw_table}/{segment}.tmp."
    if key is None or not key.startswith(prefix):
        return False
    try:
        uuid.UUID(key[len(prefix) :])
    except ValueError:
        return False
    return True


def repaired_record(
    current: ZNRecord, kind: DeepStoreRepairKind, upload: ServerUpload, download_url: str
) -> ZNRecord | None:
    """The metadata the controller writes; None when `current` is no longer a candidate of
    `kind`; ValueError when the server's offsets differ from ZooKeeper's."""
    simple = current.simple_fields
    out = current.copy()
    if kind is DeepStoreRepairKind.COMMITTING:
        if simple.get(STATUS) != COMMITTING:
            return None
        for key in (START_OFFSET, END_OFFSET):
            if key in simple and upload.fields.get(key, simple[key]) != simple[key]:
                raise ValueError(
                    f"{current.id}: the server's {key} {upload.fields.get(key)!r} is not "
                    f"ZooKeeper's {simple[key]!r}"
                )
        out.simple_fields = {**simple, **upload.fields, DOWNLOAD_URL: download_url}
        return out
    if simple.get(STATUS) != DONE or simple.get(DOWNLOAD_URL) != "":
        return None
    out.simple_fields[DOWNLOAD_URL] = download_url
    if simple.get(CRC) != str(upload.crc):
        out.simple_fields[CRC] = str(upload.crc)
        if DATA_CRC in simple:
            out.simple_fields[DATA_CRC] = str(upload.crc)
    return out


def stale_committing(listed: Sequence[str], statuses: Mapping[str, str | None]) -> list[str]:
    """The entries of `committingSegments` to drop (module docstring); `statuses`: segment ->
    its ZK status, None when it has no metadata (a segment absent from it is kept)."""
    return [
        s for s in listed if s in statuses and (statuses[s] is None or statuses[s] in _COMPLETED)
    ]
