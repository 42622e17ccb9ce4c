"""Console-level tasks: round-trip probes for the health checks."""

from __future__ import annotations

import os
import time

from celery import shared_task

from monitoring import health


@shared_task(name="console.ping", ignore_result=False)
def ping() -> dict[str, object]:
    """Answered by a worker process: proves the broker, a worker and the result backend work."""
    return {"pid": os.getpid(), "time": time.time()}


@shared_task(name="console.beat_heartbeat")
def beat_heartbeat() -> None:
    """Scheduled by beat; records when the schedule last ran (shown by /healthz)."""
    health.record_beat_heartbeat(time.time())
