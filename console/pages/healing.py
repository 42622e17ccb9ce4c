"""The table page's healing history and the "Run healer now" button (database only).

`history(table)` is the table's newest `HealingRun` rows (what the healing manager, Pinot's
RealtimeSegmentValidationManager, repaired, why, what it left waiting and what failed), shaped
for the template in one query. `requested_run(table, run_id)` is the run an operator just asked
for (the table page's `?healing_run=<id>`): its result when recorded, else when and by whom it was
asked (from the audit log), so the page can say "still running for 12 s" while
`static/console/healing.js` polls `/api/v1/healing/runs/<id>`.

`run_now(request, table)` is the console's "Run healer now", the page's twin of
`GET /periodictask/run?taskname=RealtimeSegmentValidationManager&tableName=` (console.api.periodic):
operators only (action `run_periodic_task`), REALTIME tables only; it sends the Celery task
`tables.realtime_segment_validation` by name (pages never import the controller: import contract
"pages-read-the-mirror") under a fresh run id `api-<8 hex>` (`tables.periodic_runs.new_run_id`,
also the Celery task id) with trigger "api", and audits the outcome as the API does (refusals
included; detail `taskName`, `taskId`, `table`, which `requested_run` reads back).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from celery import current_app
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from console import roles
from console.audit import record
from console.pages import display
from tables.domain.periods import REALTIME_SEGMENT_VALIDATION
from tables.models import AuditEntry, HealingRun, MirroredTable
from tables.periodic_runs import new_run_id

__all__ = [
    "ACTION",
    "HISTORY_SIZE",
    "TASK",
    "ActionRow",
    "Refused",
    "RequestedRun",
    "RunRow",
    "enqueue",
    "history",
    "requested_run",
    "run_now",
    "valid_run_id",
]

TASK = "tables.realtime_segment_validation"
ACTION = "run_periodic_task"  # audited as GET /periodictask/run audits it
TRIGGER = HealingRun.Trigger.API  # an operator asked, as with GET /periodictask/run
HISTORY_SIZE = 10
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")

KIND_LABELS = {
    "commitStoppedAfterStep1": "commit stopped after step 1",
    "commitStoppedAfterStep2": "commit stopped after step 2",
    "partitionEnded": "partition ended",
    "partialOfflineReplicas": "OFFLINE replicas repaired",
    "allReplicasOffline": "all replicas OFFLINE",
    "noConsumingSegment": "no CONSUMING segment",
    "newPartition": "new stream partition",
    "duplicateSequence": "duplicate segment deleted",
    "errorReset": "ERROR replicas reset",
    "orphanUploadDeleted": "orphan upload deleted",
    "reingestTriggered": "re-ingestion started",
}
TRIGGER_LABELS = {"schedule": "schedule", "mirror": "mirror sync", "api": "operator"}


def valid_run_id(text: str) -> bool:
    return bool(_RUN_ID.fullmatch(text))


def enqueue(table: str, run_id: str) -> None:
    """Queue one healing run of `table` (typed name) under `run_id`."""
    kwargs = {"table": table, "trigger": str(TRIGGER), "run_id": run_id}
    current_app.send_task(TASK, kwargs=kwargs, task_id=run_id)


class Refused(Exception):
    """The page refuses the request: `status` and the reason to show."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def run_now(request: Any, table: MirroredTable) -> str:
    """Queue one healing run of `table` for the signed-in operator; returns its run id. Raises
    Refused (403 for a role that may not, 400 for a table that is not REALTIME), audited DENIED or
    REJECTED; a broker failure is audited FAILED and re-raised."""
    name = table.name
    if not roles.can(request.user, ACTION):
        record(request, ACTION, name, AuditEntry.Result.DENIED, status_code=403)
        raise Refused(403, f"role {roles.role_of(request.user)!r} may not run the healer")
    if table.table_type != "REALTIME":
        reason = f"{name}: the healing manager repairs REALTIME tables only"
        _audit(request, name, AuditEntry.Result.REJECTED, 400, {"error": reason})
        raise Refused(400, reason)
    run_id = new_run_id(str(TRIGGER))
    detail = {"taskName": REALTIME_SEGMENT_VALIDATION, "taskId": run_id, "table": name}
    try:  # sent once the request's writes are committed: at once, outside a transaction
        transaction.on_commit(lambda: enqueue(name, run_id))
    except Exception as exc:  # the broker is down: the outage page (503) or a 500 follows
        error = f"queueing {TASK} failed: {type(exc).__name__}: {exc}"
        _audit(request, name, AuditEntry.Result.FAILED, 503, {**detail, "error": error})
        raise
    _audit(request, name, AuditEntry.Result.OK, 200, detail)
    return run_id


