"""Healing runs requested outside the schedule, debounced (faster than Pinot's hourly schedule).

`request_healing(table, reason)` asks for one run of the healing manager on `table` (Pinot's
RealtimeSegmentValidationManager, the Celery task `tables.realtime_segment_validation`, trigger
"mirror"), unless one was requested for that table within HEALING_TRIGGER_DEBOUNCE_SECONDS:
- the debounce is one Redis `SET healing:requested:<table> <reason> NX EX <seconds>`, shared by
  every process, so concurrent syncs (or a sync every few seconds) ask for at most one run per
  table per debounce window. Returns True when this call sent the task.
- the task is sent by name (`current_app.send_task`): this module imports no controller code. It
  expires after `TASK_EXPIRES_S` unstarted, so runs do not pile up while no worker listens (the
  mirror asks again once the debounce key is gone).
- HEALING_TRIGGER_FROM_MIRROR=false turns it off (returns False, sends nothing). When Redis or the
  broker fails, nothing is sent, the key is dropped so the next sync may ask again, and the error
  propagates to the caller (the sync records it as a warning).

`request_leader_validation(tables, controller, takeover_ms)` is what a controller calls when it
becomes the lead controller of tables (it gained partitions of leadControllerResource): one run per
gained REALTIME table (names with or without type; OFFLINE ones are left out), trigger "leader",
with `takeover_ms` (ZooKeeper's mtime of the controller's CURRENTSTATE write that claimed the
partitions: the run finishes at once a commit the former lead controller left half-done), so the
new leader's tables are validated now rather than at the next scheduled run (Pinot waits for it,
up to an hour: pinot issue #3594). Debounced like `request_healing` but under its own key, so a
mirror request does not hide it: `healing:leader:<table>:<takeover_ms>` (value: the controller),
one run per takeover (a second takeover within the window still gets its run: a commit half-done
by the controller that led in between would otherwise wait for the guard), or, without a
takeover time, `healing:leader:<table>`, one run per table per window. The run itself
looks the lead controller up again when a worker runs it and acts on behalf of whoever leads the
table then. Returns how many tasks were sent. A failure of Redis or the broker is logged and that
table's key dropped; it never reaches the caller (a controller taking over must not fail for it).
HEALING_TRIGGER_ON_LEADERSHIP=false (default true) turns it off.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import current_app
from django.conf import settings

from tables.domain.names import OFFLINE, raw_table_name, table_name_with_type, table_type_of
from tables.redisconn import get_redis

__all__ = [
    "KEY_PREFIX",
    "LEADER_KEY_PREFIX",
    "LEADER_TRIGGER",
    "TASK",
    "TASK_EXPIRES_S",
    "TRIGGER",
    "key_for",
    "leader_key_for",
    "request_healing",
    "request_leader_validation",
]

log = logging.getLogger(__name__)

TASK = "tables.realtime_segment_validation"
TRIGGER = "mirror"
LEADER_TRIGGER = "leader"
KEY_PREFIX = "healing:requested:"
LEADER_KEY_PREFIX = "healing:leader:"
TASK_EXPIRES_S = 300


def key_for(table: str) -> str:
    return f"{KEY_PREFIX}{table}"


def leader_key_for(table: str, takeover_ms: int | None = None) -> str:
    suffix = "" if takeover_ms is None else f":{takeover_ms}"
    return f"{LEADER_KEY_PREFIX}{table}{suffix}"


def _debounce_s() -> int:
    return max(1, int(settings.HEALING_TRIGGER_DEBOUNCE_SECONDS))


def request_healing(table: str, reason: str, *, redis_url: str | None = None) -> bool:
    """See the module docstring; `table` is the name with type."""
    if not settings.HEALING_TRIGGER_FROM_MIRROR:
        return False
    client = get_redis(redis_url or settings.REDIS_URL)
    key = key_for(table)
    if not client.set(key, reason[:500].encode(), nx=True, ex=_debounce_s()):
        return False
    try:
        current_app.send_task(
            TASK, kwargs={"table": table, "trigger": TRIGGER}, expires=TASK_EXPIRES_S
        )
    except Exception:
        client.delete(key)
        raise
    log.info("healing run of %s requested by the mirror: %s", table, reason)
    return True


def _realtime(tables: Iterable[str]) -> list[str]:
    """The REALTIME tables among `tables`, with type, each once, in name order."""
    return sorted(
        {table_name_with_type(raw_table_name(t)) for t in tables if table_type_of(t) != OFFLINE}
    )


def request_leader_validation(
    tables: Iterable[str],
    controller: str,
    takeover_ms: int | None = None,
    *,
    redis_url: str | None = None,
) -> int:
    """See the module docstring: one run (trigger "leader") per REALTIME table of `tables` that
    `controller` now leads; returns how many were sent."""
    if not settings.HEALING_TRIGGER_ON_LEADERSHIP:
        return 0
    url = redis_url or settings.REDIS_URL
    sent = sum(
        1 for table in _realtime(tables) if _request_for_leader(table, controller, takeover_ms, url)
    )
    if sent:
        log.info("%s became the lead controller: %d healing run(s) requested", controller, sent)
    return sent


def _request_for_leader(
    table: str, controller: str, takeover_ms: int | None, redis_url: str
) -> bool:
    key = leader_key_for(table, takeover_ms)
    try:
        client = get_redis(redis_url)
        if not client.set(key, controller[:255].encode(), nx=True, ex=_debounce_s()):
            return False
    except Exception:
        log.warning("cannot request a run of %s for %s", table, controller, exc_info=True)
        return False
    try:
        current_app.send_task(
            TASK,
            kwargs={"table": table, "trigger": LEADER_TRIGGER, "takeover_ms": takeover_ms},
            expires=TASK_EXPIRES_S,
        )
    except Exception:
        log.warning("cannot send a run of %s for %s", table, controller, exc_info=True)
        try:
            client.delete(key)
        except Exception:  # the key expires by itself
            log.warning("cannot drop %s", key, exc_info=True)
        return False
    return True
