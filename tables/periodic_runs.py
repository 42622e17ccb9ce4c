"""One run of each controller periodic task, as the Celery tasks of `tables.tasks` call them.

- `validate(table, trigger, run_id, takeover_ms)`: the healing manager (Pinot's
  RealtimeSegmentValidationManager, `tables.controller.healing`) on `table` (raw or with type)
  or on every REALTIME table (`takeover_ms`: see `tables.healing_triggers`). Each table's
  `HealingReport` is stored as a `HealingRun` (idempotent per run id and table); a table whose
  run raised (ZooKeeper down: `tables.outages.outage_reason` says so) is stored with the
  error. (A repair that had to start past offsets the stream had dropped is counted in
  `llcStreamDataLoss` by the healing manager itself, so runs made outside Celery count too.)
- Leadership: the worker acts on behalf of each table's lead controller, read once per invocation
  (`tables.cluster.leadership.table_leaders`: the live MASTER of the table's partition of
  leadControllerResource, or the cluster leader when the resource is disabled). The run records it
  (`HealingRun.lead_controller`) and uses it as the manager's `source` (the holder of the table's
  healing lock, the sender of its reset messages). A table whose partition has no live lead
  controller is not validated, as Pinot runs no validation for a table nobody leads: its run is
  recorded with nothing done and, in `skipped`, the partition and why it has no leader. A
  leadership change during the run does not stop it: its writes are compare-and-set and the table
  lock keeps a second run out.
- `check_status(table)`: Pinot's SegmentStatusChecker over the mirror (`tables.status_checker`).
  It only reads and reports, so it reports every table, leaderless ones included (that is where
  they show), where Pinot's lead controllers report only the tables they lead.
- Both count Pinot's meters in durable counters keyed by task name: `controllerPeriodicTaskRun`
  +1 per invocation, `controllerPeriodicTaskError` +1 per invocation that failed: it could not
  list the tables or one table's run failed (raised, or reported an error). A leaderless table is
  no error.
Settings (Pinot's keys in the README) are read here, in `healing_settings()`, and nowhere else.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from django.conf import settings

from tables import builds
from tables.cluster import context
from tables.cluster.context import ClusterContext
from tables.cluster.leadership import TableLeaders, table_leaders
from tables.controller.healing import (
    HealingReport,
    HealingSettings,
    RealtimeSegmentValidationManager,
)
from tables.domain.names import InvalidName, raw_table_name, table_name_with_type
from tables.domain.periods import (
    REALTIME_SEGMENT_VALIDATION,
    SEGMENT_STATUS_CHECKER,
    TASK_ERROR_COUNTER,
    TASK_RUN_COUNTER,
)
from tables.models import DurableCounter, HealingRun
from tables.outages import outage_reason
from tables.status_checker import check_tables

__all__ = ["TRIGGERS", "check_status", "healing_settings", "new_run_id", "validate"]

log = logging.getLogger(__name__)

TRIGGERS = tuple(HealingRun.Trigger.values)  # schedule, mirror, api, leader


def healing_settings() -> HealingSettings:
    """The healing manager's settings, from Django settings."""
    return HealingSettings(
        partial_offline_repair=settings.PARTIAL_OFFLINE_REPLICA_REPAIR_ENABLED,
        error_auto_reset=settings.SEGMENT_ERROR_AUTO_RESET,
        tmp_retention_s=settings.TMP_FILE_RETENTION_SECONDS,
    )


def new_run_id(trigger: str, seed: str | None = None) -> str:
    """`<trigger>-<8 hex>` ("api-1a2b3c4d", as Pinot's API ids); from `seed` (a Celery task id)
    when given, so a redelivered task keeps its run id."""
    digits = (seed or uuid.uuid4().hex).replace("-", "")[:8]
    return f"{trigger}-{digits}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _reason(exc: BaseException) -> str:
    return outage_reason(exc) or f"{type(exc).__name__}: {exc}"


def _typed(table: str) -> str:
    try:
        return table_name_with_type(raw_table_name(table))
    except InvalidName:
        return table


def _record_failure(
    table: str, run_id: str, trigger: str, started_ms: int, error: str, leader: str = ""
) -> None:
    HealingRun.record(
        {
            "table": _typed(table),
            "runId": run_id,
            "trigger": trigger,
            "startedMs": started_ms,
            "finishedMs": _now_ms(),
            "error": error,
            "leadController": leader,
        }
    )