def _audit(request: Any, table: str, result: str, status: int, detail: dict[str, Any]) -> None:
    record(request, ACTION, table, result, status_code=status, detail=detail)


@dataclass(frozen=True)
class ActionRow:
    kind: str
    label: str
    detail: str
    partition: int | None
    segment: str
    new_segment: str
    instances: list[str]
    data_loss: bool

    @classmethod
    def build(cls, raw: Any) -> ActionRow:
        item = raw if isinstance(raw, dict) else {"detail": str(raw)}
        kind = str(item.get("kind") or "")
        partition = item.get("partition")
        return cls(
            kind=kind,
            label=KIND_LABELS.get(kind, kind or "repair"),
            detail=str(item.get("detail") or ""),
            partition=partition if isinstance(partition, int) else None,
            segment=str(item.get("segment") or ""),
            new_segment=str(item.get("new_segment") or ""),
            instances=[str(i) for i in item.get("instances") or []],
            data_loss=bool(item.get("data_loss")),
        )


@dataclass(frozen=True)
class RunRow:
    run_id: str
    trigger: str
    trigger_label: str
    started_at: dt.datetime
    duration_text: str
    actions: list[ActionRow] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def data_loss(self) -> bool:
        return any(a.data_loss for a in self.actions)

    @property
    def outcome(self) -> str:
        """failed | repaired | waiting | clean: what the run's row is marked with."""
        if self.error:
            return "failed"
        if self.actions:
            return "repaired"
        return "waiting" if self.waiting else "clean"

    @classmethod
    def build(cls, run: HealingRun) -> RunRow:
        elapsed_ms = int((run.finished_at - run.started_at).total_seconds() * 1000)
        return cls(
            run_id=run.run_id,
            trigger=run.trigger,
            trigger_label=TRIGGER_LABELS.get(run.trigger, run.trigger),
            started_at=run.started_at,
            duration_text=display.millis(elapsed_ms),
            actions=[ActionRow.build(a) for a in run.actions or []],
            waiting=[str(w) for w in run.waiting or []],
            skipped=[str(s) for s in run.skipped or []],
            error=run.error,
        )


def history(table: str, limit: int = HISTORY_SIZE) -> list[RunRow]:
    """The newest `limit` runs of `table` (typed name), newest first (one query)."""
    runs = HealingRun.objects.filter(table=table).order_by("-started_at", "-id")[:limit]
    return [RunRow.build(run) for run in runs]


@dataclass(frozen=True)
class RequestedRun:
    """A run an operator asked for on this table: when and by whom, its result once recorded."""

    run_id: str
    poll_url: str
    requested_at: dt.datetime | None
    requested_by: str
    elapsed_text: str
    result: RunRow | None
    now_ms: int  # the server's clock when the page was built (healing.js counts on from it)

    @property
    def requested_ms(self) -> int | None:
        return None if self.requested_at is None else int(self.requested_at.timestamp() * 1000)


def requested_run(table: str, run_id: str, now: dt.datetime | None = None) -> RequestedRun | None:
    """The run `run_id` of `table` as the page's `?healing_run=` names it (two queries); None
    for a malformed id."""
    if not valid_run_id(run_id):
        return None
    recorded = HealingRun.objects.filter(table=table, run_id=run_id).first()
    asked = (
        AuditEntry.objects.filter(action=ACTION, target=table, detail__taskId=run_id)
        .order_by("-at")
        .first()
    )
    now = now or timezone.now()
    return RequestedRun(
        run_id=run_id,
        poll_url=reverse("api:healing-run", kwargs={"run_id": run_id}),
        requested_at=asked.at if asked else None,
        requested_by=asked.username if asked else "",
        elapsed_text=display.duration((now - asked.at).total_seconds()) if asked else "",
        result=RunRow.build(recorded) if recorded else None,
        now_ms=int(now.timestamp() * 1000),
    )
