"""The errors page's "Failed builds" section and its "Retry now" button (database only).

`rows(table)` is every segment whose committed build failed for a reason waiting cannot cure and
now backs off (`tables.build_backoffs`, `tables.models.FailedBuild`), newest failure first, at
most `ROWS_SHOWN`: table, segment, the servers that tried, the failures in a row, the last error
(trimmed to `ERROR_SHOWN` characters; the full text is the cell's title), the first and last
failure and the next retry ("now" once the back-off is over: the next COMMIT builds).

`retry_now(request, table, segment)` is the button (a CSRF-protected form, the page's twin of
`POST /api/v1/tables/{t}/segments/{s}/retryBuild`): operators only (action `retry_build`, a
viewer's attempt audited DENIED, 403); `tables.build_backoffs.retry` clears the segment's record
(400 for malformed names, 404 for a segment without one, audited REJECTED, nothing changed),
audited OK with the failures it counted. The consumers holding the segment see the record gone
within `tables.server.consumer.BUILD_HOLD_RECHECK_S` and ask the controller again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from console import roles
from console.audit import record, table_target
from tables import build_backoffs
from tables.cluster.errors import ServiceError
from tables.models import AuditEntry, FailedBuild

__all__ = ["ACTION", "ERROR_SHOWN", "ROWS_SHOWN", "FailedBuildRow", "Refused", "retry_now", "rows"]

ACTION = "retry_build"
ROWS_SHOWN = 100
ERROR_SHOWN = 300


class Refused(Exception):
    """The page refuses the request: `status` and the reason to show."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class FailedBuildRow:
    build: FailedBuild
    now: dt.datetime

    @property
    def servers(self) -> list[str]:
        return [str(s) for s in (self.build.servers or [])]

    @property
    def error_text(self) -> str:
        error = self.build.error
        return error if len(error) <= ERROR_SHOWN else error[: ERROR_SHOWN - 1] + "…"

    @property
    def waiting(self) -> bool:
        return self.build.next_retry_at > self.now

    @property
    def next_retry_text(self) -> str:
        if not self.waiting:
            return "now (at the next COMMIT)"
        return self.build.next_retry_at.strftime("%Y-%m-%d %H:%M:%S UTC")


def rows(table: str = "", now: dt.datetime | None = None) -> list[FailedBuildRow]:
    """The failed builds backing off (module docstring)."""
    now = now or timezone.now()
    return [FailedBuildRow(b, now) for b in build_backoffs.rows(table)[:ROWS_SHOWN]]


def retry_now(request: Any, table: str, segment: str) -> dict[str, object]:
    """Clear `segment`'s back-off for the signed-in operator (module docstring); Refused
    otherwise, audited."""
    target = f"{table_target(table)}/{segment}"
    if not roles.can(request.user, ACTION):
        record(request, ACTION, target, AuditEntry.Result.DENIED, status_code=403)
        raise Refused(403, f"role {roles.role_of(request.user)!r} may not retry a failed build")
    try:
        cleared = build_backoffs.retry(table, segment)
    except ServiceError as exc:
        result = AuditEntry.Result.REJECTED if exc.status < 500 else AuditEntry.Result.FAILED
        detail = {"error": exc.message}
        record(request, ACTION, target, result, status_code=exc.status, detail=detail)
        raise Refused(exc.status, exc.message) from None
    record(request, ACTION, target, AuditEntry.Result.OK, status_code=200, detail=cleared)
    return cleared
