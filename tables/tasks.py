"""Thin Celery tasks over the table services. `tables.spark_*` tasks run on the spark queue."""

from __future__ import annotations

import os
import time

from celery import shared_task
from django.conf import settings

from tables.segments.spark import get_session


@shared_task(name="tables.spark_probe", ignore_result=False)
def spark_probe() -> dict[str, object]:
    """Make (or reuse) this worker process's SparkSession and run one small job."""
    started = time.monotonic()
    spark = get_session(settings.SPARK_MASTER, settings.SPARK_DRIVER_MEMORY)
    rows = spark.range(1000).selectExpr("sum(id) AS s").collect()[0]["s"]
    return {
        "pid": os.getpid(),
        "sum": rows,
        "master": spark.sparkContext.master,
        "version": spark.version,
        "seconds": round(time.monotonic() - started, 3),
    }
