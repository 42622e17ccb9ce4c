"""Whom the lead controller believes in the segment completion protocol (ARCHITECTURE §5).

A completion call (segmentConsumed, segmentStoppedConsuming, segmentCommitStart,
segmentCommitEndWithMetadata, extendBuildTime) steers a partition: whoever reports the highest
offset becomes the committer and the other replicas are told to CATCH_UP to it. So a call is
believed only when all of these hold, checked in this order:

1. it presents the cluster token (`Authorization: Bearer <token>`): none -> `noToken`, another
   scheme, a malformed header or another token -> `badToken` (HTTP 401);
2. the named instance is a live participant (its LIVEINSTANCES znode exists) -> else
   `instanceNotLive` (403);
3. the instance holds a replica of the named segment in the table's IdealState (any state) -> else
   `notReplica` (403; also when the segment is not in the IdealState at all);
4. the offset is not beyond the stream partition's latest offset (the offset the next produced
   message will get: a replica's "next offset to read" never exceeds it) -> else `offsetPastEnd`
   (400). When the latest offset cannot be read (the stream is away) this check is skipped: the
   caller has already shown the token and is a live replica, and refusing would stall commits for
   as long as the stream is away.

Pure: the caller (the controller) does the reads and passes what it found. A refusal changes
nothing; the controller answers Pinot's FAILED response with the refusal's `reason`.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "REFUSED_COUNTER",
    "Cause",
    "Refusal",
    "check_caller",
    "check_token",
    "refusal_counter_name",
]

REFUSED_COUNTER = "llcCompletionCallsRefused"


class Cause(StrEnum):
    NO_TOKEN = "noToken"
    BAD_TOKEN = "badToken"
    NOT_LIVE = "instanceNotLive"
    NOT_REPLICA = "notReplica"
    OFFSET_PAST_END = "offsetPastEnd"


HTTP_STATUS: Mapping[Cause, int] = MappingProxyType(
    {
        Cause.NO_TOKEN: 401,
        Cause.BAD_TOKEN: 401,
        Cause.NOT_LIVE: 403,
        Cause.NOT_REPLICA: 403,
        Cause.OFFSET_PAST_END: 400,
    }
)


def refusal_counter_name(cause: Cause) -> str:
    """The durable counter (cluster-wide) counting refusals of one cause."""
    return f"{REFUSED_COUNTER}.{cause}"


@dataclass(frozen=True)
class Refusal:
    cause: Cause
    reason: str  # for the caller and the log: what was wrong, never a secret

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.cause]


def check_token(authorization: str | None, expected: str) -> Refusal | None:
    """The `Authorization` header against the cluster token (constant-time comparison)."""
    if not authorization:
        return Refusal(Cause.NO_TOKEN, "no cluster token (Authorization: Bearer <token>)")
    parts = authorization.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return Refusal(Cause.BAD_TOKEN, "the Authorization header is not 'Bearer <token>'")
    if not expected or not hmac.compare_digest(parts[1].encode(), expected.encode()):
        return Refusal(Cause.BAD_TOKEN, "invalid cluster token")
    return None


def check_caller(
    instance: str,
    segment: str,
    offset: int,
    *,
    live: bool,
    replicas: Collection[str],
    latest_offset: int | None,
) -> Refusal | None:
    """Rules 2-4 of the module contract for an authenticated call.

    `replicas`: the instances the IdealState lists for `segment` (empty when it lists no such
    segment); `latest_offset`: the partition's latest offset, None when it could not be read.
    """
    if not live:
        return Refusal(Cause.NOT_LIVE, f"{instance} is not a live instance of the cluster")
    if instance not in replicas:
        return Refusal(
            Cause.NOT_REPLICA, f"{instance} holds no replica of {segment} in the IdealState"
        )
    if latest_offset is not None and offset > latest_offset:
        return Refusal(
            Cause.OFFSET_PAST_END,
            f"offset {offset} is beyond the stream partition's latest offset {latest_offset}",
        )
    return None