def _record_leaderless(table: str, leaders: TableLeaders, run_id: str, trigger: str) -> None:
    now = _now_ms()
    HealingRun.record(
        {
            "table": table,
            "runId": run_id,
            "trigger": trigger,
            "startedMs": now,
            "finishedMs": now,
            "skipped": [
                f"{leaders.partition(table)}: no lead controller ({leaders.why_none(table)}); "
                "the table is not validated until it has one, as Pinot runs no validation for "
                "a table without a lead controller"
            ],
        }
    )


class _Managers:
    """One healing manager per lead controller it acts for (its `source`)."""

    def __init__(self, ctx: ClusterContext) -> None:
        self.ctx, self.settings = ctx, healing_settings()
        self._made: dict[str, RealtimeSegmentValidationManager] = {}

    def acting_for(self, source: str) -> RealtimeSegmentValidationManager:
        if source not in self._made:
            self._made[source] = RealtimeSegmentValidationManager(
                self.ctx, self.settings, source=source, deep_store=builds.deep_store
            )
        return self._made[source]


def _run_one(
    managers: _Managers,
    leaders: TableLeaders,
    table: str,
    run_id: str,
    trigger: str,
    takeover_ms: int | None = None,
) -> dict[str, Any]:
    typed, started = _typed(table), _now_ms()
    leader: str | None = None
    found: HealingReport | None = None
    try:
        leader = leaders.leader(typed)
        if leader is not None:
            found = managers.acting_for(leader).run_table(
                table, run_id=run_id, trigger=trigger, takeover_ms=takeover_ms
            )
    except Exception as exc:  # recorded and counted; the other tables still run
        log.exception("healing run %s of %s failed", run_id, table)
        _record_failure(table, run_id, trigger, started, _reason(exc), leader or "")
        return {"table": typed, "actions": 0, "error": _reason(exc), "leadController": leader}
    if found is None:
        log.info("healing run %s: %s has no lead controller; not validated", run_id, typed)
        _record_leaderless(typed, leaders, run_id, trigger)
        return {"table": typed, "actions": 0, "error": None, "leadController": None}
    report = {**found.as_dict(), "leadController": leader}
    HealingRun.record(report)
    actions = report.get("actions") or []
    return {
        "table": report["table"],
        "actions": len(actions),
        "error": report.get("error"),
        "leadController": leader,
    }


def validate(
    table: str | None, trigger: str, run_id: str, takeover_ms: int | None = None
) -> dict[str, Any]:
    """One invocation of the healing manager; see the module docstring. `takeover_ms` comes with
    a run a new lead controller asked for (trigger "leader"): when it took the table over."""
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger {trigger!r} is not one of {', '.join(TRIGGERS)}")
    DurableCounter.increment(TASK_RUN_COUNTER, REALTIME_SEGMENT_VALIDATION)
    started = _now_ms()
    try:
        ctx = context.current()
        managers = _Managers(ctx)
        lister = managers.acting_for(settings.CONTROLLER_INSTANCE_ID)
        tables = [table] if table else lister.realtime_tables()
        leaders = table_leaders(ctx)
    except Exception as exc:
        DurableCounter.increment(TASK_ERROR_COUNTER, REALTIME_SEGMENT_VALIDATION)
        if table:
            _record_failure(table, run_id, trigger, started, _reason(exc))
        log.warning("healing run %s could not start: %s", run_id, _reason(exc))
        return {"runId": run_id, "tables": [], "error": _reason(exc)}
    results = [_run_one(managers, leaders, name, run_id, trigger, takeover_ms) for name in tables]
    if any(r["error"] for r in results):
        DurableCounter.increment(TASK_ERROR_COUNTER, REALTIME_SEGMENT_VALIDATION)
    return {"runId": run_id, "tables": results, "error": None}


def check_status(table: str | None = None) -> dict[str, Any]:
    """One invocation of the segment status checker; see the module docstring."""
    DurableCounter.increment(TASK_RUN_COUNTER, SEGMENT_STATUS_CHECKER)
    try:
        summary = check_tables(
            _now_ms(),
            settings.STATUS_CHECKER_WAIT_FOR_PUSH_SECONDS * 1000,
            settings.REDIS_URL,
            table,
        )
    except Exception:
        DurableCounter.increment(TASK_ERROR_COUNTER, SEGMENT_STATUS_CHECKER)
        raise
    if summary.failed:
        DurableCounter.increment(TASK_ERROR_COUNTER, SEGMENT_STATUS_CHECKER)
    return summary.as_dict()
