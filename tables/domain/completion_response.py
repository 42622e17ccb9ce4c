"""Segment completion protocol responses (reference §5.2, §5.3), shared by controller and servers.

Contract:
- `Response.to_json` gives exactly Pinot's keys: `status`, `streamPartitionMsgOffset` (always
  present, null when unset), `buildTimeSec` (-1 when unset), `isSplitCommitType` (always true,
  deprecated), then `controllerVipUrl` and `segmentLocation` only when set, and this project's
  `commitStarted` (true only: a COMMIT whose segmentConsumed also ran commit start, the early
  commit start of `tables.domain.completion`; a server that does not know it ignores it) and
  `committerChosen` (true only: a HOLD while another replica is the chosen committer, so the
  asker has nothing to do until that commit ends or fails; servers then wait Pinot's full hold
  time before asking again instead of their shorter first hold, and going ONLINE ends the wait).
- Offsets travel as strings, whatever their type in the stream.
- The `RESP_*` constants are Pinot's canned responses: no offset, buildTimeSec -1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "RESP_COMMIT_CONTINUE",
    "RESP_COMMIT_SUCCESS",
    "RESP_DISCARD",
    "RESP_FAILED",
    "RESP_NOT_LEADER",
    "RESP_NOT_SENT",
    "RESP_PROCESSED",
    "Response",
    "Status",
]


class Status(StrEnum):
    NOT_SENT = "NOT_SENT"
    COMMIT = "COMMIT"
    HOLD = "HOLD"
    CATCH_UP = "CATCH_UP"
    DISCARD = "DISCARD"
    KEEP = "KEEP"
    NOT_LEADER = "NOT_LEADER"
    FAILED = "FAILED"
    COMMIT_SUCCESS = "COMMIT_SUCCESS"
    COMMIT_CONTINUE = "COMMIT_CONTINUE"
    PROCESSED = "PROCESSED"
    UPLOAD_SUCCESS = "UPLOAD_SUCCESS"


@dataclass(frozen=True)
class Response:
    status: Status
    offset: str | None = None  # streamPartitionMsgOffset
    build_time_sec: int = -1
    controller_vip_url: str | None = None
    segment_location: str | None = None
    commit_started: bool = False  # the early commit start ran in the call this answers
    committer_chosen: bool = False  # a HOLD: another replica is the chosen committer

    def to_json(self) -> dict[str, Any]:
        """§5.3: the offset key is always present (null when None), the last two only when set."""
        out: dict[str, Any] = {
            "status": str(self.status),
            "streamPartitionMsgOffset": self.offset,
            "buildTimeSec": self.build_time_sec,
            "isSplitCommitType": True,
        }
        if self.controller_vip_url is not None:
            out["controllerVipUrl"] = self.controller_vip_url
        if self.segment_location is not None:
            out["segmentLocation"] = self.segment_location
        if self.commit_started:
            out["commitStarted"] = True
        if self.committer_chosen:
            out["committerChosen"] = True
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Response:
        """Reads what `to_json` writes; unknown keys (e.g. `isSplitCommitType`) are ignored."""
        offset = data.get("streamPartitionMsgOffset")
        return cls(
            status=Status(data["status"]),
            offset=None if offset is None else str(offset),
            build_time_sec=int(data.get("buildTimeSec", -1)),
            controller_vip_url=data.get("controllerVipUrl"),
            segment_location=data.get("segmentLocation"),
            commit_started=data.get("commitStarted") is True,
            committer_chosen=data.get("committerChosen") is True,
        )


# Canned responses: no offset, buildTimeSec -1.
RESP_NOT_SENT = Response(Status.NOT_SENT)
RESP_FAILED = Response(Status.FAILED)
RESP_DISCARD = Response(Status.DISCARD)
RESP_NOT_LEADER = Response(Status.NOT_LEADER)
RESP_PROCESSED = Response(Status.PROCESSED)
RESP_COMMIT_CONTINUE = Response(Status.COMMIT_CONTINUE)
RESP_COMMIT_SUCCESS = Response(Status.COMMIT_SUCCESS)
