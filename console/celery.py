"""The Celery app. Configuration comes from Django settings (CELERY_* names)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_shutdown.connect
def _stop_spark(**_: object) -> None:
    from tables.segments.spark import stop_session

    stop_session()
