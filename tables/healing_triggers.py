"""Healing runs requested by the mirror, debounced (faster than Pinot's hourly schedule).

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
"""

from __future__ import annotations

import logging

from celery import current_app
from django.conf import settings

from tables.redisconn import get_redis

__all__ = ["KEY_PREFIX", "TASK", "TASK_EXPIRES_S", "TRIGGER", "key_for", "request_healing"]

log = logging.getLogger(__name__)

TASK = "tables.realtime_segment_validation"
TRIGGER = "mirror"
KEY_PREFIX = "healing:requested:"
TASK_EXPIRES_S = 300


def key_for(table: str) -> str:
    return f"{KEY_PREFIX}{table}"


def request_healing(table: str, reason: str, *, redis_url: str | None = None) -> bool:
    """See the module docstring; `table` is the name with type."""
    if not settings.HEALING_TRIGGER_FROM_MIRROR:
        return False
    client = get_redis(redis_url or settings.REDIS_URL)
    seconds = max(1, int(settings.HEALING_TRIGGER_DEBOUNCE_SECONDS))
    key = key_for(table)
    if not client.set(key, reason[:500].encode(), nx=True, ex=seconds):
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
