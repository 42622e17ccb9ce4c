"""The Celery app. Configuration comes from Django settings (CELERY_* names).

A worker that consumes the `spark` queue lowers its CPU priority to `SPARK_WORKER_NICENESS` before
it starts its pool, so its pool process and the Spark JVM it launches inherit it: a build is
throughput work, and on a host it shares with servers and a controller it must not take the CPU
from the consumers and the completion protocol, whose delays are the ingestion's freshness. Linux
with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`) shares the CPU between
sessions first and applies a nice value only among one session's threads, so a worker that leads
its own session (started with setsid, as the tests' and benches' stacks start it) also sets that
session's autogroup niceness (`/proc/self/autogroup`); one that shares its session (supervisord's
programs share supervisord's) leaves the session alone: it would lower everyone in it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from celery import Celery
from celery.signals import celeryd_after_setup, worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

SPARK_QUEUE = "spark"  # CELERY_TASK_ROUTES sends every tables.spark_* task there

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@celeryd_after_setup.connect
def _lower_spark_priority(sender: str, instance: object, **_: object) -> None:
    from django.conf import settings

    # Called once the worker has selected its queues (-Q), before its pool starts.
    niceness = settings.SPARK_WORKER_NICENESS
    if niceness > 0 and SPARK_QUEUE in instance.app.amqp.queues:
        lower_priority(niceness)


def lower_priority(niceness: int) -> None:
    """Nice this process by `niceness`, and its session's autogroup when it leads the session."""
    os.nice(niceness)
    if os.getsid(0) == os.getpid():
        # Without autogroup scheduling there is no such file: the nice value is all there is.
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text(str(niceness))


@worker_process_shutdown.connect
def _stop_spark(**_: object) -> None:
    from tables.segments.spark import stop_session

    stop_session()
