"""The table page's re-ingestion requests (database only).

`requests(table)` is what operators asked with the Re-ingest button (the audit log's `reingest`
entries on `<table>/<segment>`, newest first, at most REQUESTS_SHOWN), each with its segment's
status in the mirror now: a started job shows its segment go from COMMITTING to DONE (its
download URL filled) as the mirror follows ZooKeeper. Two queries, one when nothing was asked.

The running jobs come from the servers (`GET /reingestSegment/jobs`), which pages never ask
(import contract "pages-read-the-mirror"): `static/console/reingest.js` fetches them from
`/api/v1/tables/<t>/reingestJobs` (`console.api.reingest`) and posts the button there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tables.models import AuditEntry, MirroredTable

__all__ = ["ACTION", "REQUESTS_SHOWN", "RequestRow", "requests"]

ACTION = "reingest"  # console.api.reingest.ACTION, the audited action
REQUESTS_SHOWN = 10


@dataclass(frozen=True)
class RequestRow:
    """One press of Re-ingest: its audit entry, and its segment's mirrored status now ("" when
    the mirror no longer has the segment)."""

    entry: AuditEntry
    segment: str
    status: str
    download_url: str

    @property
    def detail(self) -> dict[str, Any]:
        return self.entry.detail if isinstance(self.entry.detail, dict) else {}

    @property
    def started(self) -> bool:
        return self.entry.result == AuditEntry.Result.OK

    @property
    def job_id(self) -> str:
        return str(self.detail.get("jobId") or "")

    @property
    def server(self) -> str:
        return str(self.detail.get("server") or "")

    @property
    def done(self) -> bool:
        return self.status == "DONE" and bool(self.download_url)

    @property
    def answer_text(self) -> str:
        if self.started:
            return f"job {self.job_id or '?'} started on {self.server or '?'}"
        error = self.detail.get("error") or "refused"
        return f"{self.entry.result} ({self.entry.status_code or '?'}): {error}"

    @property
    def now_text(self) -> str:
        if not self.status:
            return "no longer in the mirror"
        if self.done:
            return "re-ingested (or committed): in the deep store"
        if self.status == "COMMITTING":
            return "COMMITTING: not done yet (the job runs, or ended without completing it)"
        return f"{self.status}, no download URL"


def requests(table: MirroredTable) -> list[RequestRow]:
    """The table's newest Re-ingest requests (module docstring)."""
    prefix = f"{table.name}/"
    asked = AuditEntry.objects.filter(action=ACTION, target__startswith=prefix)
    entries = list(asked.order_by("-at", "-id")[:REQUESTS_SHOWN])
    if not entries:
        return []
    names = {entry.target[len(prefix) :] for entry in entries}
    found = table.segments.filter(name__in=names).values_list("name", "status", "download_url")
    segments = {name: (status, url) for name, status, url in found}
    rows = []
    for entry in entries:
        segment = entry.target[len(prefix) :]
        status, url = segments.get(segment, ("", ""))
        rows.append(RequestRow(entry, segment, status, url))
    return rows
